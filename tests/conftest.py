"""Shared fixtures: real SQLite and PostgreSQL stores, a real SMTP server on loopback, configs.

PostgreSQL tests run against 127.0.0.1:5432 (database ``test``) in a schema of their own, so
parallel runs do not collide; they skip, saying why, only when the server is truly absent.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiosmtpd.controller import Controller
from sqlalchemy import create_engine, text

from newsletter.config import Config, load_config
from newsletter.operations.smtp_sink import free_port
from newsletter.store import Store

FIXTURES = Path(__file__).parent / "fixtures"
FEEDS = FIXTURES / "feeds"
PG_URL = os.environ.get("NEWSLETTER_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
NOW = datetime(2026, 11, 17, 6, 0, tzinfo=UTC)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test on PostgreSQL is also ``slow``: each gets a fresh schema and its migrations, about
    half the time of the fast run. ``make test-fast`` keeps its SQLite twin; ``make test`` runs
    both. (Subprocess, browser and fault suites are marked ``slow`` where they are written.)"""
    for item in items:
        if item.get_closest_marker("postgres"):
            item.add_marker(pytest.mark.slow)


def _pg_reason() -> str | None:
    try:
        engine = create_engine(PG_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        engine.dispose()
        return None
    except Exception as e:  # the server is absent or refuses us
        return f"PostgreSQL not reachable at {PG_URL}: {type(e).__name__}: {str(e).splitlines()[0]}"


_PG_REASON: str | bool | None = False


def pg_unavailable() -> str | None:
    global _PG_REASON
    if _PG_REASON is False:
        _PG_REASON = _pg_reason()
    return _PG_REASON  # type: ignore[return-value]


@pytest.fixture
def pg_schema_url() -> Iterator[str]:
    """A URL whose connections live in a fresh PostgreSQL schema, dropped afterwards."""
    reason = pg_unavailable()
    if reason:
        pytest.skip(reason)
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_URL)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated-schema-ready database URL: SQLite always, PostgreSQL when it runs here."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'newsletter.db'}"
    return str(request.getfixturevalue("pg_schema_url"))


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store(db_url)
    s.upgrade()
    yield s
    s.close()


# ---------------------------------------------------------------------------- the encoder

_ENCODERS: dict[tuple[str, int], Any] = {}
_VECTORS: dict[tuple[str, str], Any] = {}
_OWN_ENCODER = ("tests/semantic/", "tests/security/test_embedder_input.py")
"""Tests of the encoder itself: they load the model and run it on every text, every time."""


