"""What a pick knows of a topic's list besides the items it reads (issue 44, item 5).

:meth:`~newsletter.rank.Ranker.sections` merges its topics' lists lazily and stops as soon as
every section is full, so most of a list is never read. To say "5 more in the archive" it
must still know how many good papers the limits left out; :class:`Listing` answers from a
list's size and membership alone (the shared list's paper ids, or a reader's scores), in
O(shown + excluded), and lists those papers (:func:`left_out_ids`) only when someone asks for
them (the edition's layout, once per distinct section).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

Ranker = Any
"""The :class:`~newsletter.rank.Ranker` whose lists these are (typed loosely: its module
imports this one, and the house rules allow no import cycle, not even for types)."""

FloatArray = npt.NDArray[np.float64]


class Listing:
    """What a pick knows of one topic's list besides its items (issue 44): how many papers it
    holds and which, to count what a limit left out without reading the rest of it, and its
    papers in order, to list them when someone asks (:class:`~newsletter.models.Later`).

    The shared list (``score`` None) or a reader's own (:meth:`Ranker.reader_items` sets
    ``score``: the list is its positive scores, by score then key).
    """

    __slots__ = ("hits", "name", "ranker", "score")

    def __init__(self, ranker: Ranker, name: str) -> None:
        self.ranker = ranker
        self.name = name
        self.score: FloatArray | None = None
        self.hits: npt.NDArray[np.intp] | None = None

    def scored(self, score: FloatArray | None, hits: npt.NDArray[np.intp] | None = None) -> None:
        """The reader's own list: ``score``'s positive entries (``None``: an empty list)."""
        self.score = np.zeros(len(self.ranker.index.papers)) if score is None else score
        self.hits = np.flatnonzero(self.score > 0) if hits is None else hits

    @property
    def size(self) -> int:
        """How many papers the list holds."""
        if self.hits is None:
            return len(self.ranker._pool_order[self.name]._order)
        return len(self.hits)

    def held(self, ids: Collection[int]) -> int:
        """How many of ``ids`` the list holds."""
        if not ids:
            return 0
        at = self.ranker._positions()
        if self.score is None:  # the shared list: the papers its topic scores above 0
            scores, i = self.ranker.scores, self.ranker._order[self.name]
            return sum(1 for p in ids if p in at and scores.at(i, at[p]) > 0)
        score = self.score
        return sum(1 for p in ids if p in at and score[at[p]] > 0)

    def positions(self) -> list[int]:
        """The list's papers (positions in the index), in the order the pick reads them."""
        if self.score is None or self.hits is None:
            order: list[int] = self.ranker._pool_order[self.name]._order
            return order
        hits, keys = self.hits, self.ranker._key_rank
        return [int(j) for j in hits[np.lexsort((keys[hits], -self.score[hits]))]]


def in_list(listing: Listing) -> npt.NDArray[np.bool_]:
    """Which of the index's papers ``listing`` holds."""
    r = listing.ranker
    mask = np.zeros(len(r.index.papers), dtype=bool)
    if listing.hits is not None:
        mask[listing.hits] = True
    else:
        mask[r._pool_order[listing.name]._order] = True
    return mask


def union_size(ranker: Ranker, lists: Sequence[Listing]) -> int:
    """How many papers the lists hold together (a paper in two lists counts once)."""
    if len(lists) == 1:
        return lists[0].size
    mask = np.zeros(len(ranker.index.papers), dtype=bool)
    for listing in lists:
        mask |= in_list(listing)
    return int(mask.sum())


def union_held(ranker: Ranker, lists: Sequence[Listing], ids: Collection[int]) -> int:
    """How many of ``ids`` any of the lists holds."""
    if len(lists) == 1:
        return lists[0].held(ids)
    at = ranker._positions()
    masks = [in_list(listing) for listing in lists]
    return sum(1 for p in ids if p in at and any(m[at[p]] for m in masks))


def left_out_ids(lists: Sequence[Listing], blocked: Collection[int]) -> tuple[int, ...]:
    """The ids of the lists' papers not in ``blocked`` (excluded, or shown in the digest),
    best first: by a paper's best score in any of the lists, then key, as the pick merges."""
    if len(lists) == 1:
        papers = lists[0].ranker.index.papers
        ids = (papers[j].id for j in lists[0].positions())
        return tuple(p for p in ids if p not in blocked)
    best: dict[int, tuple[float, str]] = {}
    for listing in lists:
        r = listing.ranker
        row = r.scores[r._order[listing.name]] if listing.score is None else listing.score
        for j in listing.positions():
            paper = r.index.papers[j]
            if paper.id in blocked:
                continue
            score = float(np.round(row[j], 6)) if listing.score is None else float(row[j])
            if paper.id not in best or -score < best[paper.id][0]:
                best[paper.id] = (-score, paper.key)
    return tuple(sorted(best, key=best.__getitem__))
