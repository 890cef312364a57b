"""Issue 16 item 13: a local file's bytes never reach errors, the database, logs or alerts.

A source pointed at ``/proc/self/environ`` used to quote its first bytes
(``NEWSLETTER_SMTP_PASSWORD=...``) into the stored source error, ``status``, the logs and the
operator's alert mail. Remote answers are quoted at most 80 characters, control characters
removed.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from newsletter.sources import PARSERS
from newsletter.sources.base import response_excerpt
from newsletter.store import Store
from tests.conftest import SmtpServer, base_config, write_config

# Slow: `newsletter fetch` in a subprocess on each database.
pytestmark = pytest.mark.slow

SECRET = "hunter2-smtp-password-c0ffee"


def environ_file(tmp_path: Path) -> str:
    """/proc/self/environ of the fetching process; a file that looks like it without /proc."""
    if os.access("/proc/self/environ", os.R_OK):
        return "/proc/self/environ"
    fake = tmp_path / "environ"
    fake.write_bytes(f"HOME=/root\0NEWSLETTER_SMTP_PASSWORD={SECRET}\0".encode())
    return str(fake)


def newsletter(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The password first, as in the issue: the file's first bytes are the secret.
    env = {"NEWSLETTER_SMTP_PASSWORD": SECRET, "NEWSLETTER_LOG_FORMAT": "json"}
    env |= {k: v for k, v in os.environ.items() if not k.startswith("NEWSLETTER_")}
    return subprocess.run(
        [sys.executable, "-m", "newsletter", "--config", str(config), "-vv", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_source_at_proc_self_environ_never_quotes_it(
    tmp_path: Path, db_url: str, store: Store, smtp_server: SmtpServer
) -> None:
    target = environ_file(tmp_path)
    sources = [
        {"name": f"env-{kind}", "kind": kind, "url": target}
        for kind in ("hf_daily", "feed", "arxiv_rss", "arxiv_api")
    ]
    sources.append({"name": "env-url", "kind": "hf_daily", "url": f"file://{target}"})
    config = write_config(
        tmp_path,
        base_config(
            db_url,
            smtp_server,
            sources=sources,
            alerts={"email": "ops@papers.example.org"},
        ),
    )
    fetched = newsletter(config, "fetch")
    status = newsletter(config, "status")
    assert fetched.returncode == 1  # every source failed
    assert status.returncode == 0

    # The failure is recorded and reported; the file's contents are not.
    errors = [store.source_state(s["name"]).last_error for s in sources]
    assert all(errors), errors
    assert "not JSON" in (errors[0] or "")
    alerts = [r.message for r in smtp_server.received]
    assert len(alerts) == 1 and "every source failed" in str(alerts[0]["Subject"])
    for where, text in [
        ("fetch output", fetched.stdout + fetched.stderr),
        ("status output", status.stdout + status.stderr),
        ("stored source errors", "\n".join(e or "" for e in errors)),
        ("alert mail", alerts[0].as_string()),
    ]:
        assert SECRET not in text, f"the secret leaked into the {where}"
        assert "NEWSLETTER_SMTP_PASSWORD" not in text, f"environ leaked into the {where}"


def test_remote_answers_are_quoted_short_and_without_control_characters() -> None:
    body = b"\x1b[2J\x1b]8;;https://evil.example\x07<html>" + b"x" * 500
    problem = PARSERS["hf_daily"](body, "https://huggingface.co/api/daily_papers").problems[0]
    quoted = problem.split("the response began ", 1)[1]
    assert "\x1b" not in problem and "\x07" not in problem
    assert len(ast.literal_eval(quoted)) <= 80
    assert response_excerpt(body, "/var/feeds/hf.json") == ""
    assert response_excerpt(body, "file:///var/feeds/hf.json") == ""
