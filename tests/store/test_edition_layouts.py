"""``editions.layout``: what a mailed digest showed besides its papers (migration 0015), kept
with the edition on SQLite and PostgreSQL, and going with it."""

from __future__ import annotations

from datetime import date

from sqlalchemy import inspect, select, text

from newsletter.models import EditionStatus
from newsletter.store import Store
from newsletter.store import tables as t
from tests.conftest import NOW
from tests.sends import papers_before_0014, subscriber_before_0012
from tests.store.test_edition_papers import _downgrade

DAY = date(2026, 11, 17)
LAYOUT = '{"v":1,"t":["T"],"s":[["t","T",[[1,"title: *x*"]]]]}'


def _columns(store: Store) -> set[str]:
    with store.engine.connect() as conn:
        return {c["name"] for c in inspect(conn).get_columns("editions")}


def test_0015_adds_an_empty_layout_to_every_edition_and_drops_it_again(db_url: str) -> None:
    store = Store(db_url)
    try:
        store.upgrade("0014")
        ids = papers_before_0014(store, NOW, "2611.00001", "2611.00002")
        sid = subscriber_before_0012(store, "ada@example.org", ["t"], NOW)
        claim = store.claim_edition(sid, DAY, "<ada@old>", NOW, owner="r")
        assert claim is not None
        with store.engine.begin() as conn:
            conn.execute(
                text("UPDATE editions SET status = 'sent', item_count = 2, paper_ids = :p"),
                {"p": f"{ids[1]},{ids[0]}"},
            )

        store.upgrade()
        assert store.current_revision() == store.head_revision()
        assert store.edition_layout(claim.id) is None  # sent before layouts: ranked again
        assert [p.id for p in store.edition_papers(claim.id)] == [ids[1], ids[0]]
        store.mark_edition(claim.id, EditionStatus.SENT, NOW, paper_ids=ids, layout=LAYOUT)
        assert store.edition_layout(claim.id) == LAYOUT

        _downgrade(store, "0014")
        assert "layout" not in _columns(store) and "paper_ids" in _columns(store)
        with store.engine.connect() as conn:
            kept = conn.execute(select(t.editions.c.paper_ids)).scalar_one()
        assert kept == f"{ids[0]},{ids[1]}"
        store.upgrade()
        assert store.edition_layout(claim.id) is None
    finally:
        store.close()


def test_a_layout_is_kept_only_for_a_delivered_edition_and_goes_with_its_reader(
    store: Store,
) -> None:
    sub, _ = store.add_subscriber("ada@example.org", topics=["t"], now=NOW)
    claim = store.claim_edition(sub.id, DAY, "<ada>", NOW, owner="r")
    assert claim is not None
    store.mark_edition(claim.id, EditionStatus.FAILED, NOW, error="550", layout=LAYOUT)
    assert store.edition_layout(claim.id) is None
    store.mark_edition(claim.id, EditionStatus.SENT, NOW, paper_ids=[1], layout=LAYOUT)
    assert store.edition_layout(claim.id) == LAYOUT
    assert store.remove_subscriber("ada@example.org")
    assert store.edition_layout(claim.id) is None
    with store.engine.connect() as conn:
        assert conn.execute(select(t.editions.c.id)).first() is None