@pytest.fixture(autouse=True)
def _encode_each_text_once_per_process(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sentence encoder, loaded once per test process and run once per text in it.

    Every test of a demo with semantic ranking builds a fresh database, so it embedded the same
    demo papers again: about 3 s of ONNX Runtime a test, a fifth of the suite. A text's vector
    does not depend on its batch or on the texts beside it (tests/semantic/test_model.py holds
    that), so the vector computed by the real model the first time is the one every later test
    would compute. In-process only (a command run as a subprocess loads the model itself); the
    encoder's own tests (``_OWN_ENCODER``) are left alone, and so are the tests of a send that
    embeds in a child process."""
    where = request.path.as_posix()
    if any(part in where for part in _OWN_ENCODER):
        return
    import numpy as np

    from newsletter.semantic import model, vectors

    real_embed = model.Embedder.embed

    def embed(
        self: model.Embedder, texts: Any, progress: Callable[[int], Any] | None = None
    ) -> Any:
        missing = [t for t in dict.fromkeys(texts) if (self.name, t) not in _VECTORS]
        if missing:
            for text_, row in zip(missing, real_embed(self, missing), strict=True):
                _VECTORS[self.name, text_] = row
        if not texts:
            return real_embed(self, texts)
        if progress is not None:
            progress(len(texts))
        return np.stack([_VECTORS[self.name, t] for t in texts])

    def encoder(files: Any, *, max_tokens: int = 128, threads: int = 0) -> model.Embedder:
        key = (str(files.onnx), max_tokens)
        if key not in _ENCODERS:
            _ENCODERS[key] = model.Embedder(files, max_tokens=max_tokens, threads=threads)
        return _ENCODERS[key]  # type: ignore[no-any-return]

    monkeypatch.setattr(model.Embedder, "embed", embed)
    monkeypatch.setattr(vectors, "Embedder", encoder)
    # A send that finds papers without vectors embeds them in a child process (which loads the
    # model, 2 s a test); tests/semantic/test_vectors.py holds that. Here: in this process.
    monkeypatch.setattr(vectors.VectorSource, "_embed_in_child", lambda *_: False)


# ---------------------------------------------------------------------------- SMTP


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    data: bytes

    @property
    def message(self) -> Message:
        return message_from_bytes(self.data)


@dataclass
class RecordingHandler:
    """An aiosmtpd handler that keeps every message; ``fault`` may answer instead of accepting."""

    received: list[Received] = field(default_factory=list)
    fault: Callable[[str, Any], str | None] | None = None
    """Called with (stage, envelope-or-address); return an SMTP reply to refuse, None to go on."""

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: Any
    ) -> str:
        if self.fault is not None:
            reply = self.fault("RCPT", address)
            if reply:
                return reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.fault is not None:
            reply = self.fault("DATA", envelope)
            if reply:
                return reply
        self.received.append(
            Received(
                envelope.mail_from,
                list(envelope.rcpt_tos),
                envelope.original_content or envelope.content,
            )
        )
        return "250 OK queued"


@dataclass
class SmtpServer:
    host: str
    port: int
    handler: RecordingHandler

    @property
    def received(self) -> list[Received]:
        return self.handler.received

    def messages_to(self, address: str) -> list[Message]:
        return [r.message for r in self.received if address in r.rcpt_tos]


@pytest.fixture
def smtp_server() -> Iterator[SmtpServer]:
    """A real aiosmtpd server on 127.0.0.1 that records what it receives."""
    handler = RecordingHandler()
    port = free_port()
    controller = Controller(handler, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield SmtpServer("127.0.0.1", port, handler)
    finally:
        controller.stop()
        asyncio.set_event_loop(None)


# ---------------------------------------------------------------------------- configs


def write_config(directory: Path, data: dict[str, Any], name: str = "newsletter.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def base_config(db_url: str, smtp: SmtpServer | None = None, **overrides: Any) -> dict[str, Any]:
    """A complete config dict pointing at the fixture feeds; override any top-level key."""
    data: dict[str, Any] = {
        "database": {"url": db_url},
        "sender": {
            "from": "Trending Papers <digest@papers.example.org>",
            "postal_address": "1 Test Street, Testville",
            "base_url": "https://papers.example.org",
        },
        "smtp": {"host": smtp.host if smtp else "127.0.0.1", "port": smtp.port if smtp else 2525},
        "sources": [
            {
                "name": "cs-dc",
                "kind": "arxiv_rss",
                "url": str(FEEDS / "arxiv-rss-cs.DC-2026-11-16.xml"),
            },
            {
                "name": "cs-lg",
                "kind": "arxiv_rss",
                "url": str(FEEDS / "arxiv-rss-cs.LG-2026-11-16.xml"),
            },
        ],
        "topics": [
            {
                "name": "gpu-kernels",
                "title": "GPU kernels",
                "keywords": ["CUDA", ["GEMM", "matrix multiplication"]],
            },
            {
                "name": "rendering",
                "title": "Neural rendering",
                "keywords": [["NeRF", "neural radiance fields"], "rendering"],
            },
        ],
        "subscribers": [],
        # Lexical ranking here: these tests' expectations are about keywords, and embedding every
        # fixture paper in each of them would double the suite's time. tests/semantic and
        # tests/rank/relevance/test_hybrid.py run semantic ranking; base_config(ranking=...) turns it on.
        "ranking": {"semantic": False},
    }
    data.update(overrides)
    return data


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., Config]:
    def make(data: dict[str, Any]) -> Config:
        return load_config(write_config(tmp_path, data))

    return make
