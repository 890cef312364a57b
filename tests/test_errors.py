"""The error tree in newsletter/errors.py's docstring is the code's: each class it names has the
parent it shows, and every exception class the package defines is a ``NewsletterError``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import newsletter
from newsletter import errors
from newsletter.errors import NewsletterError


def _modules() -> list[object]:
    out = []
    for info in pkgutil.walk_packages(newsletter.__path__, "newsletter."):
        if info.name.endswith(("__main__", ".workers")):  # workers: needs the celery extra
            continue
        out.append(importlib.import_module(info.name))
    return out


def _classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in [*_modules(), importlib.import_module("newsletter.edition.workers")]:
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__.startswith("newsletter")
            ):
                found[name] = obj
    return found


def _tree() -> list[tuple[int, str]]:
    """(depth, class name) for each line of the docstring's tree."""
    lines = []
    for line in (errors.__doc__ or "").splitlines():
        m = re.match(r"^    ((?:│   |    )*)(?:├── |└── )?([A-Z]\w+)(?:\s|$)", line)
        if m and ("──" in line or m.group(2) == "NewsletterError"):
            depth = len(m.group(1)) // 4 + (1 if "──" in line else 0)
            lines.append((depth, m.group(2)))
    return lines


def test_the_docstring_tree_is_the_class_tree() -> None:
    classes = _classes()
    tree = _tree()
    assert tree[0] == (0, "NewsletterError") and len(tree) > 10
    parents: list[str] = []
    for depth, name in tree:
        parents = parents[:depth]
        assert name in classes, f"{name} is in the tree but not defined"
        if parents:
            base = classes[name].__bases__[0]
            assert base.__name__ == parents[-1], f"{name}: tree says {parents[-1]}, code {base}"
        parents.append(name)


INTERNAL = {"NotInlinable", "Crowded", "BadForward"}
"""Signals caught by their one caller, never shown: digest/render.py inlines such a template's CSS per
message instead; the sender pool hands a message to another connection when the relay refused
its connection as one too many; the inbound server answers an unreadable XFORWARD or XCLIENT
with 501."""


def test_every_error_the_package_defines_is_a_newsletter_error_and_in_the_tree() -> None:
    named = {name for _, name in _tree()}
    private_or_flow = {
        name
        for name, cls in _classes().items()
        if name.startswith("_") or not issubclass(cls, Exception) or name in INTERNAL
    }
    for name, cls in _classes().items():
        if name in private_or_flow:
            continue
        assert issubclass(cls, NewsletterError), f"{cls.__module__}.{name} is outside the root"
        assert name in named, f"{cls.__module__}.{name} is missing from errors.py's tree"
