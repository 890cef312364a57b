"""`newsletter rank --to EMAIL [--explain]` on the bundled demo config and snapshot feeds."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from click.testing import CliRunner

from newsletter.cli import cli
from newsletter.rank import TREND_LIFT

ROOT = Path(__file__).resolve().parents[2]


def demo_config(tmp_path: Path) -> str:
    shutil.copytree(ROOT / "config", tmp_path / "config")
    config = str(tmp_path / "config" / "demo.yaml")
    runner = CliRunner()
    for args in (["db", "upgrade"], ["fetch"]):
        result = runner.invoke(cli, ["--config", config, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    return config


def test_rank_prints_sections_scores_reasons_and_explanations(tmp_path: Path) -> None:
    config = demo_config(tmp_path)
    result = CliRunner().invoke(
        cli,
        ["--config", config, "rank", "--to", "grace@example.org", "--explain"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "grace@example.org (active): topics gpu-kernels, llm-serving" in out
    assert "GPU kernels (" in out and "LLM serving (" in out
    # the best GPU-kernels paper, with its reason and the parts of its score
    assert "1. " in out and "2611.00017 CUDA-L2" in out
    assert "title: cuBLAS, matrix multiplication, CUDA · 84 upvotes · 3 sources" in out
    assert "relevance " in out
    # 84 upvotes, 3 sources: trending lifts, but never by more than TREND_LIFT.
    lift = float(re.search(r"× trending (\d\.\d{3}) × recency", out).group(1))  # type: ignore[union-attr]
    assert 1.1 < lift < 1 + TREND_LIFT
    listed = [
        line.split()[2] for line in result.output.splitlines() if line[:4].strip().endswith(".")
    ]
    assert len(listed) == len(set(listed)) > 0  # never twice across sections

    plain = CliRunner().invoke(cli, ["--config", config, "rank", "--to", "grace@example.org"])
    assert plain.exit_code == 0 and "× trending" not in plain.output


def test_rank_for_an_unknown_address_says_so(tmp_path: Path) -> None:
    config = demo_config(tmp_path)
    result = CliRunner().invoke(cli, ["--config", config, "rank", "--to", "nobody@example.org"])
    assert result.exit_code == 1
    assert "nobody@example.org is not a subscriber" in result.output


def test_rank_shows_titles_and_reasons_as_the_digest_does(tmp_path: Path) -> None:
    """Issue 43: ``rank`` printed ``Sub-$O(n^2)$`` where the digest showed the title as text,
    and Tilus's reason named "large language model serving" under a title saying "LLM
    Serving". The terminal shows each title and reason as the mailed digest does."""
    import html

    from newsletter.digest.latex import to_text
    from tests.rank.relevance.corpus import load_papers

    config = demo_config(tmp_path)
    runner = CliRunner()
    ranked = runner.invoke(cli, ["--config", config, "rank", "--to", "grace@example.org"])
    assert ranked.exit_code == 0, ranked.output
    page, text = tmp_path / "digest.html", tmp_path / "digest.txt"
    preview = ["preview", "--to", "grace@example.org", "--out", str(page), "--text", str(text)]
    previewed = runner.invoke(cli, ["--config", config, *preview])
    assert previewed.exit_code == 0, previewed.output
    terminal = " ".join(ranked.output.split())
    mail_text = " ".join(text.read_text(encoding="utf-8").split())
    mail_html = " ".join(html.unescape(page.read_text(encoding="utf-8")).split())

    assert "2611.00007 Sub-O(n²) HPCTransCompile: An AI Compiler" in terminal
    assert "$" not in terminal
    assert "Sub-O(n²) HPCTransCompile: An AI Compiler" in mail_text
    titles = {p.key: " ".join(to_text(p.title).split()) for p in load_papers()}
    mailed = set(re.findall(r"arxiv\.org/abs/(\d{4}\.\d{5})", mail_text))
    assert len(mailed) >= 8
    for key in mailed:  # every mailed title, as the mail shows it, is the terminal's
        assert f"{key} {titles[key]}" in terminal, key
        assert titles[key] in mail_text, key
    # Reasons quote the paper's own words (Tilus: tests/rank/test_reasons.py), the same in the
    # terminal and in the mail.
    wide = runner.invoke(
        cli, ["--config", config, "rank", "--to", "grace@example.org"], env={"COLUMNS": "500"}
    )
    reasons = [
        line.strip()
        for line in wide.output.splitlines()
        if line.startswith(" " * 15) and re.match(r"\s+(title|abstract): ", line)
    ]
    assert len(reasons) >= 5
    for reason in reasons:  # the parts the mail shows (upvotes and sources are shown apart)
        assert reason.split(" · ")[0] in mail_html, reason
