"""Votes in the store, on SQLite and on the real PostgreSQL: set, replace, clear, read, erase."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import inspect

from newsletter.errors import StoreError
from newsletter.models import PaperData, Vote
from newsletter.sources.ingest import decide
from newsletter.store import Store

NOW = datetime(2026, 11, 17, 6, 0, tzinfo=UTC)


def add_papers(store: Store, *keys: str) -> dict[str, int]:
    batch = [PaperData(key=k, title=f"Paper {k}", abstract="About things.") for k in keys]
    store.write_papers("test", decide(batch, {}), NOW)
    return {k: p.id for k, p in store.papers_by_keys(keys).items()}


def test_the_votes_table_has_its_constraints(store: Store) -> None:
    insp = inspect(store.engine)
    assert "votes" in insp.get_table_names()
    uniques = [sorted(u["column_names"]) for u in insp.get_unique_constraints("votes")]
    assert ["paper_id", "subscriber_id"] in uniques
    fks = {fk["referred_table"]: fk for fk in insp.get_foreign_keys("votes")}
    assert fks["subscribers"]["options"].get("ondelete") == "CASCADE"
    assert "papers" in fks


def test_a_vote_is_stored_replaced_by_a_new_one_and_cleared(store: Store) -> None:
    ids = add_papers(store, "2611.00001", "2611.00002")
    sub, _ = store.add_subscriber("ada@example.org", topics=("moe",), now=NOW)
    assert store.votes_of(sub.id) == []

    store.set_vote(sub.id, ids["2611.00001"], 1, "moe", NOW)
    store.set_vote(sub.id, ids["2611.00001"], 1, "moe", NOW)  # idempotent
    assert store.votes_of(sub.id) == [
        Vote("2611.00001", ids["2611.00001"], "Paper 2611.00001", 1, "moe", NOW)
    ]
    later = NOW + timedelta(hours=1)
    store.set_vote(sub.id, ids["2611.00001"], -1, None, later)  # the new vote replaces the old
    store.set_vote(sub.id, ids["2611.00002"], 1, "moe", later + timedelta(minutes=1))
    votes = store.votes_of(sub.id)
    assert [(v.paper_key, v.value, v.topic) for v in votes] == [
        ("2611.00002", 1, "moe"),  # newest first
        ("2611.00001", -1, None),
    ]
    assert votes[1].created_at == later and votes[1].created_at.tzinfo is not None
    assert votes[0].more and not votes[1].more

    assert store.clear_vote(sub.id, ids["2611.00001"]) is True
    assert store.clear_vote(sub.id, ids["2611.00001"]) is False
    assert [v.paper_key for v in store.votes_of(sub.id)] == ["2611.00002"]


def test_a_vote_is_plus_or_minus_one(store: Store) -> None:
    ids = add_papers(store, "2611.00001")
    sub, _ = store.add_subscriber("ada@example.org", topics=("moe",), now=NOW)
    with pytest.raises(ValueError, match="\\+1 or -1"):
        store.set_vote(sub.id, ids["2611.00001"], 2, None, NOW)
    assert store.votes_of(sub.id) == []


def test_a_vote_for_an_unknown_subscriber_or_paper_stores_nothing(store: Store) -> None:
    ids = add_papers(store, "2611.00001")
    sub, _ = store.add_subscriber("ada@example.org", topics=("moe",), now=NOW)
    with pytest.raises(StoreError, match="cannot record a vote"):
        store.set_vote(sub.id + 1000, ids["2611.00001"], 1, None, NOW)
    with pytest.raises(StoreError, match="cannot record a vote"):
        store.set_vote(sub.id, ids["2611.00001"] + 1000, 1, None, NOW)
    assert store.votes_for([sub.id, sub.id + 1000]) == {}


def test_votes_for_many_readers_in_bulk(store: Store) -> None:
    ids = add_papers(store, *(f"2611.{n:05d}" for n in range(1, 6)))
    subs = [
        store.add_subscriber(f"r{i}@example.org", topics=("moe",), now=NOW)[0] for i in range(3)
    ]
    for n, key in enumerate(sorted(ids)):
        store.set_vote(subs[0].id, ids[key], 1 if n % 2 else -1, "moe", NOW + timedelta(n))
    store.set_vote(subs[1].id, ids["2611.00003"], 1, None, NOW)
    got = store.votes_for([s.id for s in subs])
    assert set(got) == {subs[0].id, subs[1].id}  # no votes: not in the mapping
    assert [v.paper_key for v in got[subs[0].id]] == sorted(ids, reverse=True)
    assert [v.value for v in got[subs[0].id]] == [-1, 1, -1, 1, -1]
    assert got[subs[1].id] == (
        Vote("2611.00003", ids["2611.00003"], "Paper 2611.00003", 1, None, NOW),
    )
    assert isinstance(got[subs[0].id], tuple)
    assert got == store.votes_for([s.id for s in subs] * 2)


def test_votes_are_erased_with_the_subscriber(store: Store) -> None:
    ids = add_papers(store, "2611.00001")
    ada, _ = store.add_subscriber("ada@example.org", topics=("moe",), now=NOW)
    bob, _ = store.add_subscriber("bob@example.org", topics=("moe",), now=NOW)
    store.set_vote(ada.id, ids["2611.00001"], 1, "moe", NOW)
    store.set_vote(bob.id, ids["2611.00001"], -1, "moe", NOW)
    assert store.remove_subscriber("ada@example.org")
    assert store.votes_for([ada.id, bob.id]) == {bob.id: store.votes_for([bob.id])[bob.id]}
    with store.engine.connect() as conn:
        from sqlalchemy import func, select

        from newsletter.store.tables import votes

        assert conn.execute(select(func.count()).select_from(votes)).scalar_one() == 1


def test_deleting_a_subscriber_row_cascades_to_their_votes(store: Store) -> None:
    from sqlalchemy import delete, func, select

    from newsletter.store.tables import subscribers, votes

    ids = add_papers(store, "2611.00001")
    ada, _ = store.add_subscriber("ada@example.org", topics=("moe",), now=NOW)
    store.set_vote(ada.id, ids["2611.00001"], 1, "moe", NOW)
    with store.engine.begin() as conn:
        conn.execute(delete(subscribers).where(subscribers.c.id == ada.id))
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(votes)).scalar_one() == 0
