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
