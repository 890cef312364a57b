"""What an operator sees: fetch embeds new papers, rank and status say how ranking matches,
and without the extra everything works lexically and says so in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from newsletter.cli import cli
from newsletter.semantic.model import Embedder
from tests.conftest import SmtpServer

# Slow: `newsletter` in subprocesses, loading the sentence encoder.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent.parent


def demo(
    tmp_path: Path, model_cache: Path, smtp: SmtpServer | None = None, **ranking: object
) -> str:
    shutil.copytree(ROOT / "config", tmp_path / "config")
    path = tmp_path / "config" / "demo.yaml"
    data = yaml.safe_load(path.read_text())
    data["ranking"] = {"model_cache": str(model_cache), **ranking}
    if smtp is not None:
        data["smtp"] = {**data["smtp"], "host": smtp.host, "port": smtp.port}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def run(config: str, *args: str) -> str:
    # the run log as a service writes it (a one-shot command logs warnings only, as text)
    env = {"NEWSLETTER_LOG_FORMAT": "json"}
    result = CliRunner().invoke(cli, ["--config", config, *args], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_fetch_embeds_rank_and_status_say_semantic(
    tmp_path: Path, model_cache: Path, embedder: Embedder, smtp_server: SmtpServer
) -> None:
    config = demo(tmp_path, model_cache, smtp_server)
    run(config, "db", "upgrade")
    fetched = run(config, "fetch")
    assert "Embedded 44 papers for semantic ranking." in fetched
    assert "loading the model all-MiniLM-L6-v2" in fetched  # the run log (stderr)
    again = run(config, "fetch")
    assert "Embedded" not in again and "loading the model" not in again  # nothing new
    out = run(config, "rank", "--to", "grace@example.org", "--explain")
    assert "Matching: ranking fuses keywords with meaning (all-MiniLM-L6-v2@128)" in out
    assert "= words " in out and " + meaning " in out  # --explain shows both parts
    assert ", similarity 0." in out
    # The send reads every vector from the database: the model is not loaded.
    sent = run(config, "send", "--now")
    assert "loading the model" not in sent
    assert "ranking fuses keywords with meaning" in sent, sent
    assert len(smtp_server.received) == 3
    assert "Matching: ranking fuses keywords with meaning" in run(config, "status")


def test_without_a_model_everything_is_lexical_and_says_how_to_turn_it_on(
    tmp_path: Path, model_cache: Path
) -> None:
    config = demo(tmp_path, model_cache, model="models/none-here")
    run(config, "db", "upgrade")
    fetched = run(config, "fetch")
    assert "ranking is lexical: ranking.model: models/none-here is not a directory" in fetched
    out = run(config, "rank", "--to", "grace@example.org")
    assert "Matching: ranking is lexical" in out and "CUDA-L2" in out
    assert "ranking is lexical" in run(config, "status")


def test_without_the_extra_a_whole_demo_runs_lexically(tmp_path: Path, model_cache: Path) -> None:
    """A child process in which onnxruntime cannot be imported, as after a plain pip install."""
    config = demo(tmp_path, model_cache)
    code = (
        "import sys; sys.modules['onnxruntime'] = None\n"
        "from newsletter.cli import main\n"
        f"sys.argv = ['newsletter', '--config', {config!r}, 'demo', '--dir', {str(tmp_path / 'var')!r}]\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = " ".join((done.stdout + done.stderr).split())  # the summary wraps at 80 columns
    assert "ranking is lexical: onnxruntime is not installed" in out
    assert "pip install 'newsletter[semantic]'" in out
    assert "digests sent: 3" in out
