"""Short calls for tests: the real send path with a config, a store and a time.

``run_send`` is the run loop alone (no run record), ``send_step`` the recorded send that
``newsletter send --now`` runs; both build the :class:`~newsletter.services.Services` and the
:class:`~newsletter.edition.SendRequest` that the CLI would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import date, datetime
from typing import Any

from sqlalchemy import text

from newsletter.config import Config
from newsletter.deliver import MailerFactory
from newsletter.edition import SendReport, SendRequest, Services, send, send_editions
from newsletter.store import Store


def run_send(
    config: Config,
    store: Store,
    now: datetime,
    *,
    mailer_factory: MailerFactory | None = None,
    progress: Callable[[SendReport], None] | None = None,
    stop: threading.Event | None = None,
    **request: Any,
) -> SendReport:
    """:func:`newsletter.edition.send_editions` for ``SendRequest(**request)``."""
    services = Services(config, store, relay=mailer_factory)
    return send_editions(
        services, now, SendRequest(**request).validated(config), progress=progress, stop=stop
    )


def send_step(
    config: Config,
    store: Store,
    now: datetime,
    *,
    mailer_factory: MailerFactory | None = None,
    progress: Callable[[SendReport], None] | None = None,
    stop: threading.Event | None = None,
    **request: Any,
) -> SendReport:
    """:func:`newsletter.edition.send` for ``SendRequest(**request)``: the recorded run."""
    services = Services(config, store, relay=mailer_factory)
    report = send(services, SendRequest(**request), now=now, progress=progress, stop=stop).report
    assert report is not None
    return report


def papers_before_0014(store: Store, now: datetime, *keys: str) -> list[int]:
    """Papers titled "Paper KEY" as the code before migration 0014 (no ``papers.code_stars``)
    wrote them, for migration tests on an older schema: the columns every revision has.
    Returns their ids, in order."""
    ids = []
    with store.engine.begin() as conn:
        for k in keys:
            ids.append(
                conn.execute(
                    text(
                        "INSERT INTO papers (key, title, abstract, authors, categories, url, "
                        "first_seen, updated, content_hash, announced) VALUES (:k, :t, '', "
                        "'[]', '[]', '', :now, :now, :h, :a) RETURNING id"
                    ),
                    {"k": k, "t": f"Paper {k}", "now": now, "h": k, "a": True},
                ).scalar_one()
            )
    return ids


def sent_before_0011(
    store: Store, subscriber_id: int, day: date, paper_ids: list[int], now: datetime
) -> int:
    """A sent edition as the code before migration 0011 recorded it, for migration tests on an
    older schema: the edition ``sent``, and a ``sent_papers`` row per paper (a paper already
    sent to the reader left out: the table's primary key). Returns the edition's id."""
    claim = store.claim_edition(subscriber_id, day, f"<{subscriber_id}.{day}@old>", now, owner="r")
    assert claim is not None
    with store.engine.begin() as conn:
        conn.execute(
            text("UPDATE editions SET status = 'sent', item_count = :n WHERE id = :e"),
            {"n": len(paper_ids), "e": claim.id},
        )
        for pid in paper_ids:
            conn.execute(
                text(
                    "INSERT INTO sent_papers (subscriber_id, paper_id, edition_id) "
                    "VALUES (:s, :p, :e) ON CONFLICT DO NOTHING"
                ),
                {"s": subscriber_id, "p": pid, "e": claim.id},
            )
    return claim.id


def subscriber_before_0012(store: Store, email: str, topics: Sequence[str], now: datetime) -> int:
    """An active subscriber (or the one there is) on a schema older than migration 0012 (no
    ``email_key``: the store's own methods read and write that column). Returns its id."""
    with store.engine.begin() as conn:
        found = conn.execute(
            text("SELECT id FROM subscribers WHERE email = :e"), {"e": email}
        ).scalar()
        if found is not None:
            return int(found)
        sid = conn.execute(
            text(
                "INSERT INTO subscribers (email, name, status, timezone, created, "
                "status_changed, permanent_failures) VALUES (:e, '', 'active', 'UTC', :now, "
                ":now, 0) RETURNING id"
            ),
            {"e": email, "now": now.replace(tzinfo=None)},
        ).scalar_one()
        for topic in topics:
            conn.execute(
                text("INSERT INTO subscriptions (subscriber_id, topic) VALUES (:s, :t)"),
                {"s": sid, "t": topic},
            )
        return int(sid)
