"""``newsletter fetch``: the per-source table, ``--json``, and the exit status."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from newsletter.cli import cli
from tests.conftest import FEEDS, base_config, write_config


def run(config: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--config", str(config), *args], catch_exceptions=False)


def make(tmp_path: Path, *sources: dict[str, str]) -> Path:
    path = write_config(
        tmp_path, base_config(f"sqlite:///{tmp_path / 'n.db'}", sources=list(sources))
    )
    assert run(path, "db", "upgrade").exit_code == 0
    return path


GOOD = {"name": "cs-dc", "kind": "arxiv_rss", "url": str(FEEDS / "arxiv-rss-cs.DC-2026-11-16.xml")}
BAD = {"name": "broken", "kind": "feed", "url": str(FEEDS / "bad" / "truncated.xml")}
GONE = {"name": "gone", "kind": "feed", "url": str(FEEDS / "nope.xml")}
NO_IDS = {"name": "no-ids", "kind": "feed", "url": str(FEEDS / "bad" / "no-ids.xml")}


def test_table_names_every_source_with_its_status(tmp_path: Path) -> None:
    path = make(tmp_path, GOOD, BAD, GONE, NO_IDS)
    result = run(path, "fetch")
    assert result.exit_code == 0, result.output  # some sources worked
    out = " ".join(result.stdout.split())  # columns are separated by runs of spaces
    for header in ("source", "status", "fetched", "new", "updated", "skipped", "errors", "time"):
        assert header in out
    assert "broken partial 10 " in out and "error in broken: malformed feed at line" in out
    assert "gone failed 0 " in out and "error in gone: cannot read" in out
    assert "2 sources had errors" in out
    assert (
        "skipped in no-ids: An item with neither link nor guid: no link, guid or identifier" in out
    )


def test_json_report(tmp_path: Path) -> None:
    path = make(tmp_path, GOOD, GONE)
    result = run(path, "fetch", "--json")
    data = json.loads(result.stdout)
    sources = {s["source"]: s for s in data["sources"]}
    # 2 of the 20 entries are revisions (announce_type replace) of papers not seen before:
    # stored, but never announced, so not "new".
    assert sources["cs-dc"]["status"] == "ok" and sources["cs-dc"]["new"] == 18
    assert sources["cs-dc"]["unannounced"] == 2 and sources["cs-dc"]["entries"] == 20
    assert sources["gone"]["status"] == "failed" and "cannot read" in sources["gone"]["errors"][0]
    assert data["failed_sources"] == ["gone"]
    again = json.loads(run(path, "fetch", "--json", "--source", "cs-dc").stdout)
    assert again["sources"][0]["unchanged"] == 20 and again["new"] == 0


def test_every_source_failing_exits_nonzero(tmp_path: Path) -> None:
    path = make(tmp_path, GONE)
    result = run(path, "fetch")
    assert result.exit_code == 1
    assert "failed" in result.output


def test_unknown_source_name_is_named(tmp_path: Path) -> None:
    path = make(tmp_path, GOOD)
    result = run(path, "fetch", "--source", "nope")
    assert result.exit_code != 0 and "unknown source nope" in result.output
