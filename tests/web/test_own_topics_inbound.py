"""``topic add:`` and ``topic remove:`` by email (issue 45), through the real inbound receiver
(SMTP on loopback) and the real relay: a confirmation link first, nothing changed until its
button is pressed; refusals answered in fixed words; strangers get nothing of the text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from newsletter.config import Config, load_config
from newsletter.operations.inbound_mail import InboundServer
from newsletter.operations.smtp_sink import free_port
from newsletter.services import Services
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from newsletter.web import create_app
from tests.conftest import NOW, SmtpServer, write_config
from tests.web.conftest import BASE, Clock, body_text, csrf_of, web_settings
from tests.web.test_inbound import send


@pytest.fixture
def world(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer, clock: Clock
) -> Iterator[tuple[InboundServer, TestClient, Store, Config]]:
    data = web_settings(db_url, smtp_server)
    data["own_topics"] = {"enabled": True, "max": 2, "max_chars": 80}
    config = load_config(write_config(tmp_path, data))
    store = Store(config.database_url)
    store.upgrade()
    service = Subscriptions(Services(config, store, clock=clock))
    settings = config.settings.inbound.model_copy(update={"port": free_port()})
    try:
        with (
            InboundServer(service, settings) as server,
            TestClient(create_app(config, store, None, now=clock), base_url=BASE) as client,
        ):
            yield server, client, store, config
    finally:
        store.close()


def _link(smtp: SmtpServer, to: str) -> tuple[str, str]:
    mail = smtp.messages_to(to)[-1]
    text = body_text(mail)
    path = next(w for w in text.split() if w.startswith(f"{BASE}/own-topic/"))
    return path.removeprefix(BASE), text


def test_add_then_remove_by_mail_each_confirmed(
    world: tuple[InboundServer, TestClient, Store, Config], smtp_server: SmtpServer
) -> None:
    server, client, store, _ = world
    ada, _ = store.add_subscriber("ada@example.org", topics=("gpu-kernels",), now=NOW)
    send(server, "topic add: Decoders for quantum error correction like: 2401.04088")
    path, text = _link(smtp_server, "ada@example.org")
    assert "Decoders for quantum error correction" in text and "2401.04088" in text
    assert store.own_topics_of([ada.id]) == {}  # nothing until confirmed
    page = client.get(path)
    assert page.status_code == 200 and "Add this topic" in page.text
    assert store.own_topics_of([ada.id]) == {}  # opening the link changes nothing
    done = client.post(path, data={"csrf": csrf_of(page.text)})
    assert done.status_code == 200 and "was added" in done.text
    [own] = store.own_topics_of([ada.id])[ada.id]
    assert (own.text, own.examples) == ("Decoders for quantum error correction", ("2401.04088",))
    client.post(path, data={"csrf": csrf_of(page.text)})  # pressed twice: still one topic
    assert len(store.own_topics_of([ada.id])[ada.id]) == 1

    send(server, "Re: topic remove: 1")
    path, text = _link(smtp_server, "ada@example.org")
    assert "Decoders for quantum error correction" in text
    assert len(store.own_topics_of([ada.id])[ada.id]) == 1
    page = client.get(path)
    assert client.post(path, data={"csrf": csrf_of(page.text)}).status_code == 200
    assert store.own_topics_of([ada.id]) == {}


def test_refusals_and_strangers_get_fixed_words_only(
    world: tuple[InboundServer, TestClient, Store, Config], smtp_server: SmtpServer
) -> None:
    server, _, store, _ = world
    ada, _ = store.add_subscriber("ada@example.org", now=NOW)
    send(server, "topic add: buy now at https://spam.example.com <b>cheap</b>")
    mail = smtp_server.messages_to("ada@example.org")[-1]
    text = body_text(mail)
    assert "your own topic could not be used" in text
    assert "spam" not in text and "cheap" not in text and "/own-topic/" not in text
    send(server, "topic remove: 3")
    assert "no own topic has that number" in body_text(
        smtp_server.messages_to("ada@example.org")[-1]
    )

    send(server, "topic add: quantum decoders", sender="eve@example.org")
    [answer] = smtp_server.messages_to("eve@example.org")
    assert "quantum" not in body_text(answer) and "/own-topic/" not in body_text(answer)
    assert store.own_topics_of([ada.id]) == {}


def test_a_link_is_for_its_reader_only(
    world: tuple[InboundServer, TestClient, Store, Config], smtp_server: SmtpServer
) -> None:
    server, client, store, _ = world
    store.add_subscriber("ada@example.org", now=NOW)
    send(server, "topic add: quantum decoders")
    path, _ = _link(smtp_server, "ada@example.org")
    tampered = path[:-3] + ("aaa" if not path.endswith("aaa") else "bbb")
    assert client.get(tampered).status_code == 400
    store.remove_subscriber("ada@example.org")
    page = client.get(path)
    assert page.status_code == 410
