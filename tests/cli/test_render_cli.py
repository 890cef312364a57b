"""`newsletter preview` writes exactly the HTML that `newsletter send` then sends."""

from __future__ import annotations

import re
from email.header import decode_header, make_header
from pathlib import Path

import pytest

from tests.cli.test_cli_e2e import config_path, run, text_and_html
from tests.conftest import SmtpServer, base_config, write_config

__all__ = ["config_path"]

TOKEN = re.compile(r"/(unsubscribe|manage|archive/view|feedback)/[A-Za-z0-9_.\-]+")


def unsigned(html: str) -> str:
    """Signed links carry a timestamp; the rest must be byte for byte the same."""
    return TOKEN.sub(r"/\1/TOKEN", html)


def test_preview_writes_exactly_the_html_that_is_sent(
    config_path: Path, tmp_path: Path, smtp_server: SmtpServer
) -> None:
    run(config_path, "db", "upgrade")
    run(config_path, "fetch")
    out, text_out = tmp_path / "digest.html", tmp_path / "digest.txt"
    result = run(
        config_path,
        "preview",
        "--to",
        "kernels@example.org",
        "--out",
        str(out),
        "--text",
        str(text_out),
    )
    assert result.exit_code == 0, result.output
    assert smtp_server.received == []
    sent = run(config_path, "send", "--now", "--to", "kernels@example.org")
    assert sent.exit_code == 0, sent.output
    [mail] = smtp_server.messages_to("kernels@example.org")
    text, html = text_and_html(mail)
    preview = out.read_text(encoding="utf-8")
    assert 'style="' in preview and "CUDA-L1" in preview
    # the message body ends with a line break; otherwise the same bytes
    assert unsigned(html.replace("\r\n", "\n")) == unsigned(preview) + "\n"
    assert unsigned(text.replace("\r\n", "\n")) == unsigned(text_out.read_text(encoding="utf-8"))
    subject = str(make_header(decode_header(mail["Subject"])))
    assert f"Subject: {subject}" in " ".join(result.output.split())


@pytest.mark.parametrize("policy", ["skip", "send"])
def test_an_empty_edition_follows_the_config_policy(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer, policy: str
) -> None:
    data = base_config(
        db_url,
        smtp_server,
        digest={"empty": policy},
        subscribers=[{"email": "q@example.org", "topics": ["teleport"]}],
    )
    data["topics"].append(
        {"name": "teleport", "title": "Quantum teleportation", "keywords": ["teleportation"]}
    )
    config = write_config(tmp_path, data)
    run(config, "db", "upgrade")
    run(config, "fetch")
    sent = run(config, "send", "--now")
    assert sent.exit_code == 0, sent.output
    mails = smtp_server.messages_to("q@example.org")
    if policy == "skip":
        assert mails == []
        return
    [mail] = mails
    subject = str(make_header(decode_header(mail["Subject"])))
    assert subject.startswith("Nothing new in Quantum teleportation · ")
    text, html = text_and_html(mail)
    assert "Nothing new matched your topics today" in text
    assert "Nothing new matched your topics today" in html
    assert "/unsubscribe/" in text and "1 Test Street, Testville" in html
