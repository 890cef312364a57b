"""Issue 27, a suspicion checked: a manage-page save racing an unsubscribe.

A save (manage page, ``PUT /api/subscription``, ``subscribers set``) read the status, then wrote
the row, with ``status`` in the write when pause or resume changed it. On PostgreSQL (read
committed) and SQLite alike, an unsubscribe committed between the read and the write was
overwritten: a paused reader who clicked "resume" while their unsubscribe link was being
followed ended up active and mailed again. The write is now conditional on the status it read.

The interleaving is made exact, not left to timing: when the save has read the status, the
unsubscribe runs (on its own connection, committed) before the save goes on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event

from newsletter.models import Frequency, SubscriberStatus
from newsletter.store import Store
from tests.conftest import NOW


@contextmanager
def after_status_read(store: Store, action: Any) -> Iterator[list[str]]:
    """Run ``action`` once, right after the first statement that reads a subscriber's status."""
    fired: list[str] = []

    def hook(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not fired and statement.lstrip().upper().startswith("SELECT SUBSCRIBERS.STATUS"):
            fired.append(statement)
            action()

    event.listen(store.engine, "after_cursor_execute", hook)
    try:
        yield fired
    finally:
        event.remove(store.engine, "after_cursor_execute", hook)


@pytest.mark.parametrize("start", [SubscriberStatus.ACTIVE, SubscriberStatus.PAUSED])
@pytest.mark.parametrize("paused", [False, True])
def test_a_save_racing_an_unsubscribe_never_makes_the_reader_active_again(
    store: Store, start: SubscriberStatus, paused: bool
) -> None:
    sub, _ = store.add_subscriber("ada@example.org", topics=("gpu-kernels",), now=NOW, status=start)
    later = NOW.replace(hour=NOW.hour + 1)
    with after_status_read(store, lambda: store.unsubscribe_id(sub.id, later)) as fired:
        got = store.update_preferences(
            sub.id,
            topics=("rendering",),
            send_hour=9,
            frequency=Frequency.WEEKLY,
            paused=paused,
            now=later,
        )
    assert fired, "the save no longer reads the status first: rewrite this test"
    after = store.subscriber_by_id(sub.id)
    assert after is not None
    assert after.status is SubscriberStatus.UNSUBSCRIBED, (start, paused, after.status)
    assert got is None  # the save says it could not change an unsubscribed reader
    assert store.unsubscribe_id(sub.id, later) is False  # still unsubscribed: nothing to do


def test_a_save_without_a_race_still_saves(store: Store) -> None:
    sub, _ = store.add_subscriber("bob@example.org", topics=("gpu-kernels",), now=NOW)
    got = store.update_preferences(
        sub.id, topics=("rendering",), send_hour=9, frequency=Frequency.WEEKLY, paused=True, now=NOW
    )
    assert got is not None
    assert (got.status, got.topics, got.send_hour) == (SubscriberStatus.PAUSED, ("rendering",), 9)
