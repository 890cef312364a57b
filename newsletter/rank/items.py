"""A ranker's lists of items, made only as far as someone reads them.

A run scores every topic against every paper, but a digest reads the first dozen items of a
few topics: :class:`RankedItems` makes an item (and its reason) on first look,
:class:`ItemsInOrder` walks one topic's list in the order the pick merges, and
:class:`PoolIds` gives the ids of a topic's papers on first use.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from newsletter.models import DigestItem, Paper


class RankedItems(Mapping[str, tuple[DigestItem, ...]]):
    """Topic → its items best first; each item (reason included) made once, on first use."""

    def __init__(self, ranker: Any, orders: Mapping[str, list[int]]) -> None:
        # ranker: the Ranker (it imports this module; no cycle, not even for types)
        self._ranker = ranker
        self._orders = orders
        self._made: dict[tuple[str, int], DigestItem] = {}

    def item(self, topic_name: str, j: int) -> DigestItem:
        """The topic's item for paper ``j`` (the index's position)."""
        found = self._made.get((topic_name, j))
        if found is None:
            r = self._ranker
            score = round(float(r.scores.at(r._order[topic_name], j)) * 1e6) / 1e6  # np.round(x, 6)
            reason = r.explainer.cached_reason(topic_name, j)
            found = DigestItem(r.index.papers[j], topic_name, score, reason)
            self._made[topic_name, j] = found
        return found

    def __getitem__(self, topic_name: str) -> tuple[DigestItem, ...]:
        return tuple(self.item(topic_name, j) for j in self._orders[topic_name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._orders)

    def __len__(self) -> int:
        return len(self._orders)

    def __contains__(self, name: object) -> bool:
        return name in self._orders


class PoolIds(dict[str, frozenset[int]]):
    """Topic → the ids of the papers in its list, made on first use (most of a run's topics
    are never asked: readers' own topics are asked once)."""

    def __init__(self, papers: Sequence[Paper], orders: Mapping[str, Any]) -> None:
        super().__init__()
        self._papers = papers
        self._orders = orders

    def __missing__(self, name: str) -> frozenset[int]:
        papers = self._papers
        found = self[name] = frozenset(papers[j].id for j in self._orders[name])
        return found


class ItemsInOrder:
    """One topic's items in the order sections() merges them, made as far as it reads."""

    __slots__ = ("_items", "_name", "_order")

    def __init__(self, items: RankedItems, name: str, order: list[int]) -> None:
        self._items = items
        self._name = name
        self._order = order

    def __iter__(self) -> Iterator[DigestItem]:
        item, name = self._items.item, self._name
        for j in self._order:
            yield item(name, j)


class PoolOrders(Mapping[str, ItemsInOrder]):
    """Topic → its items in the order the pick merges (:class:`ItemsInOrder`), made on first
    use: a run has a list per reader's own topic, and each is read once."""

    def __init__(self, items: RankedItems, orders: Mapping[str, list[int]]) -> None:
        self._items = items
        self._orders = orders
        self._made: dict[str, ItemsInOrder] = {}

    def __getitem__(self, name: str) -> ItemsInOrder:
        found = self._made.get(name)
        if found is None:
            found = self._made[name] = ItemsInOrder(self._items, name, self._orders[name])
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._orders)

    def __len__(self) -> int:
        return len(self._orders)

    def __contains__(self, name: object) -> bool:
        return name in self._orders
