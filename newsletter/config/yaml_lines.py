"""YAML text → Python data with the line of every key, so each error names ``file:line``.

The config is composed into PyYAML's node tree (not loaded), which keeps where each key and
item starts; duplicate keys are reported here. A YAML syntax error is placed on the line to fix
(where the key, quote or bracket opened, not where the parser gave up) with a hint.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

Loc = tuple[str | int, ...]
_SCALARS = yaml.SafeLoader("")


def _to_python(
    node: yaml.Node, path: Loc, lines: dict[Loc, int], problems: list[str], file: str
) -> Any:
    """Turn a composed YAML node into Python data, recording the line of every key path."""
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            if not isinstance(key_node, yaml.ScalarNode):
                problems.append(f"{file}:{key_node.start_mark.line + 1}: keys must be plain words")
                continue
            sub = (*path, key)
            if key in result:
                problems.append(
                    f"{file}:{key_node.start_mark.line + 1}: {_dotted(sub)}: duplicate key "
                    f"(first given on line {lines[sub]})"
                )
                continue
            lines[sub] = key_node.start_mark.line + 1
            result[key] = _to_python(value_node, sub, lines, problems, file)
            lines[sub] = key_node.start_mark.line + 1
        return result
    if isinstance(node, yaml.SequenceNode):
        return [
            _to_python(item, (*path, i), lines, problems, file) for i, item in enumerate(node.value)
        ]
    if len(path) >= 2 and path[-2] in _VERBATIM_LISTS and isinstance(node, yaml.ScalarNode):
        return node.value  # as written: YAML would read 2611.00020 as the number 2611.0002
    return _SCALARS.construct_object(node)


_VERBATIM_LISTS = frozenset({"like"})
"""Lists whose items are kept as the text written (arXiv ids look like numbers to YAML)."""


def _dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _line_for(loc: Loc, lines: Mapping[Loc, int]) -> int:
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return 1


def _clean_loc(loc: tuple[Any, ...]) -> Loc:
    # pydantic puts union-member names ("str", "list[str]") in locations; they are not config keys.
    return tuple(
        p for p in loc if isinstance(p, int) or not re.match(r"^(str|list\[|function-)", p)
    )


_OPENED_AT_CONTEXT = (
    "while scanning a simple key",
    "while scanning a quoted scalar",
    "while scanning a block scalar",
    "while parsing a flow sequence",
    "while parsing a flow mapping",
)
"""Parser contexts whose start (not where the parser gave up) is the line with the mistake."""

_YAML_HINTS = (
    ("could not find expected ':'", "a key without ':' after it? write 'key: value'"),
    (
        "mapping values are not allowed here",
        "check this line's indentation, or quote a value that contains ': '",
    ),
    ("expected <block end>", "this line is not indented like the lines above it"),
    ("cannot start any token", "indent with spaces, not tabs"),
    ("expected ',' or ']'", "the '[' opened on this line is not closed"),
    ("expected ',' or '}'", "the '{' opened on this line is not closed"),
    ("found unexpected end of stream", "the quote opened on this line is not closed"),
)


def _yaml_problem(e: yaml.YAMLError, text: str) -> tuple[int, str]:
    """The line of a YAML mistake (1-based) and what is wrong, with a hint where one helps.

    PyYAML marks where it gave up, often the line after the mistake (a missing ':' is noticed
    on the next line, an unclosed bracket at the end of the file); for those the context mark,
    where the key, quote or bracket started, is the line to fix.
    """
    context = getattr(e, "context", None)
    context_mark = getattr(e, "context_mark", None)
    problem_mark = getattr(e, "problem_mark", None)
    mark = problem_mark
    if context_mark is not None and (context in _OPENED_AT_CONTEXT or problem_mark is None):
        mark = context_mark
    line = mark.line + 1 if mark is not None else 1
    problem = str(getattr(e, "problem", None) or e)
    if problem_mark is not None:
        opened = _quote_run_on(text, problem_mark.line)
        if opened is not None:
            start, end = opened
            return start + 1, (
                f"the quote opened on this line is not closed on it, so the value runs on to "
                f"line {end + 1} (close the quote, or quote with the other kind if the value "
                "holds this one)"
            )
    hint = next((h for needle, h in _YAML_HINTS if needle in problem), None)
    if "mapping values are not allowed here" in problem:
        # "smtp" (no ':') above "  host: x" reads as one text "smtp host" until the ':'.
        key = _key_without_colon_above(text.splitlines(), line - 1)
        if key is not None:
            line, hint = key + 1, "a key without ':' after it? write 'key:'"
    return line, f"{problem} ({hint})" if hint else problem


def _quote_run_on(text: str, problem_line: int) -> tuple[int, int] | None:
    """Where a quoted value that ran over several lines opened and ended (0-based), when the
    mistake PyYAML found is on the line it ended on or the next: a quote left open on one line
    is closed by the next quote further down, and what follows that one is then reported, on
    the wrong line and with a wrong hint."""
    found: tuple[int, int] | None = None
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if token.start_mark.line > problem_line:
                break
            if (
                isinstance(token, yaml.ScalarToken)
                and token.style in ('"', "'")
                and token.end_mark.line > token.start_mark.line
            ):
                found = (token.start_mark.line, token.end_mark.line)
    except yaml.YAMLError:
        pass  # the tokens read up to the mistake are the ones that matter
    if found is not None and found[1] <= problem_line <= found[1] + 1:
        return found
    return None


def _key_without_colon_above(lines: list[str], index: int) -> int | None:
    """The index of the line above ``index`` that looks like a key missing its ':'."""
    if not 0 < index < len(lines):
        return None
    indent = len(lines[index]) - len(lines[index].lstrip(" "))
    for i in range(index - 1, -1, -1):
        above = lines[i].strip()
        if not above or above.startswith("#"):
            continue
        above_indent = len(lines[i]) - len(lines[i].lstrip(" "))
        looks_like_key = re.fullmatch(r"(- )?[A-Za-z_][\w.-]*", above) is not None
        return i if looks_like_key and above_indent < indent else None
    return None
