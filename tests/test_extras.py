"""What the plain install leaves to extras says so in one line: the workers mode without Celery
(``newsletter[workers]``), a ``digest.html`` of one's own without premailer
(``newsletter[templates]``). Each missing package is made unimportable here
(``sys.modules[name] = None``) in the test's own process or in a ``newsletter`` subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from newsletter.cli import cli
from newsletter.config import load_config
from newsletter.digest.render import Renderer, shipped_templates_dir
from newsletter.errors import ExitStatus, NotInstalled
from tests.conftest import base_config, write_config

WORKERS = {"broker_url": "redis://127.0.0.1:6379/0", "queue": "extras-test"}


def newsletter_without(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``newsletter ARGS`` in a process in which ``module`` cannot be imported."""
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"
        f"sys.argv = ['newsletter', *{list(args)!r}]\n"
        "from newsletter.cli import main\n"
        "main()\n"
    )
    env = {**os.environ, "NEWSLETTER_LOG_FORMAT": "text"}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )


def assert_one_line(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert result.returncode == ExitStatus.NOT_INSTALLED, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


@pytest.mark.slow
def test_a_worker_without_celery_says_to_install_the_workers_extra(tmp_path: Path) -> None:
    """Said before anything else: the database is not even reached (nothing listens here)."""
    data = base_config("postgresql+psycopg://nobody@127.0.0.1:9/none", workers=WORKERS)
    path = write_config(tmp_path, data)
    result = newsletter_without("celery", "--config", str(path), "worker", cwd=tmp_path)
    assert_one_line(
        result,
        f"{path}: workers: sending with Celery workers needs the workers extra",
        "pip install 'newsletter[workers]'",
    )


@pytest.mark.slow
@pytest.mark.postgres
def test_a_send_to_the_workers_without_celery_says_so_in_one_line(
    tmp_path: Path, pg_schema_url: str
) -> None:
    data = base_config(pg_schema_url, workers=WORKERS)
    data["subscribers"] = [{"email": "ada@example.org", "topics": ["gpu-kernels"]}]
    path = write_config(tmp_path, data)
    upgrade = CliRunner().invoke(cli, ["--config", str(path), "db", "upgrade"])
    assert upgrade.exit_code == 0, upgrade.output
    result = newsletter_without("celery", "--config", str(path), "send", "--now", cwd=tmp_path)
    assert_one_line(result, "pip install 'newsletter[workers]'", "remove the workers: section")


def own_template(tmp_path: Path) -> Path:
    """A templates folder with a digest.html of the operator's (the shipped one, retitled)."""
    folder = tmp_path / "templates"
    folder.mkdir()
    html = (shipped_templates_dir() / "digest.html").read_text(encoding="utf-8")
    (folder / "digest.html").write_text(html.replace("<title>", "<title>Ours: "), "utf-8")
    return folder


def test_an_own_digest_template_without_premailer_says_to_install_the_templates_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config(write_config(tmp_path, base_config(f"sqlite:///{tmp_path / 'n.db'}")))
    folder = own_template(tmp_path)
    Renderer(config.settings, folder)  # with premailer: inlined once, no error
    monkeypatch.setitem(sys.modules, "premailer", None)
    with pytest.raises(NotInstalled) as caught:
        Renderer(config.settings, folder)
    message = str(caught.value)
    assert message.startswith(f"{folder / 'digest.html'}: inlining its CSS needs premailer")
    assert "pip install 'newsletter[templates]'" in message
    # The shipped template comes inlined: no premailer needed.
    assert Renderer(config.settings).fast
    # A template that cannot be inlined once needs premailer on every message: said at once.
    (folder / "digest.html").write_text('{% include "digest.txt" %}<p>x</p>', "utf-8")
    with pytest.raises(NotInstalled, match=r"digest.html: inlining its CSS needs premailer"):
        Renderer(config.settings, folder)


@pytest.mark.slow
def test_a_send_with_an_own_template_without_premailer_is_one_line(tmp_path: Path) -> None:
    """What an operator sees: ``newsletter send --now --dry-run`` stops with the one line."""
    data = base_config(f"sqlite:///{tmp_path / 'n.db'}")
    data["subscribers"] = [{"email": "ada@example.org", "topics": ["gpu-kernels"]}]
    data["digest"] = {"templates_dir": str(own_template(tmp_path))}
    path = write_config(tmp_path, data)
    for args in (["db", "upgrade"], ["fetch"]):
        done = CliRunner().invoke(cli, ["--config", str(path), *args])
        assert done.exit_code == 0, done.output
    result = newsletter_without(
        "premailer", "--config", str(path), "send", "--now", "--dry-run", cwd=tmp_path
    )
    assert_one_line(result, "digest.html: inlining its CSS needs premailer", "[templates]")
