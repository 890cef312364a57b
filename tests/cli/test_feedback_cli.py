"""`newsletter feedback` through the real CLI on a fresh database (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

from newsletter.store import Store
from tests.cli.test_cli_e2e import config_path, run

__all__ = ["config_path"]


def votes(config: Path, email: str) -> list[tuple[str, int]]:
    from newsletter.config import load_config

    store = Store(load_config(str(config)).database_url)
    try:
        sub = store.get_subscriber(email)
        assert sub is not None
        return sorted((v.paper_key, v.value) for v in store.votes_of(sub.id))
    finally:
        store.close()


def stored_key(config: Path) -> tuple[str, str]:
    """Two stored arXiv ids from the fixture feeds."""
    from newsletter.config import load_config

    store = Store(load_config(str(config)).database_url)
    try:
        with store.engine.connect() as conn:
            from sqlalchemy import select

            from newsletter.store.tables import papers

            keys = conn.execute(select(papers.c.key).order_by(papers.c.key).limit(2)).scalars()
            first, second = list(keys)
            return first, second
    finally:
        store.close()


def test_votes_from_the_command_line_with_ids_versions_and_links(config_path: Path) -> None:
    assert run(config_path, "db", "upgrade").exit_code == 0
    assert run(config_path, "fetch").exit_code == 0
    a, b = stored_key(config_path)
    listed = run(config_path, "feedback", "kernels@example.org")
    assert listed.exit_code == 0 and "has no votes" in listed.output

    r = run(
        config_path,
        "feedback",
        "kernels@EXAMPLE.org",
        "--more",
        f"{a}v2",
        "--less",
        f"https://arxiv.org/abs/{b}v1",
    )
    assert r.exit_code == 0, r.output
    assert f"more like {a}" in r.output and f"less like {b}" in r.output
    assert votes(config_path, "kernels@example.org") == [(a, 1), (b, -1)]

    r = run(config_path, "feedback", "kernels@example.org", "--more", b, "--more", f"arXiv:{b}")
    assert r.exit_code == 0, r.output  # a new vote replaces the old one; twice is once
    assert votes(config_path, "kernels@example.org") == [(a, 1), (b, 1)]

    listed = run(config_path, "feedback", "kernels@example.org")
    assert listed.exit_code == 0 and a in listed.output and b in listed.output
    assert "more" in listed.output

    r = run(config_path, "feedback", "kernels@example.org", "--clear", a)
    assert r.exit_code == 0 and votes(config_path, "kernels@example.org") == [(b, 1)]


def test_an_unknown_paper_is_named_and_nothing_of_the_call_is_stored(config_path: Path) -> None:
    run(config_path, "db", "upgrade")
    run(config_path, "fetch")
    a, _ = stored_key(config_path)
    r = run(config_path, "feedback", "kernels@example.org", "--more", a, "--less", "2611.99999v3")
    assert r.exit_code != 0
    assert "2611.99999v3" in r.output and "no stored paper" in r.output
    r = run(config_path, "feedback", "kernels@example.org", "--more", a, "--more", "not-an-id")
    assert r.exit_code != 0 and "not an arXiv id or arXiv link: not-an-id" in r.output
    r = run(config_path, "feedback", "kernels@example.org", "--more", a, "--less", a)
    assert r.exit_code != 0 and "both --more and --less" in r.output
    assert votes(config_path, "kernels@example.org") == []


def test_an_unknown_subscriber_is_a_clear_error(config_path: Path) -> None:
    run(config_path, "db", "upgrade")
    run(config_path, "fetch")
    a, _ = stored_key(config_path)
    r = run(config_path, "feedback", "nobody@example.org", "--more", a)
    assert r.exit_code != 0 and "nobody@example.org is not a subscriber" in r.output
    r = run(config_path, "feedback", "not an address", "--more", a)
    assert r.exit_code != 0


def test_votes_are_exported_and_erased_with_forget(config_path: Path, tmp_path: Path) -> None:
    run(config_path, "db", "upgrade")
    run(config_path, "fetch")
    a, b = stored_key(config_path)
    assert (
        run(config_path, "feedback", "kernels@example.org", "--more", a, "--less", b).exit_code == 0
    )
    out = tmp_path / "subs.csv"
    assert run(config_path, "subscribers", "export", "--out", str(out)).exit_code == 0
    csv_text = out.read_text()
    assert csv_text.splitlines()[0].endswith(",votes,own_topics")
    [row] = [line for line in csv_text.splitlines() if line.startswith("kernels@example.org")]
    assert row.endswith(f"+{a} -{b},") or row.endswith(f"-{b} +{a},")  # no own topics
    shown = run(config_path, "subscribers", "show", "kernels@example.org", "--json")
    assert f'"paper": "{a}"' in shown.output and '"vote": "more"' in shown.output
    # importing the export back elsewhere is not harmed by the extra columns
    assert run(config_path, "subscribers", "import", str(out), "--dry-run").exit_code == 0

    assert (
        run(config_path, "subscribers", "remove", "kernels@example.org", "--forget").exit_code == 0
    )
    from newsletter.config import load_config

    store = Store(load_config(str(config_path)).database_url)
    try:
        from sqlalchemy import func, select

        from newsletter.store.tables import votes as votes_table

        with store.engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(votes_table)).scalar_one() == 0
    finally:
        store.close()


def test_feedback_help_explains_paper_references(config_path: Path) -> None:
    r = run(config_path, "feedback", "--help")
    assert r.exit_code == 0
    for words in ("--more PAPER", "--less PAPER", "--clear PAPER", "arXiv id", "repeatable"):
        assert words in r.output
