"""Fixtures for the web app and email commands: a real database, a real SMTP server, a clock."""

from __future__ import annotations

import html as htmllib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from newsletter.config import Config, load_config
from newsletter.services import Services
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from newsletter.web import create_app
from tests.conftest import NOW, SmtpServer, base_config, write_config

BASE = "https://papers.example.org"


@dataclass
class Clock:
    """The replaceable clock the app and the tokens read."""

    t: datetime = NOW

    def __call__(self) -> datetime:
        return self.t

    def advance(self, **kw: float) -> None:
        self.t = self.t + timedelta(**kw)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def web_settings(db_url: str, smtp: SmtpServer, **web: Any) -> dict[str, Any]:
    data = base_config(db_url, smtp)
    data["web"] = {"secret_key": "a-test-secret-that-signs-links-0123456789", **web}
    data["inbound"] = {"address": "papers-request@papers.example.org"}
    return data


@pytest.fixture
def web_config(tmp_path: Path, db_url: str, smtp_server: SmtpServer) -> Config:
    return load_config(write_config(tmp_path, web_settings(db_url, smtp_server)))


@pytest.fixture
def web_store(web_config: Config) -> Iterator[Store]:
    store = Store(web_config.database_url)
    store.upgrade()
    yield store
    store.close()


@pytest.fixture
def service(web_config: Config, web_store: Store, clock: Clock) -> Subscriptions:
    return Subscriptions(Services(web_config, web_store, clock=clock))


@pytest.fixture
def app(web_config: Config, web_store: Store, clock: Clock) -> FastAPI:
    return create_app(web_config, web_store, None, now=clock)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, base_url=BASE) as c:
        yield c


def body_text(msg: Message) -> str:
    for part in msg.walk():
        if part.get_content_type() == "text/plain":
            payload = part.get_payload(decode=True)
            assert isinstance(payload, bytes)
            return payload.decode(part.get_content_charset() or "utf-8")
    raise AssertionError("no text/plain part")


def links(msg: Message) -> list[str]:
    """Every link of a mail: the text part's, then the HTML part's that the text part lacks (a
    digest's text part has one "rate these papers" link; the per-paper feedback links are in
    its HTML part)."""
    found = re.findall(r"https?://\S+", body_text(msg))
    for part in msg.walk():
        if part.get_content_type() == "text/html":
            payload = part.get_payload(decode=True)
            assert isinstance(payload, bytes)
            page = payload.decode(part.get_content_charset() or "utf-8")
            hrefs = [htmllib.unescape(h) for h in re.findall(r'href="(https?://[^"]+)"', page)]
            found += [h for h in hrefs if h not in found]
    return found


def link_to(msg: Message, kind: str) -> str:
    """The first link of a kind (``confirm``, ``manage``, ``unsubscribe``) in a mail, as a path."""
    for url in links(msg):
        if url.startswith(f"{BASE}/{kind}/"):
            return url.removeprefix(BASE)
    raise AssertionError(f"no {kind} link in {links(msg)}")


def csrf_of(html: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', html)
    assert m, "no CSRF field in the form"
    return m.group(1)
