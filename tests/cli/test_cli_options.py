"""Options where people put them, and help that reads as text (issue 29 items 9 and 10)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from newsletter.cli import NO_CONFIG, cli

ROOT = Path(__file__).resolve().parents[2]


def _commands(group: click.Group = cli, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        yield (*path, name)
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))


ALL = list(_commands())


@pytest.fixture
def demo_config(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "config", tmp_path / "config")
    return tmp_path / "config" / "demo.yaml"


def test_config_after_the_subcommand_is_the_config(
    demo_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./newsletter.yaml here: only --config can name it
    runner = CliRunner()
    upgraded = runner.invoke(cli, ["db", "upgrade", "--config", str(demo_config)])
    assert upgraded.exit_code == 0, upgraded.output
    fetched = runner.invoke(cli, ["fetch", "--config", str(demo_config)])
    assert fetched.exit_code == 0, fetched.output
    assert "No such option" not in fetched.output
    listed = runner.invoke(cli, ["subscribers", "list", "-c", str(demo_config)])
    assert listed.exit_code == 0 and "ada@example.org" in listed.output
    # on the group too, and the later of two places wins
    grouped = runner.invoke(
        cli, ["-c", "missing.yaml", "subscribers", "-c", str(demo_config), "list"]
    )
    assert grouped.exit_code == 0 and "grace@example.org" in grouped.output
    missing = runner.invoke(cli, ["-c", str(demo_config), "status", "-c", "missing.yaml"])
    assert missing.exit_code != 0 and "missing.yaml: no such config file" in missing.output


@pytest.mark.parametrize("command", ALL, ids=" ".join)
def test_every_command_takes_config_after_its_name_and_its_help_is_text(
    command: tuple[str, ...],
) -> None:
    result = CliRunner().invoke(cli, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "``" not in result.output, f"raw reST in 'newsletter {' '.join(command)} --help'"
    if command[-1] not in NO_CONFIG and command[0] not in NO_CONFIG:
        assert "-c, --config FILE" in result.output


def test_the_top_level_help_is_text() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0 and "``" not in result.output
