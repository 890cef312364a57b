"""docs/benchmarks.md leads with one table built from the sections (issue 29 item 11)."""

from __future__ import annotations

from pathlib import Path

import pytest

import bench.__main__ as builder
from bench import summary

ROOT = Path(__file__).resolve().parent.parent


def test_the_committed_page_is_what_the_builder_makes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(builder, "OUT", tmp_path / "benchmarks.md")
    builder.rebuild()
    built = (tmp_path / "benchmarks.md").read_text()
    assert built == (ROOT / "docs" / "benchmarks.md").read_text(), "run: python -m bench --rebuild"
    head = built.split("\n## ", 1)[0]
    assert "| benchmark | target | latest | pass | measured (date, machine) | command |" in head
    assert "see below" not in head  # every section has its rows
    # one screenful per benchmark at most: twelve sections and their table (the relay pace,
    # issue 41, brought it past 400; the install and the suite's time, issue 43, to 455)
    assert len(built.splitlines()) < 500


def test_a_new_section_adds_its_rows_to_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sections, history = tmp_path / "sections", tmp_path / "history"
    sections.mkdir()
    history.mkdir()
    (sections / "semantic.md").write_text(
        "## Semantic: embeddings for 2,000 papers\n\nA table.\n\n"
        + summary("embed 2,000 papers (≤ 30 s)", "12.5 s", True)
        + "\n"
        + summary("recall@10 vs lexical | alone", "0.81", False)
        + "\n\n_Measured 2026-11-27 08:00 UTC on Linux x86_64, 2 cores (Intel(R) Xeon(R) "
        "Processor), 24 GiB RAM, Python 3.11.7 in 40 s._\n"
    )
    (sections / "plain.md").write_text("## Plain\n\nNo summary line.\n")
    (history / "semantic.md").write_text("the run of 2026-11-20\n")
    monkeypatch.setattr(builder, "SECTIONS", sections)
    monkeypatch.setattr(builder, "HISTORY", history)
    monkeypatch.setattr(builder, "OUT", tmp_path / "out.md")
    builder.rebuild()
    out = (tmp_path / "out.md").read_text()
    head, body = out.split("\n## ", 1)
    assert (
        "| [Semantic](#semantic-embeddings-for-2000-papers) | embed 2,000 papers (≤ 30 s) | "
        "12.5 s | met | 2026-11-27, 2 cores (Intel(R) Xeon(R) Processor) | "
        "`python -m bench semantic` |" in head
    )
    assert "| recall@10 vs lexical / alone | 0.81 | **missed** |" in head
    assert "| [Plain](#plain) | see below |" in head
    assert "[bench/history/semantic.md](../bench/history/semantic.md)" in body
    assert "the run of 2026-11-20" not in out  # history stays in its file
