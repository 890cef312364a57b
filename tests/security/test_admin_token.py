"""Issue 42, item 7: the admin token may not be weak, and guessing it is not free.

``NEWSLETTER_ADMIN_TOKEN=a`` was accepted, and 300 wrong guesses in a second were all answered
401 with no slowdown. A weak token is now refused like a weak signing key (``serve`` exits
with one line naming the variable and how to make a token; a running app opens nothing with
one), and a client is answered 429 with ``Retry-After``, its token not even compared, after
``admin_failures_per_ip`` wrong tokens per ``admin_failures_window``, and after one while
everyone together made more than ``admin_failures``. The right token is never counted, and a
client that made no failure is never throttled by the failures of others. The real app, the
real CLI, SQLite and PostgreSQL (the failures are counted in the database, for every web
process).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi import FastAPI
from fastapi.testclient import TestClient

from newsletter.cli import cli
from newsletter.config import (
    MIN_ADMIN_TOKEN_LENGTH,
    Config,
    admin_token_problem,
    load_config,
)
from newsletter.store import Store
from newsletter.web import create_app
from tests.conftest import SmtpServer, base_config, write_config
from tests.web.conftest import BASE, Clock, web_settings

ENV = "NEWSLETTER_ADMIN_TOKEN"
TOKEN = "an-admin-token-for-the-guess-test-0123456789"
GUESSES = 300


def as_client(app: FastAPI, host: str) -> TestClient:
    return TestClient(app, base_url=BASE, client=(host, 40000))


def metrics(c: TestClient, token: str) -> int:
    return c.get("/metrics", headers={"Authorization": f"Bearer {token}"}).status_code


@pytest.mark.parametrize(
    "weak",
    ["a", "s3cret-admin-token", "x" * 40, "change-me-to-a-long-random-admin-token-0123"],
)
def test_a_weak_admin_token_stops_serve_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, weak: str
) -> None:
    data = base_config(f"sqlite:///{tmp_path / 'db.sqlite'}")
    data["web"] = {"secret_key": "a-test-secret-that-signs-links-0123456789"}
    path = write_config(tmp_path, data)
    monkeypatch.delenv("NEWSLETTER_SECRET_KEY", raising=False)
    monkeypatch.setenv(ENV, weak)
    assert admin_token_problem(weak) is not None

    result = CliRunner().invoke(cli, ["--config", str(path), "serve", "--port", "1"])
    assert result.exit_code == 3  # ExitStatus.CONFIG
    assert "Serving on" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert f"${ENV}" in lines[0] and "the admin token" in lines[0]
    assert "secrets.token_urlsafe(48)" in lines[0]  # what to do
    assert admin_token_problem(TOKEN) is None and len(TOKEN) >= MIN_ADMIN_TOKEN_LENGTH


def test_a_weak_token_in_a_running_app_opens_nothing(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "a")
    r = client.get("/metrics", headers={"Authorization": "Bearer a"})
    assert r.status_code == 503 and ENV in r.text
    assert (
        client.post("/admin/send", json={}, headers={"Authorization": "Bearer a"}).status_code
        == 503
    )


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, TOKEN)


def test_300_wrong_guesses_from_one_client_are_slowed_and_the_right_token_still_works(
    app: FastAPI, web_config: Config, clock: Clock, admin: None
) -> None:
    rl = web_config.settings.web.rate_limit
    with as_client(app, "198.51.100.7") as guesser:
        answers = [metrics(guesser, f"guess-{i:04d}") for i in range(GUESSES)]
        assert Counter(answers) == {401: rl.admin_failures_per_ip, 429: GUESSES - 10}
        assert answers[: rl.admin_failures_per_ip] == [401] * 10  # then slowed, not before
        throttled = guesser.get("/metrics", headers={"Authorization": "Bearer guess-x"})
        assert throttled.status_code == 429
        assert int(throttled.headers["Retry-After"]) == rl.admin_failures_window
        # The throttled client's guesses are not compared at all, the right one neither.
        assert metrics(guesser, TOKEN) == 429

    # The operator elsewhere: the right token works, again and again (never counted).
    with as_client(app, "203.0.113.5") as operator:
        assert [metrics(operator, TOKEN) for _ in range(3 * rl.admin_failures_per_ip)] == [200] * 30
        assert (
            operator.post(
                "/admin/send", json={"dry_run": True}, headers={"Authorization": f"Bearer {TOKEN}"}
            ).status_code
            == 200
        )

    # Once its failures are older than the window, the client is answered again.
    clock.advance(seconds=rl.admin_failures_window + 1)
    with as_client(app, "198.51.100.7") as guesser:
        assert metrics(guesser, TOKEN) == 200
        assert metrics(guesser, "guess-again") == 401


@pytest.fixture
def small_caps(tmp_path: Path, db_url: str, smtp_server: SmtpServer) -> Config:
    data = web_settings(
        db_url, smtp_server, rate_limit={"admin_failures_per_ip": 3, "admin_failures": 5}
    )
    return load_config(write_config(tmp_path, data, "small.yaml"))


@pytest.fixture
def small_app(small_caps: Config, clock: Clock, admin: None) -> Iterator[FastAPI]:
    store = Store(small_caps.database_url)
    store.upgrade()
    yield create_app(small_caps, store, None, now=clock)
    store.close()


def test_many_guessing_clients_get_one_failure_each_once_the_overall_cap_is_reached(
    small_app: FastAPI,
) -> None:
    # Five clients fail once each: the overall cap (5) is reached.
    for i in range(5):
        with as_client(small_app, f"198.51.100.{i + 1}") as c:
            assert metrics(c, "guess") == 401
    # Now a client that failed once is slowed at once (it had 3 before the cap)...
    with as_client(small_app, "198.51.100.1") as c:
        assert metrics(c, "guess") == 429
    # ... a new client gets one guess, then waits...
    with as_client(small_app, "198.51.100.9") as c:
        assert [metrics(c, "guess") for _ in range(3)] == [401, 429, 429]
    # ... and the operator, who made no failure, is let in with the right token.
    with as_client(small_app, "203.0.113.5") as operator:
        assert metrics(operator, TOKEN) == 200
        assert metrics(operator, TOKEN) == 200
