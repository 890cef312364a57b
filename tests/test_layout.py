"""The package's layout holds: no import cycles, no package importing one that uses it, a
short top level, and each send stage in its own module.

Imports are found everywhere, those inside functions and under ``TYPE_CHECKING`` too: a module
imported "at call time" to dodge a cycle is still a layer pointing up.

Each package says in its docstring what it may import (a ``May import:`` paragraph): ``core``
(the loose modules at the top, which import only each other), other packages, or one module of
a package (``bounces.score``: a leaf that imports nothing back). Every import must be declared,
and the declarations must point one way: a package that may import another is never imported by
it, directly or through others.
"""

from __future__ import annotations

import ast
from pathlib import Path

import newsletter

ROOT = Path(newsletter.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Every package module ``path`` imports: at load time, inside functions, or for types."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found.update(n for n in names if n in modules)
    return found


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in ROOT.rglob("*.py") if "migrations" not in p.parts}
    modules = set(paths)
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        deps = _imports(path, modules)
        # importing a.b.c loads a and a.b first
        for dep in list(deps):
            parts = dep.split(".")
            deps.update(".".join(parts[:i]) for i in range(2, len(parts)))
        graph[name] = {d for d in deps if d != name and not name.startswith(d + ".")}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _may_import() -> dict[str, set[str]]:
    """Each package -> the entries of its docstring's ``May import:`` paragraph."""
    out: dict[str, set[str]] = {}
    for init in sorted(ROOT.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        for paragraph in doc.split("\n\n"):
            if paragraph.startswith("May import:"):
                line = " ".join(paragraph.split())[len("May import:") :].strip().rstrip(".")
                out[init.parent.name] = {e.strip() for e in line.split(",") if e.strip()}
    return out


def _unit(module: str) -> str:
    """The package a module belongs to, or ``core`` for the loose modules at the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (ROOT / parts[1]).is_dir() else "core"


def _allowed(entry: str, module: str) -> bool:
    if entry == "core":
        return _unit(module) == "core"
    target = f"newsletter.{entry}"  # importing it runs its packages' __init__ too
    return module == target or module.startswith(target + ".") or target.startswith(module + ".")


def _undeclared(graph: dict[str, set[str]], may: dict[str, set[str]]) -> list[str]:
    """Every import of another package (or of the core) that the importer does not declare."""
    out = []
    for module, deps in sorted(graph.items()):
        unit = _unit(module)
        if unit == "core":
            allowed = {"core"}
            if module == "newsletter.__main__":
                allowed.add("cli")  # python -m newsletter
        else:
            allowed = may.get(unit, set())
        for dep in sorted(deps):
            if _unit(dep) != unit and not any(_allowed(e, dep) for e in allowed):
                out.append(f"{module} imports {dep}: not in {unit}'s May import")
    return out


def _climbs(graph: dict[str, set[str]], may: dict[str, set[str]]) -> list[str]:
    """Declarations that point back up: a package reaching, through what it may import, a
    package that may import it (or a module it names that imports it back)."""
    edges = {p: {e for e in entries if e != "core" and "." not in e} for p, entries in may.items()}
    out = [" -> ".join([*c, c[0]]) for c in _cycles(edges)]
    for package, entries in sorted(may.items()):
        for entry in sorted(e for e in entries if "." in e):
            seen: set[str] = set()
            parts = f"newsletter.{entry}".split(".")
            todo = [".".join(parts[:i]) for i in range(2, len(parts) + 1)]
            while todo:
                module = todo.pop()
                if module not in seen:
                    seen.add(module)
                    todo.extend(graph.get(module, ()))
            back = sorted(m for m in seen if _unit(m) == package)
            if back:
                out.append(f"{package} may import {entry}, which imports {package}: {back[0]}")
    return out


def test_newsletter_holds_at_most_ten_loose_modules() -> None:
    """A newcomer finds the pipeline in the packages; only the domain core stays at the top."""
    loose = sorted(p.name for p in ROOT.glob("*.py"))
    assert len(loose) <= 10, loose


def test_every_package_says_what_it_may_import() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    may = _may_import()
    assert packages - set(may) == set()
    names = packages | {"core"}
    unknown = {
        (p, e)
        for p, entries in may.items()
        for e in entries
        if e.split(".")[0] not in names
        or ("." in e and not (ROOT / (e.replace(".", "/") + ".py")).is_file())
    }
    assert unknown == set()


def test_every_import_is_declared() -> None:
    assert _undeclared(_graph(), _may_import()) == []


def test_no_package_imports_one_that_depends_on_it() -> None:
    assert _climbs(_graph(), _may_import()) == []


def test_an_import_that_climbs_back_up_fails() -> None:
    """store may import bounces.score (a leaf); bounces may import store. An import the
    declarations leave out, a declaration back up, and a named module that imports back
    are each found."""
    may = {"store": {"core", "bounces.score"}, "bounces": {"core", "store"}}
    graph = {
        "newsletter.store.db": {"newsletter.bounces.score", "newsletter.models"},
        "newsletter.bounces.score": set(),
        "newsletter.bounces.decide": {"newsletter.store", "newsletter.store.db"},
        "newsletter.store": {"newsletter.store.db"},
        "newsletter.models": set(),
    }
    assert _undeclared(graph, may) == [] and _climbs(graph, may) == []
    climbing = {**graph, "newsletter.store.db": {"newsletter.bounces.decide"}}
    assert _undeclared(climbing, may) == [
        "newsletter.store.db imports newsletter.bounces.decide: not in store's May import"
    ]
    assert _climbs(graph, {**may, "store": {"core", "bounces"}}) == ["bounces -> store -> bounces"]
    leaf_imports_back = {**graph, "newsletter.bounces.score": {"newsletter.store.db"}}
    assert _climbs(leaf_imports_back, may) == [
        "store may import bounces.score, which imports store: newsletter.store.db"
    ]
    assert _undeclared({"newsletter.models": {"newsletter.store"}}, may) == [
        "newsletter.models imports newsletter.store: not in core's May import"
    ]


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_nothing_imports_the_cli_but_main() -> None:
    graph = _graph()
    assert {m for m, deps in graph.items() if "newsletter.cli" in deps} <= {"newsletter.__main__"}


def test_each_send_stage_has_its_module() -> None:
    """A newcomer finds each stage by name: ingest, rank, render, plan, deliver, record, and
    each package's modules beside it."""
    for stage in (
        "sources/ingest.py",
        "rank/ranker.py",
        "digest/render.py",
        "edition/plan.py",
        "edition/build.py",
        "edition/loop.py",
        "edition/send_run.py",
        "deliver/pool.py",
        "deliver/smtp.py",
        "deliver/ledger.py",
        "store/ledger.py",
    ):
        assert (ROOT / stage).is_file(), stage


def test_a_send_imports_only_what_it_runs() -> None:
    """The command line, the send's modules and a semantic check load without the model's
    runtime (about 40 ms to import; a send that finds every vector stored never loads it),
    dkimpy (only with ``dkim:``) or the feed fetcher (only with ``send --fetch``)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import newsletter.cli, newsletter.edition, newsletter.deliver.dkim\n"
        "from newsletter.semantic.model import runtime_missing\n"
        "assert runtime_missing(load=False) is None\n"
        "print(sorted(m for m in ('onnxruntime', 'tokenizers', 'dkim', 'httpx',\n"
        "    'newsletter.runs.fetch') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_numpy_runs_its_matrix_products_on_one_thread() -> None:
    """Importing newsletter sets OpenBLAS to one thread before numpy starts its workers (they
    spin after each product, on the core the send's threads need); the environment wins."""
    import os
    import subprocess
    import sys

    code = (
        "import os, newsletter, numpy\n"
        "numpy.ones((64, 64)) @ numpy.ones((64, 64))\n"
        "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "1"]  # one thread: numpy started no BLAS worker
    env["OPENBLAS_NUM_THREADS"] = "2"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.split()[0] == "2"
