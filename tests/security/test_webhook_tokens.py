"""Issue 27, item 4: a Mailgun signing token is good for one body, whatever the timing.

Mailgun signs ``timestamp + token``, not the body. The token was remembered only after its
events were applied, so 12 concurrent POSTs with one captured signature and 12 bodies each
suppressed another reader. Now the token is reserved in the database for its body before
anything is applied. Real app under uvicorn on loopback, the real bounce decider, SQLite and
PostgreSQL; a "restart" (new store and app objects) still refuses the token for another body.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import timedelta

import httpx

from newsletter.models import SubscriberStatus
from newsletter.store import Store
from newsletter.store.bounces import webhook_tokens
from tests.bounces import test_webhooks_http as http
from tests.bounces.providers import AwsStandIn, SendgridSigner, fixture, mailgun_body
from tests.bounces.test_webhooks_http import Live, webhook_settings
from tests.conftest import NOW

READERS = 12

# The live-server fixtures of the webhook tests: the app under uvicorn, the AWS stand-in.
aws, sendgrid_signer, sns_signer, start = (
    http.aws,
    http.sendgrid_signer,
    http.sns_signer,
    http.start,
)


def _forged(signed: bytes, i: int) -> bytes:
    """The captured signature on another body: a complaint about reader ``i``."""
    payload = json.loads(signed)
    data = fixture("mailgun-complained.json")["event-data"]
    data.update(id=f"forged-event-{i}", recipient=f"reader{i}@example.com")
    return json.dumps({"signature": payload["signature"], "event-data": data}).encode()


def _suppressed(store: Store) -> list[str]:
    return [s.email for batch in store.iter_subscribers(SubscriberStatus.SUPPRESSED) for s in batch]


def test_one_token_applies_one_body_at_once_and_after_a_restart(
    db_url: str,
    start: Callable[..., Live],
    aws: AwsStandIn,
    sendgrid_signer: SendgridSigner,
) -> None:
    store = Store(db_url)
    store.upgrade()
    try:
        for i in range(READERS + 1):
            store.add_subscriber(f"reader{i}@example.com", topics=["rendering"], now=NOW)
        settings = webhook_settings(aws, sendgrid_signer)
        live = start(settings, db_url=db_url, record=False)
        captured = mailgun_body("mailgun-complained.json", live.clock(), token="c" * 50)
        bodies = [_forged(captured, i) for i in range(READERS)]

        ready = threading.Barrier(READERS)
        answers: list[int] = []

        def post(body: bytes) -> None:
            ready.wait()
            r = httpx.post(f"{live.base}/webhooks/mailgun", content=body, timeout=30)
            answers.append(r.status_code)

        threads = [threading.Thread(target=post, args=(b,)) for b in bodies]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=60)
        assert sorted(answers) == [200] + [403] * (READERS - 1), answers
        (winner,) = _suppressed(store)
        assert winner.startswith("reader")

        # The same body again (the provider's retry) changes nothing more; another is refused.
        won = bodies[int(winner.removeprefix("reader").split("@")[0])]
        assert live.post("/webhooks/mailgun", won).status_code == 200

        # A restart: new store and app objects, nothing in memory. The token is still taken.
        again = start(settings, db_url=db_url, record=False)
        again.clock.t = live.clock() + timedelta(seconds=30)
        extra = _forged(captured, READERS)
        assert again.post("/webhooks/mailgun", extra).status_code == 403
        assert _suppressed(store) == [winner]
    finally:
        store.close()


def test_used_tokens_are_pruned_once_their_timestamp_is_stale(store: Store) -> None:
    keep = timedelta(minutes=30)
    assert store.reserve_webhook_token("old", "a" * 64, NOW, keep=keep)
    assert not store.reserve_webhook_token("old", "b" * 64, NOW + timedelta(minutes=29), keep=keep)
    assert store.reserve_webhook_token("old", "a" * 64, NOW + timedelta(minutes=29), keep=keep)
    assert store.reserve_webhook_token("new", "c" * 64, NOW + timedelta(minutes=31), keep=keep)
    with store.engine.connect() as conn:
        left = [r.token for r in conn.execute(webhook_tokens.select())]
    assert left == ["new"]  # "old" is stale by now: its timestamp would be refused anyway
