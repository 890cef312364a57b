"""The readers' own topics part of the store's protocols (:mod:`newsletter.store.protocol`
re-exports it): each reader's own topics, added under a limit, edited, removed (:mod:`.own_topics`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from newsletter.models import OwnTopic


class OwnTopicReads(Protocol):
    """What a send reads about readers' own topics."""

    def own_topics_of(self, subscriber_ids: Sequence[int]) -> dict[int, tuple[OwnTopic, ...]]:
        """Each of these readers' own topics in their order (readers without any left out)."""
        ...

    def own_topic_readers(self) -> list[int]:
        """The active readers that have own topics, by id."""
        ...


class OwnTopics(OwnTopicReads, Protocol):
    """Readers' own topics: added under a limit, edited, removed, counted."""

    def add_own_topic(
        self,
        subscriber_id: int,
        text: str,
        text_hash: str,
        examples: Sequence[str],
        now: datetime,
        *,
        limit: int,
    ) -> OwnTopic | None:
        """Add an own topic last; ``None`` at ``limit``; the same text is not added twice."""
        ...

    def edit_own_topic(
        self,
        subscriber_id: int,
        topic_id: int,
        text: str,
        text_hash: str,
        examples: Sequence[str],
        now: datetime,
    ) -> OwnTopic | None:
        """Change one of the reader's own topics; ``None`` when they have none with that id."""
        ...

    def remove_own_topic(self, subscriber_id: int, topic_id: int) -> bool:
        """Remove one of the reader's own topics; False when they have none with that id."""
        ...

    def count_own_topics(self) -> int:
        """How many own topics all readers have."""
        ...
