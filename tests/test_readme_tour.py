"""The README's short tour works for a user whose config names its own topics."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from newsletter.cli import cli

ROOT = Path(__file__).resolve().parent.parent


def run_cli(path: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--config", str(path), *args])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def _tour_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    tour = readme.split("## A short tour", 1)[1].split("\n## ", 1)[0]
    block = tour.split("```sh", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_readme_tour_names_no_topic_a_user_would_not_have(tmp_path: Path) -> None:
    import yaml

    from newsletter.config import parse_config

    example = (ROOT / "config" / "newsletter.example.yaml").read_text(encoding="utf-8")
    settings, _ = parse_config(example, "example.yaml")
    shipped = {t.name for t in settings.topics}
    commands = _tour_commands()
    for command in commands:
        for topic in re.findall(r"--topic (\S+)", command):
            assert topic not in shipped, f"the tour hard-codes topic {topic!r}: {command}"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert ". .venv/bin/activate" in readme and "pip install ." in readme

    # A user who renamed the topics runs the tour's 'subscribers add' with their own name.
    data = yaml.safe_load(example)
    data["topics"] = [{"name": "my-systems", "keywords": ["cache"]}]
    data["database"] = {"url": f"sqlite:///{tmp_path / 'n.db'}"}
    path = tmp_path / "newsletter.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    [add] = [c for c in commands if c.startswith("newsletter subscribers add")]
    args = shlex_split(add.replace("TOPIC", "my-systems"))[1:]
    run_cli(path, "db", "upgrade")
    assert "Added ada@example.org (my-systems)" in run_cli(path, *args)
    # Without --topic, the command lists the topics the config has.
    missing = CliRunner().invoke(
        cli, ["--config", str(path), "subscribers", "add", "b@example.org"]
    )
    assert "available: my-systems" in missing.output


def shlex_split(command: str) -> list[str]:
    import shlex

    return shlex.split(command)
