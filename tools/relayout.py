"""Issue 46: the loose modules at the top of ``newsletter/`` moved into packages by role.

Run at the repository root on a clean tree (``python tools/relayout.py``; ``--dry-run`` only
checks and lists). It:

1. checks that every module and test file in the maps below exists and that nothing is in the
   way, and lists the top-level modules and tests it does not know (added since the map was
   written): it stops there until they are in a map (``--allow-unknown`` goes on, leaving them);
2. ``git mv``-s the modules (``services.py`` becomes the package ``services/``) and their tests
   (the tests mirror the packages), with an ``__init__.py`` for each new package;
3. rewrites every reference in the tracked text files (code, tests, bench, docs, Makefile,
   pyproject, deploy, templates): dotted names (imports, ``monkeypatch`` targets, importlib
   strings, ``python -m``), ``from newsletter import x``, paths (``newsletter/render.py``,
   ``tests/test_render.py``), bare module names in backticks (```render.py```), and the
   ``Path(__file__)`` parents of each moved test;
4. writes each package's docstring: the new packages' whole, and a ``May import:`` paragraph
   in every package (``tests/test_layout.py`` holds the code to it);
5. sorts the imports it changed and formats them (``ruff``), and prints what it left to a person.

No re-export shims: every import in the repository changes in the one commit this makes, and a
shim per old module would be a loose module again. Nothing outside the repository imports these
modules: the ``newsletter`` entry point (``newsletter.cli:main``) and the Celery task name
(``newsletter.send_chunk``) do not move, and the loggers named by hand (``newsletter.alerts``,
``newsletter.run``, ``newsletter.webhooks``) keep their names; a logger named ``__name__``
follows its module (``newsletter.inbound`` is ``newsletter.operations.inbound_mail``).

Left alone: ``CHANGELOG.md`` and ``bench/history/`` (records of what was), ``docs/benchmarks.md``
(generated) and this file.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

# The domain core: stays at the top of newsletter/; these import only each other.
CORE = (
    "__init__",
    "__main__",
    "addresses",
    "clock",
    "errors",
    "identity",
    "logs",
    "models",
    "text",
)

# old module under newsletter. -> new dotted name under newsletter.
MOVES: dict[str, str] = {
    # config/: the settings and the values they check
    "database_url": "config.database_url",
    "zones": "config.time_zones",
    # services/: the composition root (the module becomes the package) and its link tokens
    "services": "services",
    "tokens": "services.link_tokens",
    # digest/: a ranked digest made readable
    "render": "digest.render",
    "fragments": "digest.fragments",
    "shared": "digest.shared_render",
    "inline": "digest.inline_css",
    "excerpts": "digest.excerpts",
    "latex": "digest.latex",
    # existing packages that own the job
    "stopping": "deliver.stop_signals",
    "examples": "rank.example_papers",
    "ingest": "sources.ingest",
    "feedback": "subscribe.votes",
    # runs/: when runs are due, what starts them, their records, leases and alerts
    "due": "runs.due_dates",
    "scheduler": "runs.scheduler",
    "fetch_run": "runs.fetch",
    "run_leases": "runs.leases",
    "alerts": "runs.alerts",
    # subscriber_lists/: the operator's lists of subscribers
    "importer": "subscriber_lists.csv_import",
    "exporter": "subscriber_lists.export",
    "seeding": "subscriber_lists.from_config",
    # operations/: what an operator runs besides a send
    "serve": "operations.serve",
    "demo": "operations.demo",
    "preview": "operations.preview",
    "status": "operations.status",
    "inbound": "operations.inbound_mail",
    "sink": "operations.smtp_sink",
}

# Modules moved when they are there (added on main after this map was first drawn).
OPTIONAL_MOVES: dict[str, str] = {
    "own_topics": "subscribe.own_topics",  # issue 45: readers' own topics, their rules and editor
}

# Test files (or folders) -> where they mirror the new layout.
TEST_MOVES: dict[str, str] = {
    "tests/test_tokens.py": "tests/services/test_link_tokens.py",
    "tests/test_render.py": "tests/digest/test_render.py",
    "tests/test_render_browser.py": "tests/digest/test_render_browser.py",
    "tests/test_render_digest.py": "tests/digest/test_render_digest.py",
    "tests/test_render_shared.py": "tests/digest/test_shared_render.py",
    "tests/test_latex.py": "tests/digest/test_latex.py",
    "tests/excerpts": "tests/digest/excerpts",
    "tests/test_ingest.py": "tests/sources/test_ingest.py",
    "tests/test_feedback_links.py": "tests/subscribe/test_vote_links.py",
    "tests/test_due.py": "tests/runs/test_due_dates.py",
    "tests/test_scheduler.py": "tests/runs/test_scheduler.py",
    "tests/test_exporter.py": "tests/subscriber_lists/test_export.py",
    "tests/test_import_batches.py": "tests/subscriber_lists/test_csv_import.py",
    "tests/test_seeding.py": "tests/subscriber_lists/test_from_config.py",
    "tests/test_demo.py": "tests/operations/test_demo.py",
    "tests/test_preview.py": "tests/operations/test_preview.py",
    "tests/test_serve.py": "tests/operations/test_serve.py",
    "tests/test_status.py": "tests/operations/test_status.py",
}

# Top-level tests that stay: the core's, and those about the repository as a whole.
TESTS_STAY = {
    "test_addresses",
    "test_identity",
    "test_errors",
    "test_models_hash",
    "test_read_fast",  # text and rank together
    "test_operations",  # runs, logs and the CLI together
    "test_layout",
    "test_docstrings",
    "test_packaging",
    "test_deploy",
    "test_extras",
    "test_readme_tour",
    "test_bench_relay",
    "test_bench_send",
    "test_bench_smtp_mux",
    "test_bench_summary",
}

# The new packages' docstrings (the May import paragraph is added from MAY_IMPORT).
NEW_PACKAGES: dict[str, str] = {
    "digest": """\
