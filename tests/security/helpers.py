"""Small helpers shared by the security tests: the subscribe form, the CLI, a first digest."""

from __future__ import annotations

from datetime import datetime
from email.message import Message

from click.testing import CliRunner, Result
from fastapi.testclient import TestClient
from httpx import Response

from newsletter.cli import cli
from newsletter.clock import utcnow
from newsletter.config import Config
from newsletter.models import Subscriber
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from newsletter.store import tables as t
from tests.conftest import SmtpServer
from tests.sends import run_send
from tests.web.conftest import Clock, csrf_of, link_to

ADA = "ada@example.org"
DIGEST_LINK_KINDS = ("manage", "unsubscribe", "archive/view", "feedback")


def subscribe(client: TestClient, email: str, *topics: str) -> int:
    """Submit the subscribe form as a browser would; the HTTP status."""
    form = client.get("/subscribe")
    data = {
        "csrf": csrf_of(form.text),
        "email": email,
        "topics": list(topics or ("gpu-kernels",)),
        "timezone": "Europe/Berlin",
        "send_hour": "8",
    }
    return client.post("/subscribe", data=data).status_code


def last_link(smtp: SmtpServer, email: str, kind: str) -> str:
    return link_to(smtp.messages_to(email)[-1], kind)


def newsletter(config: Config, *args: str) -> Result:
    """Run the real ``newsletter`` command with this config."""
    return CliRunner().invoke(cli, ["--config", str(config.path), *args], catch_exceptions=False)


def send_first_digest(config: Config, store: Store, clock: Clock, email: str) -> Subscriber:
    """Subscribe ``email`` to gpu-kernels, fetch and send its one digest; the subscriber."""
    clock.t = utcnow()  # digests sign their links on the real clock
    reader, _ = store.add_subscriber(email, topics=["gpu-kernels"], now=clock())
    run_fetch(config, store, clock())
    assert run_send(config, store, clock()).sent == 1
    return reader


def mailed_digest(smtp: SmtpServer, email: str) -> Message:
    """The one digest (a mail with a List-Id) the SMTP server received for ``email``."""
    [digest] = [m for m in smtp.messages_to(email) if m["List-Id"]]
    return digest


def digest_links(smtp: SmtpServer, email: str) -> dict[str, str]:
    """The paths of the mailed digest's manage, unsubscribe, view and first feedback links."""
    digest = mailed_digest(smtp, email)
    return {kind: link_to(digest, kind) for kind in DIGEST_LINK_KINDS}


def open_feedback_pages(client: TestClient, url: str) -> tuple[Response, Response, Response]:
    """Open a mailed feedback link, vote on it and undo the vote: the three pages, each a 200."""
    feedback = client.get(url)
    assert feedback.status_code == 200 and "More papers like this?" in feedback.text
    done = client.post(url, data={"csrf": csrf_of(feedback.text)})
    assert done.status_code == 200
    undone = client.post(url, data={"csrf": csrf_of(done.text), "undo": "1"})
    assert undone.status_code == 200
    return feedback, done, undone


def open_view_page(client: TestClient, url: str) -> Response:
    """Open a mailed "view in browser" link: the digest's page, a 200."""
    view = client.get(url)
    assert view.status_code == 200 and "CUDA-L1" in view.text
    return view


def give_id_to(store: Store, subscriber_id: int, email: str, now: datetime) -> None:
    """Insert an active gpu-kernels subscriber under a given (an erased reader's) id, by hand."""
    with store.engine.begin() as conn:
        conn.execute(
            t.subscribers.insert().values(
                id=subscriber_id,
                email=email,
                name="",
                status="active",
                timezone="UTC",
                created=now,
                status_changed=now,
                permanent_failures=0,
            )
        )
        conn.execute(
            t.subscriptions.insert().values(subscriber_id=subscriber_id, topic="gpu-kernels")
        )
