"""The package's layout holds: no import cycles, and each send stage has its own module.

Import cycles are found on every import, those inside functions and under ``TYPE_CHECKING``
too: a module imported "at call time" to dodge a cycle is still a layer pointing up.
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


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_nothing_imports_the_cli_but_main() -> None:
    graph = _graph()
    assert {m for m, deps in graph.items() if "newsletter.cli" in deps} <= {"newsletter.__main__"}


def test_each_send_stage_has_its_module() -> None:
    """A newcomer finds each stage by name: ingest, rank, render, plan, deliver, record."""
    for stage in (
        "ingest.py",
        "rank/ranker.py",
        "render.py",
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
        "    'newsletter.fetch_run') if m in sys.modules))\n"
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