Digests made readable: a ranked digest becomes a subject, a preheader, HTML and plain text.

- :mod:`.render`: the Jinja2 renderer (autoescape, operator templates first), CSS inlined once;
- :mod:`.fragments`: the renderer's per-run caches, with holes for each reader's links;
- :mod:`.shared_render`: one rendering for all readers with the same sections, cut at each
  reader's values;
- :mod:`.inline_css`: CSS inlined once into a Jinja template (``make templates``);
- :mod:`.excerpts`: the sentence that says what a paper did, and its headline result;
- :mod:`.latex`: LaTeX in feed text as Unicode text.
""",
    "runs": """\
Runs: when editions are due, what starts a run, and the record each run leaves.

- :mod:`.due_dates`: when editions are due (pure: a reader's preferences and ``now``);
- :mod:`.scheduler`: the APScheduler jobs (fetch times, the tick that sends what is due);
- :mod:`.fetch`: the recorded fetch (:func:`~newsletter.runs.fetch.fetch_step`);
- :mod:`.leases`: a recorded run's lease and heartbeat, a killed run settled;
- :mod:`.alerts`: the operator's alerts (a failed run, a weekday fetch with no papers).
""",
    "subscriber_lists": """\
The operator's lists of subscribers: imported, exported and seeded from the config.

- :mod:`.csv_import`: subscribers from a CSV file, in batches (``subscribers import``);
- :mod:`.export`: the CSV export and one subscriber's whole record (``subscribers show``);
- :mod:`.from_config`: the config's ``subscribers:`` list put into the database.
""",
    "operations": """\
What an operator runs besides a send: the one-process server, the demo, checks and receivers.

- :mod:`.serve`: ``newsletter serve``, web, scheduler and inbound mail in one process;
- :mod:`.demo`: ``newsletter demo``, one full edition on the embedded default;
- :mod:`.preview`: what a subscriber would get today, nothing sent or recorded;
- :mod:`.status`: what ``newsletter status`` reports;
- :mod:`.inbound_mail`: the SMTP/LMTP receiver of email commands and bounces;
- :mod:`.smtp_sink`: a local SMTP sink that keeps every message in a Maildir.
""",
}

# services/__init__.py keeps the old module's docstring; this goes after its first paragraph.
SERVICES_MODULES = """\
- :mod:`.link_tokens`: signed, purpose-bound tokens for the links in mail."""

# What each package may import ("core" is the loose modules at the top; "pkg.module" allows one
# module of a package that imports this one, which must not import it back).
MAY_IMPORT: dict[str, str] = {
    "config": "core, bounces.settings",
    "store": "core, config, bounces.score",
    "sources": "core, config, store",
    "semantic": "core, config, store",
    "digest": "core, config",
    "deliver": "core, config, store, digest",
    "rank": "core, config, store, semantic, digest.latex",
    "services": "core, config, store, semantic, deliver",
    "subscribe": "core, config, store, semantic, rank, digest, deliver, services",
    "runs": "core, config, store, sources, rank, deliver, services",
    "bounces": "core, store, services, subscribe, runs",
    "edition": "core, config, store, semantic, rank, digest, deliver, services, subscribe, bounces, runs",
    "subscriber_lists": "core, config, store, services, subscribe, bounces",
    "web": "core, config, store, semantic, digest, deliver, services, subscribe, bounces, runs, edition",
    "operations": "core, config, store, sources, semantic, rank, digest, services, subscribe, bounces, runs, edition, subscriber_lists, web",
    "cli": "core, config, store, sources, semantic, rank, digest, deliver, services, subscribe, bounces, runs, edition, subscriber_lists, web, operations",
}

ROOT_DOCSTRING_NOTE = """\
The loose modules here are the domain core (models, errors, clock, text, identity, addresses,
logs): they import only each other. Every package says in its docstring what it may import."""

# Files never rewritten: records of the past, generated files, this script.
FROZEN = ("CHANGELOG.md", "bench/history/", "docs/benchmarks.md", "tools/relayout.py")

# Literal edits a pattern cannot make: (file, text after the generic rewrite, replacement).
# One not found is reported, not fatal.
SPECIAL_EDITS: list[tuple[str, str, str]] = [
    (  # profile stages match a file's ending: shared_render.py ends in render.py too
        "bench/bench_scale.py",
        '("render (HTML + text)", "render.py", "render")',
        '("render (HTML + text)", "digest/render.py", "render")',
    ),
    (  # a folder found from HERE, not from Path(__file__)
        "tests/digest/excerpts/evaluate.py",
        'FEEDS = HERE.parent / "fixtures" / "feeds"',
        'FEEDS = HERE.parent.parent / "fixtures" / "feeds"',
    ),
    (
        "tests/test_errors.py",
        "never shown: render.py inlines",
        "never shown: digest/render.py inlines",
    ),
    (
        "bench/bench_send.py",
        """        try:  # where a fetch embeds: fetch_run.py since its rename, runs.py before
            module = importlib.import_module("newsletter.runs.fetch")
        except ImportError:
            module = importlib.import_module("newsletter.runs")
""",
        """        # where a fetch embeds: runs/fetch.py since issue 46, fetch_run.py before, and
        # runs.py before its rename (bench compares with older commits)
        for name in ("newsletter.runs.fetch", "newsletter.fetch_run", "newsletter.runs"):
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            if hasattr(module, "embed_new"):
                break
""",
    ),
]


class Stop(SystemExit):
    """A check failed: the message says which, and nothing was moved."""

    def __init__(self, message: str) -> None:
        super().__init__(f"relayout: {message}")


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def module_path(name: str) -> Path:
    """newsletter/<a/b>.py, or the package's __init__.py for a package name."""
    base = Path("newsletter", *name.split("."))
    return base / "__init__.py" if name in PACKAGE_MODULES else base.with_suffix(".py")


PACKAGE_MODULES = {"services"}  # new names that are packages (the module becomes __init__)


def check(allow_unknown: bool) -> list[str]:
    """Stop unless every expected file is there and nothing is in the way; return notes."""
    if not Path("pyproject.toml").is_file() or not Path("newsletter/__init__.py").is_file():
        raise Stop("run me at the repository root")
    if git("status", "--porcelain").strip():
        raise Stop("the tree is not clean; commit or remove the changes first")
    missing = [
        f"newsletter/{old}.py" for old in MOVES if not Path(f"newsletter/{old}.py").is_file()
    ]
    missing += [old for old in TEST_MOVES if not Path(old).exists()]
    if missing:
        raise Stop("expected but missing (renamed or moved since the map?): " + ", ".join(missing))
    taken = [str(module_path(new)) for new in MOVES.values() if module_path(new).exists()]
    taken += [new for new in TEST_MOVES.values() if Path(new).exists()]
    if taken:
        raise Stop("already there (run twice?): " + ", ".join(taken))
    known = set(CORE) | set(MOVES)
    unknown = sorted(p.stem for p in Path("newsletter").glob("*.py") if p.stem not in known)
    notes = []
    if unknown:
        message = "top-level modules not in the map (add each to MOVES or CORE): " + ", ".join(
            f"newsletter/{m}.py" for m in unknown
        )
        if not allow_unknown:
            raise Stop(message)
        notes.append(message + " (left where they are)")
    known_tests = {Path(t).stem for t in TEST_MOVES} | TESTS_STAY
    new_tests = sorted(p.name for p in Path("tests").glob("test_*.py") if p.stem not in known_tests)
    if new_tests:
        notes.append(
            "top-level tests not in the map (left where they are; move by hand if they test a"
            " moved module): " + ", ".join(new_tests)
        )
    return notes


def move() -> None:
    for package in sorted({new.split(".")[0] for new in MOVES.values()}):
        folder = Path("newsletter", package)
        if not folder.is_dir() and package not in PACKAGE_MODULES:
            folder.mkdir()
            (folder / "__init__.py").write_text(f'"""{NEW_PACKAGES[package]}"""\n')
            git("add", str(folder / "__init__.py"))
    for old, new in MOVES.items():
        target = module_path(new)
        target.parent.mkdir(parents=True, exist_ok=True)
        git("mv", f"newsletter/{old}.py", str(target))
    for old, new in TEST_MOVES.items():
        target = Path(new)
        for folder in reversed(target.parents[:-2]):  # tests/<package>/ with its __init__.py
            if not folder.is_dir():
                folder.mkdir()
            init = folder / "__init__.py"
            if not init.exists():
                init.write_text("")
                git("add", str(init))
        git("mv", old, new)


def renames() -> tuple[list[tuple[re.Pattern[str], str]], dict[str, str]]:
    """The patterns that rewrite references, and old dotted name -> new for ``from x import``."""
    dotted = {f"newsletter.{old}": f"newsletter.{new}" for old, new in MOVES.items() if old != new}
    for old, new in TEST_MOVES.items():
        old_p, new_p = Path(old), Path(new)
        dotted[".".join(old_p.with_suffix("").parts)] = ".".join(new_p.with_suffix("").parts)
    paths = {
        f"newsletter/{old}.py": str(module_path(new)) for old, new in MOVES.items() if old != new
    }
    paths["newsletter/services.py"] = "newsletter/services/__init__.py"
    for old, new in TEST_MOVES.items():
        paths[old + ("" if old.endswith(".py") else "/")] = new + (
            "" if new.endswith(".py") else "/"
        )
    bare = {
        f"{old}.py": str(module_path(new).relative_to("newsletter")) for old, new in MOVES.items()
    }
    rules: list[tuple[re.Pattern[str], str]] = []
    for old in sorted(dotted, key=len, reverse=True):
        rules.append((re.compile(rf"(?<![\w.]){re.escape(old)}(?![\w])"), dotted[old]))
    for old in sorted(paths, key=len, reverse=True):
        end = r"(?![\w])" if old.endswith(".py") else ""
        rules.append((re.compile(rf"(?<![\w/.]){re.escape(old)}{end}"), paths[old]))
    for old in sorted(bare, key=len, reverse=True):  # ``render.py`` and `render.py` only
        rules.append((re.compile(rf"(?<=`){re.escape(old)}(?=`)"), bare[old]))
    return rules, dotted


FROM_IMPORT = re.compile(r"^(?P<indent>[ \t]*)from newsletter import (?P<names>[^(\n]+)$", re.M)


def rewrite_from_imports(text: str, dotted: dict[str, str]) -> str:
    """``from newsletter import render, errors`` -> one line per new home."""

    def one(match: re.Match[str]) -> str:
        indent = match["indent"]
        comment = ""
        names = match["names"]
        if "#" in names:
            names, comment = names.split("#", 1)
            comment = "  #" + comment
        lines: dict[str, list[str]] = {}
        for item in (n.strip() for n in names.split(",")):
            name, _, alias = item.partition(" as ")
            new = dotted.get(f"newsletter.{name.strip()}")
            if new is None:
                lines.setdefault("newsletter", []).append(item)
                continue
            parent, _, leaf = new.rpartition(".")
            alias = alias.strip() or name.strip()
            lines.setdefault(parent, []).append(leaf if leaf == alias else f"{leaf} as {alias}")
        out = [f"{indent}from {mod} import {', '.join(items)}" for mod, items in lines.items()]
        out[-1] += comment
        return "\n".join(out)

    return FROM_IMPORT.sub(one, text)


FILE_PARENTS = re.compile(
    r"Path\(__file__\)(?P<resolve>\.resolve\(\))?(?:(?P<chain>(?:\.parent(?!s))+)|\.parents\[(?P<n>\d+)\])"
)


def shift_file_parents(text: str, deeper: int, inner: int) -> str:
    """A test moved ``deeper`` folders down: its ``Path(__file__)`` parents past the ``inner``
    folders that moved with it reach one folder further per level."""

    def one(match: re.Match[str]) -> str:
        level = match["chain"].count(".parent") if match["chain"] else int(match["n"]) + 1
        if level <= inner:
            return match[0]
        level += deeper
        resolve = match["resolve"] or ""
        if match["chain"]:
            return f"Path(__file__){resolve}" + ".parent" * level
        return f"Path(__file__){resolve}.parents[{level - 1}]"

    return FILE_PARENTS.sub(one, text)


def rewrite_files() -> tuple[list[Path], list[str]]:
    rules, dotted = renames()
    protected = logger_literals()
    moved_tests = test_file_shifts()
    changed: list[Path] = []
    for name in git("ls-files", "-z").split("\0"):
        path = Path(name)
        if not name or name.startswith(FROZEN) or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new = text
        if path.suffix == ".py":
            new = rewrite_from_imports(new, dotted)
        held: list[str] = []
        if name in KEEP_OLD_NAMES:
            new = keep_old_names(new, KEEP_OLD_NAMES[name], rules, held)
        for i, literal in enumerate(protected):
            new = new.replace(literal, f"\0{i}\0")
        for pattern, replacement in rules:
            new = pattern.sub(replacement, new)
        for i, literal in enumerate(protected):
            new = new.replace(f"\0{i}\0", literal)
        for i, literal in enumerate(held):
            new = new.replace(f"\0held{i}\0", literal)
        if name in moved_tests:
            new = shift_file_parents(new, *moved_tests[name])
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    left = []
    for file, old, replacement in SPECIAL_EDITS:
        path = Path(file)
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        if old in text:
            path.write_text(text.replace(old, replacement), encoding="utf-8")
            changed.append(path)
        else:
            left.append(f"{file}: a special edit did not apply; see SPECIAL_EDITS")
    return changed, left


# Blocks that resolve "module:Owner.name" strings in the first place they exist, also for an
# older commit's code (bench_send's baseline worktree): the old name stays after the new one.
KEEP_OLD_NAMES = {"bench/bench_send.py": "STAGES: tuple"}


def keep_old_names(
    text: str, start: str, rules: list[tuple[re.Pattern[str], str]], held: list[str]
) -> str:
    """In the block from ``start`` to the next line that is ``)``, each ``"newsletter.old:x"``
    becomes ``"newsletter.new:x", "newsletter.old:x"`` (the old one held from the rewrite)."""
    begin = text.find(start)
    if begin < 0:
        return text
    end = text.find("\n)\n", begin)

    def one(match: re.Match[str]) -> str:
        old = match[1]
        new = old
        for pattern, replacement in rules:
            new = pattern.sub(replacement, new)
        if new == old:
            return match[0]
        held.append(f'"{old}"')
        return f'"{new}", \0held{len(held) - 1}\0'

    block = re.sub(r'"(newsletter\.[\w.]+:[\w.]+)"', one, text[begin:end])
    return text[:begin] + block + text[end:]


def logger_literals() -> list[str]:
    """Logger names written by hand (``getLogger("newsletter.alerts")``) stay as they are."""
    found = set()
    for path in Path("newsletter").rglob("*.py"):
        for match in re.finditer(r"getLogger\((['\"])(newsletter\.[\w.]+)\1\)", path.read_text()):
            found.add(match[2])
    return sorted({f"{q}{name}{q}" for name in found for q in "\"'"}, key=len, reverse=True)


def test_file_shifts() -> dict[str, tuple[int, int]]:
    """Each moved module and test file (at its new path) -> (folders deeper, folders that moved
    with it): ``Path(__file__).parent`` finds the shipped templates, the demo's data, fixtures."""
    out = {}
    for new in MOVES.values():
        target = module_path(new)
        out[str(target)] = (len(target.parts) - 2, 0)
    for old, new in TEST_MOVES.items():
        deeper = len(Path(new).parts) - len(Path(old).parts)
        if old.endswith(".py"):
            out[new] = (deeper, 0)
        else:
            for path in Path(new).rglob("*.py"):
                inner = len(path.relative_to(new).parts)
                out[str(path)] = (deeper, inner)
    return out


def docstrings() -> list[Path]:
    """A ``May import:`` paragraph in every package, and the root's note on the core."""
    changed = []
    for package, allowed in MAY_IMPORT.items():
        path = Path("newsletter", package, "__init__.py")
        if not path.is_file():
            raise Stop(f"{path} is missing: a package in MAY_IMPORT that is not there")
        line = f"May import: {allowed}."
        paragraph = textwrap.fill(line, width=96)
        if package == "services":
            add_after_first_paragraph(path, SERVICES_MODULES)
        set_paragraph(path, "May import:", paragraph)
        changed.append(path)
    set_paragraph(Path("newsletter/__init__.py"), "The loose modules here", ROOT_DOCSTRING_NOTE)
    changed.append(Path("newsletter/__init__.py"))
    undeclared = sorted(
        p.parent.name
        for p in Path("newsletter").glob("*/__init__.py")
        if p.parent.name not in MAY_IMPORT
    )
    if undeclared:
        print("relayout: packages without a May import line (add them to MAY_IMPORT):", undeclared)
    return changed


def _docstring_span(source: str) -> tuple[int, int, str]:
    node = ast.parse(source).body[0]
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
        raise Stop("a package without a docstring")
    lines = source.splitlines(keepends=True)
    start = sum(len(x) for x in lines[: node.lineno - 1]) + node.col_offset
    end = sum(len(x) for x in lines[: node.end_lineno - 1]) + (node.end_col_offset or 0)
    raw = source[start:end]
    if not (raw.startswith('"""') and raw.endswith('"""')):
        raise Stop("a package docstring not in triple double quotes")
    return start, end, raw[3:-3]


def set_paragraph(path: Path, starts: str, paragraph: str) -> None:
    """The docstring's paragraph that starts with ``starts`` becomes ``paragraph`` (added last)."""
    source = path.read_text(encoding="utf-8")
    start, end, body = _docstring_span(source)
    parts = [p for p in body.strip("\n").split("\n\n") if not p.startswith(starts)]
    body = "\n\n".join([*parts, paragraph]) + "\n"
    path.write_text(source[:start] + '"""' + body + '"""' + source[end:], encoding="utf-8")


def add_after_first_paragraph(path: Path, text: str) -> None:
    source = path.read_text(encoding="utf-8")
    start, end, body = _docstring_span(source)
    if text in body:
        return
    first, _, rest = body.partition("\n\n")
    body = f"{first}\n\n{text}\n\n{rest}"
    path.write_text(source[:start] + '"""' + body + '"""' + source[end:], encoding="utf-8")


def leftovers() -> list[str]:
    """Bare module names outside backticks that may still mean an old module: for a person."""
    names = "|".join(sorted(MOVES))
    pattern = re.compile(rf"(?<![\w/.`])({names})\.py\b")
    out = []
    for name in git("ls-files").split("\n"):
        path = Path(name)
        if not name or name.startswith(FROZEN) or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if pattern.search(line):
                out.append(f"{name}:{number}: {line.strip()[:100]}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="check and list, move nothing")
    parser.add_argument(
        "--allow-unknown", action="store_true", help="leave unknown top-level modules in place"
    )
    args = parser.parse_args(argv)
    MOVES.update(
        {old: new for old, new in OPTIONAL_MOVES.items() if Path(f"newsletter/{old}.py").is_file()}
    )
    notes = check(args.allow_unknown)
    for note in notes:
        print("relayout:", note)
    if args.dry_run:
        for old, new in MOVES.items():
            print(f"  newsletter/{old}.py -> {module_path(new)}")
        for old, new in TEST_MOVES.items():
            print(f"  {old} -> {new}")
        return 0
    move()
    changed, left = rewrite_files()
    changed += docstrings()
    python = [
        str(p) for p in {*changed, *Path("newsletter").rglob("__init__.py")} if p.suffix == ".py"
    ]
    ruff = [sys.executable, "-m", "ruff"]
    subprocess.run([*ruff, "check", "--fix", "--select", "I", "--quiet", *python], check=False)
    subprocess.run([*ruff, "format", "--quiet", *python], check=False)
    git("add", "-A")
    print(
        f"relayout: moved {len(MOVES)} modules and {len(TEST_MOVES)} tests, rewrote {len(set(changed))} files"
    )
    for line in left:
        print("relayout: by hand:", line)
    rest = leftovers() + [
        f"{name}: uses __file__ other than Path(__file__).parent(s): check its paths"
        for name in test_file_shifts()
        if "__file__" in (text := Path(name).read_text(encoding="utf-8"))
        and text.count("__file__") != len(FILE_PARENTS.findall(text))
    ]
    rest += [
        f"{name}:{number}: a path from a folder variable: check it: {line.strip()[:80]}"
        for name in test_file_shifts()
        for number, line in enumerate(Path(name).read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\b[A-Z_]+\.parent\b", line) and "FEEDS = HERE.parent.parent" not in line
    ]
    if rest:
        print("relayout: bare names that may mean a moved module (check by hand):")
        for line in rest:
            print("  " + line)
    print("relayout: now run the suite, ruff and mypy, and commit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
