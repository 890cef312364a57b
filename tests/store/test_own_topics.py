"""Readers' own topics in the store, on SQLite and on the real PostgreSQL: added under a limit
in the reader's order, edited in place, removed (the rest move up), erased with the reader."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import inspect

from newsletter.models import SubscriberStatus
from newsletter.store import Store

NOW = datetime(2026, 11, 17, 6, 0, tzinfo=UTC)


def test_the_own_topics_table_cascades_with_the_reader(store: Store) -> None:
    insp = inspect(store.engine)
    fks = {fk["referred_table"]: fk for fk in insp.get_foreign_keys("own_topics")}
    assert fks["subscribers"]["options"].get("ondelete") == "CASCADE"
    assert store.current_revision() == store.head_revision() == "0016"


def test_own_topics_are_added_in_order_under_the_limit(store: Store) -> None:
    ada, _ = store.add_subscriber("ada@example.org", topics=("moe",), now=NOW)
    bob, _ = store.add_subscriber("bob@example.org", now=NOW)
    one = store.add_own_topic(ada.id, "quantum decoders", "h1", ["2401.04088"], NOW, limit=2)
    two = store.add_own_topic(ada.id, "sparse attention", "h2", [], NOW, limit=2)
    assert one is not None and two is not None
    assert store.add_own_topic(ada.id, "a third one", "h3", [], NOW, limit=2) is None
    again = store.add_own_topic(ada.id, "quantum decoders", "h1", [], NOW, limit=2)
    assert again == one  # the same sentence is one topic
    store.add_own_topic(bob.id, "graph systems", "h4", [], NOW, limit=2)

    mine = store.own_topics_of([ada.id])[ada.id]
    assert [(o.position, o.text, o.examples) for o in mine] == [
        (1, "quantum decoders", ("2401.04088",)),
        (2, "sparse attention", ()),
    ]
    assert mine[0].name == f"own.{one.id}" and mine[0].created == NOW
    assert set(store.own_topics_of([ada.id, bob.id])) == {ada.id, bob.id}
    assert store.own_topics_of([999]) == {}
    assert store.count_own_topics() == 3


def test_an_edit_keeps_the_id_and_place_and_a_removal_closes_the_gap(store: Store) -> None:
    ada, _ = store.add_subscriber("ada@example.org", now=NOW)
    bob, _ = store.add_subscriber("bob@example.org", now=NOW)
    a = store.add_own_topic(ada.id, "first", "h1", [], NOW, limit=3)
    b = store.add_own_topic(ada.id, "second", "h2", [], NOW, limit=3)
    c = store.add_own_topic(ada.id, "third", "h3", [], NOW, limit=3)
    assert a and b and c
    later = NOW + timedelta(hours=1)
    edited = store.edit_own_topic(ada.id, b.id, "second, better", "h2b", ["2401.04088"], later)
    assert edited is not None and edited.id == b.id and edited.position == 2
    assert edited.updated == later and edited.created == NOW
    assert store.edit_own_topic(bob.id, b.id, "not hers", "x", [], later) is None  # not Bob's
    assert store.remove_own_topic(bob.id, a.id) is False
    assert store.remove_own_topic(ada.id, a.id) is True
    assert store.remove_own_topic(ada.id, a.id) is False
    mine = store.own_topics_of([ada.id])[ada.id]
    assert [(o.id, o.position, o.text) for o in mine] == [
        (b.id, 1, "second, better"),
        (c.id, 2, "third"),
    ]


def test_only_active_readers_are_listed_and_erasure_removes_them(store: Store) -> None:
    ada, _ = store.add_subscriber("ada@example.org", now=NOW)
    bob, _ = store.add_subscriber("bob@example.org", now=NOW)
    store.add_own_topic(ada.id, "first", "h1", [], NOW, limit=3)
    store.add_own_topic(bob.id, "other", "h2", [], NOW, limit=3)
    assert store.own_topic_readers() == [ada.id, bob.id]
    store.set_status("bob@example.org", SubscriberStatus.PAUSED, NOW)
    assert store.own_topic_readers() == [ada.id]
    assert store.remove_subscriber("ada@example.org") is True
    assert store.own_topics_of([ada.id]) == {}
    assert store.count_own_topics() == 1
