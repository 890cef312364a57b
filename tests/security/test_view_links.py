"""Issue 16, item 7: a "view in browser" link names the subscriber's address, as manage and
unsubscribe links do, and subscriber ids are never reused (SQLite AUTOINCREMENT, migration
0006; PostgreSQL's serial). An erased subscriber's old link never shows the next subscriber's
digest. Real fetch and send through a real SMTP server, the real app, SQLite and PostgreSQL."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from sqlalchemy import func, select, text

from newsletter.clock import utcnow
from newsletter.config import Config
from newsletter.services.link_tokens import Purpose
from newsletter.store import Store
from newsletter.store import tables as t
from newsletter.subscribe import Subscriptions
from tests.conftest import SmtpServer
from tests.security.helpers import give_id_to, mailed_digest, send_first_digest
from tests.sends import papers_before_0014, run_send, sent_before_0011, subscriber_before_0012
from tests.web.conftest import BASE, Clock, body_text


def view_link(smtp: SmtpServer, email: str) -> str:
    m = re.search(rf"{re.escape(BASE)}(/archive/view/\S+)", body_text(mailed_digest(smtp, email)))
    assert m, "no view-in-browser link in the digest"
    return m.group(1)


def test_an_erased_subscribers_view_link_never_shows_the_next_subscribers_digest(
    client: TestClient,
    web_config: Config,
    web_store: Store,
    service: Subscriptions,
    smtp_server: SmtpServer,
    clock: Clock,
) -> None:
    send_first_digest(web_config, web_store, clock, "ada@example.org")
    old = view_link(smtp_server, "ada@example.org")
    assert client.get(old).status_code == 200
    ada = web_store.get_subscriber("ada@example.org")
    assert ada is not None and service.forget("ada@example.org")

    web_store.add_subscriber("bob@example.org", topics=["gpu-kernels"], now=clock())
    assert run_send(web_config, web_store, clock()).sent == 1
    r = client.get(old)
    assert r.status_code == 404 and "bob@example.org" not in r.text
    assert "/manage/" not in r.text and "/unsubscribe/" not in r.text
    bob = web_store.get_subscriber("bob@example.org")
    assert bob is not None and bob.id > ada.id  # never the erased subscriber's id
    mine = client.get(view_link(smtp_server, "bob@example.org"))
    assert mine.status_code == 200 and "CUDA-L1" in mine.text and "/manage/" in mine.text


def test_links_made_before_they_named_the_address_hold_only_for_their_subscriber(
    client: TestClient,
    web_config: Config,
    web_store: Store,
    service: Subscriptions,
    smtp_server: SmtpServer,
    clock: Clock,
) -> None:
    send_first_digest(web_config, web_store, clock, "ada@example.org")
    [day] = web_store.sent_edition_dates(5)
    ada = web_store.get_subscriber("ada@example.org")
    assert ada is not None
    legacy = service.tokens.make(Purpose.VIEW, {"s": ada.id, "d": day.isoformat()})
    assert client.get(f"/archive/view/{legacy}").status_code == 200  # still good for Ada
    assert service.forget("ada@example.org")

    clock.advance(seconds=2)  # before migration 0006, SQLite gave the next one Ada's id
    give_id_to(web_store, ada.id, "bob@example.org", clock())
    assert run_send(web_config, web_store, clock()).sent == 1
    assert client.get(f"/archive/view/{legacy}").status_code == 404
    bobs = service.tokens.make(Purpose.VIEW, {"s": ada.id, "d": day.isoformat()})
    assert client.get(f"/archive/view/{bobs}").status_code == 200


def test_migration_0006_keeps_every_row_and_stops_id_reuse(web_config: Config) -> None:
    store = Store(web_config.database_url)
    try:
        store.upgrade("0005")
        now = utcnow()
        ids = [
            subscriber_before_0012(store, f"{who}@example.org", ["gpu-kernels", "rendering"], now)
            for who in ("ada", "bob", "cyd")
        ]
        keys = [f"2611.0000{i}" for i in range(1, 4)]
        paper_ids = papers_before_0014(store, now, *keys)  # as the code of 0005 wrote them
        for sid in ids:  # each sent a digest, as the code of 0005 recorded it
            sent_before_0011(store, sid, now.date(), paper_ids, now)
        # The highest id, gone before 0006 (by hand: today's remove also clears later tables).
        with store.engine.begin() as conn:
            cyd = conn.execute(
                select(t.subscribers.c.id).where(t.subscribers.c.email == "cyd@example.org")
            ).scalar_one()
            conn.execute(text("DELETE FROM sent_papers WHERE subscriber_id = :s"), {"s": cyd})
            for table in (t.subscriptions, t.editions):
                conn.execute(table.delete().where(table.c.subscriber_id == cyd))
            conn.execute(t.subscribers.delete().where(t.subscribers.c.id == cyd))

        def counts() -> dict[str, int]:
            with store.engine.connect() as conn:
                return {
                    table.name: conn.execute(select(func.count()).select_from(table)).scalar_one()
                    for table in (t.subscribers, t.subscriptions, t.editions)
                }

        before = counts()
        with store.engine.connect() as conn:
            sent = conn.execute(text("SELECT count(*) FROM sent_papers")).scalar_one()
        assert sent == 6 and before["subscriptions"] == 4
        store.upgrade()
        assert store.current_revision() == store.head_revision()
        assert counts() == before  # nothing cascaded away with the rebuilt table
        readers = [s.id for b in store.iter_subscribers() for s in b]
        assert sum(map(len, store.sent_paper_ids(readers).values())) == sent  # moved (0011)
        if store.dialect == "sqlite":
            with store.engine.connect() as conn:
                ddl = conn.execute(
                    text("select sql from sqlite_master where name = 'subscribers'")
                ).scalar_one()
                assert "AUTOINCREMENT" in ddl
                assert conn.execute(text("PRAGMA foreign_keys")).scalar_one() == 1
        bob = store.get_subscriber("bob@example.org")
        assert bob is not None and store.remove_subscriber("bob@example.org")
        later = datetime.now(UTC) + timedelta(seconds=1)
        dan, created = store.add_subscriber("dan@example.org", topics=["rendering"], now=later)
        assert created and dan.id > bob.id
        assert store.get_subscriber("ada@example.org") is not None
        assert store.subscriber_by_id(bob.id) is None
    finally:
        store.close()
