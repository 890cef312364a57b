"""Issue 18's documentation rules hold for every module of ``newsletter/`` (migrations aside).

* Every public function and method has a docstring: a function at module level, or a method of
  a class at module level (or nested in one), whose name does not start with ``_``. Functions
  defined inside functions are not public; neither are methods of a private class.
* A module longer than ``LONG`` lines says in its docstring why it is one module of that length.
  The rule is a simple one: the docstring names the module's size, with "one module", "long
  module", "module is long", the word "length" or a line count ("500 lines"). Whether the
  reason given is a good one is for review; the test makes sure a reason is there.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import newsletter

ROOT = Path(newsletter.__file__).parent

LONG = 500
"""A module with more lines than this says why in its docstring (or is split)."""

EXEMPT: set[str] = set()
"""Modules left out of both checks (none)."""

SAYS_WHY_LONG = re.compile(
    r"one module|long module|module is long|\blength\b|\b\d+ lines\b", re.IGNORECASE
)


def _modules() -> Iterator[tuple[str, str]]:
    """``(path from the project root, source)`` of every module the rules apply to."""
    for path in sorted(ROOT.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        name = path.relative_to(ROOT.parent).as_posix()
        if name not in EXEMPT:
            yield name, path.read_text(encoding="utf-8")


def undocumented(source: str) -> list[tuple[int, str]]:
    """``(line, qualified name)`` of each public function or method without a docstring."""
    found: list[tuple[int, str]] = []

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if not node.name.startswith("_") and ast.get_docstring(node) is None:
                    found.append((node.lineno, prefix + node.name))
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                walk(node.body, f"{prefix}{node.name}.")

    walk(ast.parse(source).body, "")
    return found


def says_why_long(source: str) -> bool:
    """Whether the module is at most ``LONG`` lines, or its docstring says why it is longer."""
    if len(source.splitlines()) <= LONG:
        return True
    doc = ast.get_docstring(ast.parse(source)) or ""
    return SAYS_WHY_LONG.search(" ".join(doc.split())) is not None


def test_every_public_function_and_method_has_a_docstring() -> None:
    missing = [
        f"{name}:{line} {qualname}"
        for name, source in _modules()
        for line, qualname in undocumented(source)
    ]
    assert not missing, "public functions without a docstring:\n" + "\n".join(missing)


def test_every_long_module_says_why_it_is_one_module() -> None:
    silent = [
        f"{name} ({len(source.splitlines())} lines)"
        for name, source in _modules()
        if not says_why_long(source)
    ]
    assert not silent, (
        f"modules over {LONG} lines whose docstring does not say why (see this test's "
        "docstring for the rule):\n" + "\n".join(silent)
    )


def test_the_rules_see_the_modules() -> None:
    """The checks read the real package: modules over the limit exist, and the walk finds
    methods as well as functions (else the two tests above would pass on nothing)."""
    modules = dict(_modules())
    assert "newsletter/cli/app.py" in modules
    assert "newsletter/store/protocol.py" in modules
    assert not any("migrations" in name or name in EXEMPT for name in modules)
    assert any(len(source.splitlines()) > LONG for source in modules.values())


def test_undocumented_finds_public_functions_and_methods_only() -> None:
    source = '''
def public(): pass
def _private(): pass
async def public_async(): pass
def documented():
    """Says what."""
class Public:
    def method(self): pass
    def _helper(self): pass
    def __init__(self): pass
    @property
    def prop(self): return 1
    class Inner:
        def deep(self): pass
class _Private:
    def method(self): pass
def outer():
    """Says what."""
    def inner(): pass
'''
    assert undocumented(source) == [
        (2, "public"),
        (4, "public_async"),
        (8, "Public.method"),
        (12, "Public.prop"),
        (14, "Public.Inner.deep"),
    ]


def test_says_why_long_wants_a_reason_only_past_the_limit() -> None:
    body = "x = 1\n" * LONG
    assert says_why_long('"""Short and silent."""\n' + "x = 1\n" * (LONG - 1))
    assert not says_why_long('"""Does many things, as long as it can."""\n' + body)
    assert not says_why_long(body + "x = 1\n")
    for reason in (
        "Why one module of this length: it is one concern.",
        "Why one long module: the command tree reads best in one place.",
        "This module is long because four providers' formats are.",
        "It passes 500\n lines because it lists the whole interface.",
    ):
        assert says_why_long(f'"""What it does.\n\n{reason}\n"""\n' + body), reason
