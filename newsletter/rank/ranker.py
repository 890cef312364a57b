"""The run's ranker: every topic scored against the day's papers once, then each reader's digest.

Topics are the operator's; subscribers pick among them. So a run scores every topic against every
new paper once (:class:`Ranker`), and a subscriber's digest is a cheap merge of the chosen topics'
lists minus what that subscriber was already sent; a reader's votes ("more/less like this")
reorder the topics they touch for that reader alone (:meth:`Ranker.reader_items`).

Pure: topics, papers, example papers, vectors and ``now`` in; ranked items out. The parts are
the rules (:mod:`.rules`), the paper index (:mod:`.index`), the scorer and fusion with meaning
(:mod:`.score`), readers' own topics by blocks (:mod:`.own_rows`), reader profiles
(:mod:`.profiles`) and explanations (:mod:`.explain`). One module of about 570 lines: the
build, the shared lists and each reader's pick all read the same arrays of one class, and
what could leave (rows, items, listings, own topics' blocks) has.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from newsletter.config import TopicSettings
from newsletter.models import DigestItem, Later, Paper, TopicSection, is_own_topic
from newsletter.rank.explain import Explainer, Explanation, with_like
from newsletter.rank.index import Documents, PaperIndex
from newsletter.rank.items import PoolIds, PoolOrders, RankedItems
from newsletter.rank.listing import Listing, left_out_ids, union_held, union_size
from newsletter.rank.own_rows import (
    OwnDetail,
    add_block,
    collection_paused,
    plain_rows,
    rank_own_block,
    ranked_blocks,
)
from newsletter.rank.profiles import MAX_VOTES, ProfileSpace, Vote
from newsletter.rank.rows import ByName, Orders, Rows, block_orders
from newsletter.rank.rules import Acronyms, Rule, Vocabulary, compile_rules
from newsletter.rank.score import (
    DEFAULT_FUSION,
    Fusion,
    RankedRows,
    meaning_parts,
    rank_rows,
    reader_scores,
)
from newsletter.semantic.space import MeaningSpace

if TYPE_CHECKING:
    from newsletter.semantic.vectors import Semantic

FloatArray = npt.NDArray[np.float64]

OWN_BLOCK_CELLS = 393_216
"""Readers' own topics are ranked this many topic × paper cells at a time (196 rows over
2,000 papers: 1.5 MiB per float32 array). Blocks this small stay in the processor's cache and
in the memory the process already has: 1,024 rows took twice as long on the 2-core machine of
docs/benchmarks.md, mostly in page faults of fresh 8 MiB arrays."""
OWN_THREADS = 2
"""Threads that rank readers' own topics' blocks (at most one per core; one without
threadpoolctl, which keeps BLAS from taking the cores meanwhile: :func:`ranked_blocks`)."""
SECTIONS_CACHE = 8192
"""Distinct (topics, relevant exclusions) whose sections a ranker keeps (see ``sections``)."""


class Ranker:
    """Scores every topic against a run's papers once; then builds digests per subscriber.

    A topic's list holds the papers with enough evidence (``MIN_EVIDENCE``) whose relevance is
    at least ``RELATIVE_CUT`` of the topic's best today, ordered by relevance × trending ×
    recency; ``left_out`` counts the matches that did not make it.
    """

    @collection_paused
    def __init__(
        self,
        topics: Sequence[TopicSettings],
        papers: Sequence[Paper],
        now: datetime,
        *,
        examples: Sequence[Paper] = (),
        semantic: Semantic | None = None,
        fusion: Fusion = DEFAULT_FUSION,
    ) -> None:
        """``examples``: papers that topics' ``like:`` lists and readers' votes name (they may
        be older than the run's papers); only they can shape a profile. ``semantic``: the
        papers', topics' and examples' vectors (in the order given); without it ranking is
        lexical and profiles are tf-idf."""
        self.now = now
        # The operator's topics first (dense rows), then readers' own (compact rows).
        mine = [is_own_topic(t.name) for t in topics]
        perm = sorted(range(len(topics)), key=mine.__getitem__)
        if perm != list(range(len(topics))):
            topics = [topics[i] for i in perm]
            if semantic is not None:
                semantic = replace(
                    semantic,
                    topics=semantic.topics[perm],
                    keywords=tuple(semantic.keywords[i] for i in perm) if semantic.keywords else (),
                )
        mine = sorted(mine)
        self.n_shared = mine.count(False)
        """The operator's topics: rows ``0 .. n_shared - 1``; readers' own topics follow."""
        self.topics: dict[str, TopicSettings] = {t.name: t for t in topics}
        self._order = {t.name: i for i, t in enumerate(topics)}
        self._rules = [Rule.from_topic(t) for t in topics]
        docs = Documents.read(papers)
        self.acronyms = Acronyms.build(docs.learned)
        self.vocab = Vocabulary(self.acronyms)
        self.queries = compile_rules(self._rules, self.vocab)
        self.index = PaperIndex(papers, self.vocab, now, docs)
        self._boost = np.maximum(self.index.boost, 1e-12)
        likes = {t.name: tuple(getattr(t, "like", ()) or ()) for t in topics}
        self._likes = {name: keys for name, keys in likes.items() if keys}
        wanted = set().union(*self._likes.values()) if self._likes else set()
        self.space: ProfileSpace | None = None
        self.meaning: MeaningSpace | None = None
        """Papers, topics and examples as embedding vectors (semantic ranking), or None."""
        self.fusion = fusion
        n = self.index.n_papers
        if semantic is not None and n and len(topics):
            vectors = {p.key: semantic.papers[j] for j, p in enumerate(self.index.papers)}
            vectors.update(semantic.examples)
            self.meaning = MeaningSpace(
                semantic.papers,
                semantic.topics,
                [self._likes.get(t.name, ()) for t in topics],
                vectors,
                {p.key: p.title for p in (*examples, *self.index.papers)},
                semantic.keywords,
                query=fusion.query,
                own=mine,
                dense_rows=self.n_shared,
            )
        n_own = len(topics) - self.n_shared
        step = max(16, OWN_BLOCK_CELLS // max(n, 1))
        slices = [
            slice(start, min(len(topics), start + step))
            for start in range(self.n_shared, len(topics), step)
        ]
        # Own topics (plain rows) with vectors: by blocks, their lists only, on every core.
        by_blocks = bool(n_own) and self.meaning is not None
        by_blocks = by_blocks and plain_rows(self.queries, slice(self.n_shared, len(topics)))
        own_blocks, stop = (
            ranked_blocks(
                slices,
                lambda sl: self._block(topics, sl, own=by_blocks),
                lambda sl, block: self._record(topics, sl, block),
                threads=OWN_THREADS if by_blocks else 1,
            )
            if n_own
            else (iter(()), None)
        )
        try:  # the own topics' threads run meanwhile; stopped if anything here fails
            if self._likes or examples:
                self.space = ProfileSpace(
                    docs, [*examples, *(p for p in self.index.papers if p.key in wanted)]
                )
            self._key_rank = np.argsort(
                np.argsort([p.key for p in self.index.papers], kind="stable")
            )
            self._scale: dict[str, float] = {}
            self._liked: dict[str, FloatArray] = {}
            self.best: dict[str, float] = {}
            self.left_out: dict[str, int] = {}
            """Per topic, matches not shown: passing mentions, or far below the day's best."""
            shared = self._rank_rows(topics, slice(0, self.n_shared))
            self._topic_list = list(topics)
            detail = OwnDetail(self._own_row)
            self.scores = Rows(shared["scores"], n)
            """topics × papers: relevance × trending × recency of what a topic shows (else 0)."""
            self._relevance = Rows(shared["relevance"], n, detail=lambda i: detail(i, "relevance"))
            self._lexical = Rows(shared["lexical"], n, detail=lambda i: detail(i, "lexical"))
            """topics × papers: keyword, author and category relevance (passing mentions at 0)."""
            self._passes = Rows(
                shared["passes"], n, fill=True, detail=lambda i: detail(i, "passes")
            )
            self._meant_rows = Rows(shared["meant"], n, detail=lambda i: detail(i, "meant"))
            self._admitted_rows = Rows(
                shared["admitted"], n, detail=lambda i: detail(i, "admitted")
            )
            shown: dict[str, list[int]] = {}
            pool: dict[str, list[int]] = {}
            self._orders_for(topics, slice(0, self.n_shared), shared["scores"], shown, pool)
        except BaseException:
            if stop is not None:
                stop()
            raise
        for block in own_blocks:
            add_block(
                block,
                self.scores,
                self._relevance,
                self._lexical,
                self._passes,
                self._meant_rows,
                self._admitted_rows,
            )
        self._meant = ByName(self._meant_rows, self._order) if self.meaning else {}
        """Per topic (semantic ranking): what meaning adds to each paper's relevance."""
        self._admitted = ByName(self._admitted_rows, self._order) if self.meaning else {}
        """Per topic (semantic ranking): the papers a keyword or meaning lets in."""
        self.explainer = Explainer(
            topics=self.topics,
            order=self._order,
            rules=self._rules,
            queries=self.queries,
            index=self.index,
            now=now,
            meaning=self.meaning,
            space=self.space,
            meant=self._meant,
            liked=self._liked,
            best=self.best,
            admitted=self._admitted,
            words_weight=fusion.alpha,
        )
        """Explanations and reasons of these scores (``rank --explain``, each item's reason)."""
        names = list(self._order)
        keys = self._key_rank

        def order_of(digits: int) -> Callable[[str], list[int]]:
            def order(name: str) -> list[int]:  # readers' own topics: only when looked at
                held = self.scores.stored(self._order[name])
                if held is None:
                    row = self.scores[self._order[name]]
                    found: list[int] = block_orders(row[None, :], keys, digits)[0].tolist()
                    return found
                cols, values = held
                cols = cols[values > 0]
                values = np.round(values[values > 0], digits)
                by_score: list[int] = cols[np.lexsort((keys[cols], -values))].tolist()
                return by_score

            return order

        # Each topic's hits in two orders: by score (9 digits) then key, as ``ranked`` lists
        # them, and by the stored (6-digit) score then key, the order sections() merges in.
        # Items (each with its reason) are made only as far as someone reads a list: a run
        # asks for the first dozen of each topic, not for the thousands of matches.
        self.ranked = RankedItems(self, Orders(shown, names, order_of(9)))
        """Each topic's items, best first (made on first look)."""
        pools = Orders(pool, names, order_of(6))
        self._pool_order = PoolOrders(self.ranked, pools)
        self._pool_ids = PoolIds(self.index.papers, pools)
        # Readers with the same topics (and the same already-sent papers among them) get the
        # same sections: picked once, then reused. Bounded; entries are a few references each.
        self._sections: dict[tuple[object, ...], tuple[TopicSection, ...]] = {}

    def _rank_rows(self, topics: Sequence[TopicSettings], sl: slice) -> dict[str, Any]:
        """Rows ``sl`` of every topics × papers array (:func:`rank_rows`), and each of their
        topics' scale, best and ``left_out``."""
        return self._record(topics, sl, self._block(topics, sl, own=False))

    def _block(self, topics: Sequence[TopicSettings], sl: slice, *, own: bool) -> RankedRows:
        """Rows ``sl`` ranked: by :func:`rank_own_block` when ``own`` (readers' own topics,
        plain rows, with vectors), else by :func:`rank_rows`."""
        if own and self.meaning is not None:
            return rank_own_block(
                self.queries, self.index, topics[sl], sl, self.meaning, self.fusion
            )
        return rank_rows(
            self.queries,
            self.index,
            topics[sl],
            sl,
            self.meaning,
            self.fusion,
            self.space,
            self._likes,
        )

    def _record(
        self, topics: Sequence[TopicSettings], sl: slice, block: RankedRows
    ) -> dict[str, Any]:
        for topic, scale, best, out in zip(
            topics[sl], block.scale, block.best, block.left_out, strict=True
        ):
            self._scale[topic.name] = scale
            self.best[topic.name] = best
            self.left_out[topic.name] = out
        self._liked.update(block.liked)
        return block.arrays

    def _own_row(self, i: int) -> dict[str, Any]:
        """Every array of a reader's own topic's row ``i``, made again (:func:`rank_own_block`
        with ``full``: the same numbers as its list)."""
        assert self.meaning is not None  # only rows ranked by rank_own_block are partial
        block = rank_own_block(
            self.queries,
            self.index,
            self._topic_list[i : i + 1],
            slice(i, i + 1),
            self.meaning,
            self.fusion,
            full=True,
        )
        return block.arrays

    def _orders_for(
        self,
        topics: Sequence[TopicSettings],
        sl: slice,
        scores: FloatArray,
        shown: dict[str, list[int]],
        pool: dict[str, list[int]],
    ) -> None:
        """The operator's topics' lists in pool order (6-digit scores, then key) and in the
        order ``ranked`` lists them (9 digits); readers' own topics are ordered when read."""
        names = [t.name for t in topics[sl]]
        for name, order in zip(names, block_orders(scores, self._key_rank, 6), strict=True):
            pool[name] = order.tolist()
        for name, order in zip(names, block_orders(scores, self._key_rank, 9), strict=True):
            shown[name] = order.tolist()

    def reader_items(
        self,
        topic_name: str,
        prefs: Sequence[Vote],
        memo: dict[tuple[tuple[str, ...], tuple[str, ...]], Any] | None = None,
        listing: Listing | None = None,
    ) -> Iterator[DigestItem]:
        """A topic's list for one reader whose votes touch it, best first (lazily).

        Rocchio: the topic's relevance plus the paper's cosine with the reader's profile
        ``β·c(more) − γ·c(less)``, in units of the topic's best keyword match today; then the
        same filters, cut and trending as the shared list. ``memo`` shares profiles between the
        reader's topics; ``listing`` learns which list it is, before the first item.
        """
        mine = [v for v in prefs if v.topic in (None, topic_name)][:MAX_VOTES]
        more = tuple(v.paper_key for v in mine if v.value > 0)
        less = tuple(v.paper_key for v in mine if v.value < 0)
        if self.meaning is not None:
            yield from self._reader_meaning(topic_name, more, less, listing)
            return
        if self.space is None:
            yield from self._pool_order[topic_name]
            return
        memo = {} if memo is None else memo
        if (more, less) not in memo:
            memo[more, less] = self.space.rocchio(more, less)
        found = memo[more, less]
        if found is None:
            yield from self._pool_order[topic_name]
            return
        i = self._order[topic_name]
        total, more_part = found
        scale = self._scale[topic_name]
        rel = self._relevance[i] + scale * total * self._passes[i]
        score = reader_scores(rel, self.topics[topic_name].min_score, self.index.boost)
        if score is None:
            if listing is not None:
                listing.scored(None)
            return
        papers_t = self.index.papers
        lexical = self._lexical[i]
        for j in self._best_first(score, listing=listing):
            reason = self.explainer.cached_reason(topic_name, j)
            if more:
                like_part = scale * self.space.liked(more_part, j)
                if like_part > 0 and like_part >= float(lexical[j]):
                    key = self.space.closest(more, j)
                    if key is not None:
                        reason = with_like(self.space.titles[key], reason)
            yield DigestItem(papers_t[j], topic_name, float(score[j]), reason)

    def _reader_meaning(
        self,
        topic_name: str,
        more: tuple[str, ...],
        less: tuple[str, ...],
        listing: Listing | None = None,
    ) -> Iterator[DigestItem]:
        """:meth:`reader_items` with semantic ranking: the reader's votes move the topic's
        query in the same space (Rocchio, :meth:`MeaningSpace.reader_query`), and the papers
        are fused again with that query: papers like the ones voted up rise, papers like the
        ones voted down sink, and a paper strongly like the votes may come in on meaning."""
        assert self.meaning is not None
        i = self._order[topic_name]
        q = self.meaning.reader_query(i, more, less)
        if q is None:
            yield from self._pool_order[topic_name]
            return
        topic = self.topics[topic_name]
        similarity = (self.meaning.papers @ q)[None, :]
        passes = self._passes[i][None, :]
        matched = (self._lexical[i] * self._passes[i] > 0)[None, :]
        share, admitted = meaning_parts(similarity, passes, matched, self.fusion)
        admitted |= self._admitted_rows[i]  # the topic's candidates stay candidates
        scale = self._scale[topic_name]
        a = self.fusion.alpha
        words = a * self._lexical[i] * self._passes[i]
        meant = (1.0 - a) * share[0] * scale
        rel = (words + meant) * admitted[0]
        score = reader_scores(rel, topic.min_score, self.index.boost)
        if score is None:
            if listing is not None:
                listing.scored(None)
            return
        papers_t = self.index.papers
        gained = meant - self._meant_rows[i]  # what the votes moved
        for j in self._best_first(score, listing=listing):
            reason = self.explainer.cached_reason(topic_name, j)
            if more and gained[j] > 0 and gained[j] >= words[j]:
                key = self.meaning.closest(more, j)
                if key is not None:
                    reason = with_like(self.meaning.labels.get(key, key), reason)
            yield DigestItem(papers_t[j], topic_name, float(score[j]), reason)

    def _best_first(
        self, score: FloatArray, first: int = 48, *, listing: Listing | None = None
    ) -> Iterator[int]:
        """Indices of positive scores, by score then paper key; the best ``first`` (ties
        included) are sorted before the rest, which are sorted only if someone reads on."""
        hits = np.flatnonzero(score > 0)
        if listing is not None:
            listing.scored(score, hits)
        if len(hits) > first:
            kth = -np.partition(-score[hits], first - 1)[first - 1]
            head, tail = hits[score[hits] >= kth], hits[score[hits] < kth]
        else:
            head, tail = hits, hits[:0]
        keys = self._key_rank
        for part in (head, tail):
            yield from part[np.lexsort((keys[part], -score[part]))].tolist()

    _ids_at: dict[int, int] | None = None

    def _positions(self) -> dict[int, int]:
        """Paper id → its position in the index (made on first use)."""
        if self._ids_at is None:
            self._ids_at = {p.id: j for j, p in enumerate(self.index.papers)}
        return self._ids_at

    def _position(self, paper: Paper) -> int:
        for j, p in enumerate(self.index.papers):
            if p.id == paper.id:
                return j
        raise KeyError(paper.id)

    def explanation(self, topic_name: str, paper_index: int) -> Explanation:
        """The parts of a topic × paper score, for reasons and ``--explain``."""
        return self.explainer.explanation(topic_name, paper_index)

    def reason(self, topic_name: str, paper_index: int) -> str:
        """A short, deterministic 'why': "title: mixture of experts · cs.LG · 42 upvotes"."""
        return self.explainer.reason(topic_name, paper_index)

    def explain(self, item: DigestItem) -> Explanation:
        """How a digest item's score was made (``rank --explain``)."""
        return self.explanation(item.topic, self._position(item.paper))

    def sections(
        self,
        topic_names: Sequence[str],
        *,
        exclude_ids: Collection[int] = (),
        max_items: int = 10,
        group_by_topic: bool = True,
        votes: Sequence[Vote] = (),
    ) -> tuple[TopicSection, ...]:
        """A subscriber's digest: their topics' best papers, none twice, none already sent.

        Grouped: a paper wanted by several topics goes to the one where it scores best (while that
        topic has room); each topic shows up to its ``max_items`` (else ``max_items``). Merged: one
        list of at most ``max_items``, still honouring each topic's own ``max_items``. ``votes``
        (the reader's "more/less like this") reorder the topics they touch for this reader
        alone; without votes a reader gets exactly the shared lists.

        Each section knows its ``limit`` and how many good papers of its topic that limit alone
        left out (``more``: in the topic's list, not excluded, not in another section; merged,
        in any of the lists), counted from the lists' sizes without reading them further, and
        lists them only when asked (``later``).
        """
        names = tuple(n for n in dict.fromkeys(topic_names) if n in self.topics)
        excluded = exclude_ids if isinstance(exclude_ids, (set, frozenset)) else set(exclude_ids)
        if votes and (self.space is not None or self.meaning is not None):
            touched = {n for n in names if any(v.topic in (None, n) for v in votes)}
            if touched:
                memo: dict[tuple[tuple[str, ...], tuple[str, ...]], Any] = {}
                listings = {n: Listing(self, n) for n in touched}
                mine = {n: self.reader_items(n, votes, memo, listings[n]) for n in touched}
                return self._pick(
                    names, frozenset(excluded), max_items, group_by_topic, mine, listings
                )
        # The result depends on the exclusions only through the papers these topics can offer.
        relevant: frozenset[int] = frozenset()
        if excluded:
            pools = [self._pool_ids[n] for n in names]
            relevant = frozenset(p for p in excluded if any(p in pool for pool in pools))
        key = (names, relevant, max_items, group_by_topic)
        hit = self._sections.get(key)
        if hit is None:
            if len(self._sections) >= SECTIONS_CACHE:
                self._sections.clear()
            hit = self._sections[key] = self._pick(names, relevant, max_items, group_by_topic)
        return hit

    def _pick(
        self,
        names: tuple[str, ...],
        excluded: frozenset[int],
        max_items: int,
        group_by_topic: bool,
        readers: dict[str, Iterator[DigestItem]] | None = None,
        listings: dict[str, Listing] | None = None,
    ) -> tuple[TopicSection, ...]:
        # Each topic's list is already in pool order (score, then key), so a lazy k-way merge
        # yields the same sequence as sorting the whole pool, and stops as soon as every topic
        # is full: a subscriber costs a few dozen items, not every paper their topics match. A
        # topic that is full is not read further (its later items could only be skipped).
        sources = readers or {}
        limits = {n: self.topics[n].max_items or max_items for n in names}
        chosen: dict[str, list[DigestItem]] = {n: [] for n in names}
        heap: list[tuple[float, str, int, DigestItem]] = []
        lists: list[Iterator[DigestItem]] = []
        for k, name in enumerate(names):
            it = iter(sources.get(name, self._pool_order[name]))
            lists.append(it)
            first = next(it, None)
            if first is not None and limits[name] > 0:
                heap.append((-first.score, first.paper.key, k, first))
        heapq.heapify(heap)
        open_topics = sum(1 for n in names if limits[n] > 0)
        taken: set[int] = set()
        total = 0
        while heap:
            if open_topics == 0 or (not group_by_topic and total >= max_items):
                break
            _, _, k, item = heapq.heappop(heap)
            mine = chosen[names[k]]
            limit = limits[names[k]]
            pid = item.paper.id
            if pid not in excluded and pid not in taken:
                taken.add(pid)
                mine.append(item)
                total += 1
                if len(mine) == limit:
                    open_topics -= 1
            if len(mine) < limit:
                following = next(lists[k], None)
                if following is not None:
                    heapq.heappush(heap, (-following.score, following.paper.key, k, following))
        # What the limits left out (issue 44): a list's size less what it showed, what was
        # excluded and what another section took; O(shown + excluded), the lists unread.
        lists_of = [(listings or {}).get(n) or Listing(self, n) for n in names]
        blocked = excluded | taken
        if group_by_topic:
            out = []
            for n, listing in zip(names, lists_of, strict=True):
                mine = chosen[n]
                more = 0
                if 0 < limits[n] == len(mine):  # a section with room left read its whole list
                    own = {i.paper.id for i in mine}
                    elsewhere = [p for p in taken if p not in own]
                    more = listing.size - len(mine) - listing.held(excluded)
                    more -= listing.held(elsewhere)
                later = (
                    Later(functools.partial(left_out_ids, (listing,), blocked)) if more else None
                )
                out.append(
                    TopicSection(n, self.topics[n].label, tuple(mine), limits[n], more, later)
                )
            return tuple(out)
        merged = sorted(
            (i for n in names for i in chosen[n]), key=lambda i: (-i.score, i.paper.key)
        )
        more = union_size(self, lists_of) - union_held(self, lists_of, blocked)
        later = Later(functools.partial(left_out_ids, tuple(lists_of), blocked)) if more else None
        return (TopicSection("all", "Your topics", tuple(merged), max_items, more, later),)
