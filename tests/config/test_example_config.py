"""The example config (config/newsletter.example.yaml) shows every key the settings accept."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "newsletter.example.yaml"
_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<dash>- )?(?P<key>[a-z_]+):(?:\s+(?P<value>.*))?$")


def settings_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every key path the settings models accept: ``smtp.host``, ``sources[].enabled``..."""
    paths: set[str] = set()
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra
        if isinstance(extra, dict) and extra.get("removed"):
            continue  # a removed key, kept only to say what replaced it
        path = f"{prefix}{field.alias or name}"
        paths.add(path)
        pending: list[Any] = [field.annotation]
        while pending:
            kind = pending.pop()
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                paths |= settings_paths(kind, f"{path}.")
            elif typing.get_origin(kind) is list:
                for arg in typing.get_args(kind):
                    if isinstance(arg, type) and issubclass(arg, BaseModel):
                        paths |= settings_paths(arg, f"{path}[].")
            elif typing.get_origin(kind) in (typing.Union, types.UnionType):
                pending.extend(typing.get_args(kind))
    return paths


def example_paths(text: str) -> set[str]:
    """Key paths written in the example, commented-out ones included (``# dkim:`` blocks).

    A comment line that reads as a key (``#   selector: news2026``) counts once its ``# `` is
    removed; its indentation then places it like the YAML it would be uncommented.
    """
    paths: set[str] = set()
    stack: list[tuple[int, str]] = []  # (column, path) of the enclosing keys and list items
    for raw in text.splitlines():
        line = re.sub(r"^( *)# ?", r"\1", raw) if raw.lstrip().startswith("#") else raw
        m = _KEY_LINE.match(line)
        if m is None:
            continue
        col = len(m["indent"])
        if m["dash"]:  # a list item: its keys sit two columns right of the dash
            while stack and stack[-1][0] >= col:
                stack.pop()
            parent = stack[-1][1] if stack else ""
            stack.append((col + 1, f"{parent}[]"))
            col += 2
        while stack and stack[-1][0] >= col:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        path = f"{parent}.{m['key']}" if parent else m["key"]
        paths.add(path)
        stack.append((col, path))
        value = (m["value"] or "").strip()
        if value.startswith("{"):  # a flow mapping: {cron: "...", timezone: UTC}
            paths |= {f"{path}.{k}" for k in re.findall(r"([a-z_]+):", value.split("#")[0])}
    return paths


def test_every_key_the_code_reads_is_in_the_example_config() -> None:
    from newsletter.config import Settings

    text = EXAMPLE.read_text(encoding="utf-8")
    written = example_paths(text)
    # list items written in flow style, "- {cron: ..., timezone: ...}", under schedule.fetch
    for m in re.finditer(r"^ *- \{(.*)\}", text, re.M):
        written |= {f"schedule.fetch[].{k}" for k in re.findall(r"([a-z_]+):", m[1])}
    missing = sorted(settings_paths(Settings) - written)
    assert missing == [], f"keys missing from {EXAMPLE.name}: {missing}"


def test_the_example_checker_sees_a_missing_key(tmp_path: Path) -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    assert "sources[].allow_private" in example_paths(text)
    assert "dkim.private_key_env" in example_paths(text)  # a commented-out section counts
    without = re.sub(r"^.*\bmax_per_hour:.*\n", "", text, flags=re.M)
    assert "inbound.max_per_hour" not in example_paths(without)
