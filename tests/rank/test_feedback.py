"""Votes and example papers change what a real send picks (SQLite and PostgreSQL, real SMTP).

A reader who says "more like this" of a paper gets papers like it, with the reason saying so;
a reader without votes gets exactly the shared topic list; a topic's ``like:`` papers shape
every reader's list of that topic.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.cli.test_cli_e2e import run, text_and_html
from tests.conftest import SmtpServer, base_config, write_config


def listed(output: str) -> list[str]:
    return re.findall(r"^\s*\d+\.\s+[\d.]+\s+(\S+)", output, re.MULTILINE)


@pytest.fixture
def config_path(tmp_path: Path, db_url: str, smtp_server: SmtpServer) -> Path:
    data = base_config(
        db_url,
        smtp_server,
        subscribers=[
            {"email": "voter@example.org", "topics": ["gpu-kernels"]},
            {"email": "quiet@example.org", "topics": ["gpu-kernels"]},
            {"email": "render@example.org", "topics": ["rendering"]},
        ],
    )
    return write_config(tmp_path, data)


def test_more_like_this_reaches_the_readers_digest_and_no_one_elses(
    config_path: Path, smtp_server: SmtpServer
) -> None:
    assert run(config_path, "db", "upgrade").exit_code == 0
    assert run(config_path, "fetch").exit_code == 0
    shared = listed(run(config_path, "rank", "--to", "quiet@example.org").output)
    rendering = listed(run(config_path, "rank", "--to", "render@example.org").output)
    assert shared and rendering
    liked = next(k for k in rendering if k not in shared)

    voted = run(config_path, "feedback", "voter@example.org", "--more", liked)
    assert voted.exit_code == 0, voted.output
    mine = run(config_path, "rank", "--to", "voter@example.org")
    assert "1 of their votes reorder their topics" in " ".join(mine.output.split())
    assert "like: " in mine.output
    assert listed(mine.output) != shared
    # The reader without votes still gets exactly the shared list.
    assert listed(run(config_path, "rank", "--to", "quiet@example.org").output) == shared

    sent = run(config_path, "send", "--now")
    assert sent.exit_code == 0, sent.output
    # The reason is in the HTML part (the text part keeps title, authors, excerpt, one link).
    htmls = {m.rcpt_tos[0]: text_and_html(m.message)[1] for m in smtp_server.received}
    assert "seeing this:</b> like: " in " ".join(htmls["voter@example.org"].split())
    assert "like: " not in htmls["quiet@example.org"]


def test_a_topics_like_papers_shape_every_readers_list(
    config_path: Path, smtp_server: SmtpServer
) -> None:
    assert run(config_path, "db", "upgrade").exit_code == 0
    assert run(config_path, "fetch").exit_code == 0
    before = listed(run(config_path, "rank", "--to", "quiet@example.org").output)
    rendering = listed(run(config_path, "rank", "--to", "render@example.org").output)
    example = next(k for k in rendering if k not in before)

    data = yaml.safe_load(config_path.read_text())
    data["topics"][0]["like"] = [example]
    config_path.write_text(yaml.safe_dump(data))
    for reader in ("quiet@example.org", "voter@example.org"):
        out = run(config_path, "rank", "--to", reader, "--explain").output
        assert example in listed(out), out
        assert "like: " in out
