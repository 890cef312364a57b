"""``newsletter demo``: one full edition on the embedded default, to see the product work.

The demo never touches an operator's data: it runs on its own copy of the bundled config
(``demo.yaml``, shipped in the wheel with its snapshot feeds) in its own directory, with its own
SQLite database there, whatever the current directory, ``--config``, ``$NEWSLETTER_CONFIG`` or
``$NEWSLETTER_DATABASE_URL`` say. A directory is the demo's only when it is new, empty or marked
by an earlier demo (:data:`MARKER`), so ``--dir .`` in an operator's folder is refused.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from rich.console import Console

from newsletter.clock import utcnow
from newsletter.config import Config, load_config
from newsletter.edition import SendRequest, Services, send
from newsletter.errors import NewsletterError
from newsletter.operations.smtp_sink import MaildirSink, html_part, read_maildir
from newsletter.runs.fetch import fetch_step
from newsletter.sources.ingest import FetchReport
from newsletter.store import Store
from newsletter.subscriber_lists.from_config import seed_subscribers
from newsletter.text import counted

MARKER = ".newsletter-demo"
"""The file that marks a directory as the demo's own (written on its first run)."""
DEMO_CONFIG = "demo.yaml"
DEMO_FEEDS = "demo-feeds"


def shipped_demo() -> tuple[Path, Path]:
    """The bundled demo config and its snapshot feeds: in the wheel (``newsletter/data``), else
    in the checkout (``config/``)."""
    here = Path(__file__).resolve().parent.parent
    for base in (here / "data", here.parent / "config"):
        if (base / DEMO_CONFIG).is_file() and (base / DEMO_FEEDS).is_dir():
            return base / DEMO_CONFIG, base / DEMO_FEEDS
    raise NewsletterError("the demo config and feeds are missing from this install")


def prepare_demo(var: Path) -> Config:
    """Set up ``var`` as the demo's directory (its config, feeds and database) and load it.

    The config and feeds are copied afresh on every run; the database, the Maildir and the
    rendered digests stay, so a second run shows that an edition goes out once a day."""
    if var.exists() and not var.is_dir():
        raise NewsletterError(f"demo: {var} is a file; pass --dir with a new or empty directory")
    if var.is_dir() and any(var.iterdir()) and not (var / MARKER).exists():
        raise NewsletterError(
            f"demo: {var} is not empty and not a demo directory (no {MARKER} in it); the demo "
            "keeps its own config and database apart from yours: pass --dir with a new or "
            "empty directory"
        )
    config_file, feeds = shipped_demo()
    var.mkdir(parents=True, exist_ok=True)
    (var / MARKER).write_text(
        "This directory belongs to 'newsletter demo'; delete it to start the demo over.\n",
        encoding="utf-8",
    )
    shutil.copyfile(config_file, var / DEMO_CONFIG)
    shutil.copytree(feeds, var / DEMO_FEEDS, dirs_exist_ok=True)
    return load_config(var / DEMO_CONFIG, environment=False)


def run_demo(
    config: Config,
    var: Path,
    console: Console,
    *,
    print_fetch_report: Callable[[FetchReport], object],
    clock: Callable[[], datetime] = utcnow,
) -> Path | None:
    """Start a sink, migrate, seed, fetch, send; print a summary and where the digests are.

    ``config`` is the one :func:`prepare_demo` returned; the demo's one
    :class:`~newsletter.services.Services` is built on it (its own database, the sink as its
    relay) with ``clock``. The command line passes its fetch report printer, so this module
    does not import it back."""
    store = Store(config.database_url)
    try:
        return _run(config, store, var, console, print_fetch_report, clock)
    finally:
        store.close()


def _run(
    config: Config,
    store: Store,
    var: Path,
    console: Console,
    print_fetch_report: Callable[[FetchReport], object],
    clock: Callable[[], datetime],
) -> Path | None:
    maildir = var / "maildir"
    store.upgrade()
    now = clock()
    seed_subscribers(config, store, now=now)
    with MaildirSink(maildir) as sink:
        smtp = config.settings.smtp.model_copy(
            update={"host": "127.0.0.1", "port": sink.port, "security": "none", "username": None}
        )
        settings = config.settings.model_copy(update={"smtp": smtp})
        config = replace(config, settings=settings)
        console.print(f"SMTP sink listening on 127.0.0.1:{sink.port} → {maildir}")
        services = Services(config, store, clock=clock)
        fetched = fetch_step(services, now)
        print_fetch_report(fetched)
        outcome = send(services, SendRequest(keep_rendered=100), now=now)
        report = outcome.report
        assert report is not None  # sent in this process: the demo has no workers
    html_dir = var / "html"
    html_dir.mkdir(exist_ok=True)
    written: list[Path] = []
    for msg in read_maildir(maildir):
        html = html_part(msg)
        to = str(msg.get("X-Sink-Rcpt-To", "unknown"))
        if html is None:
            continue
        name = re.sub(r"[^a-zA-Z0-9]+", "-", to).strip("-")
        path = html_dir / f"{name}.html"
        path.write_text(html, encoding="utf-8")
        written.append(path)
    console.print()
    console.print(
        f"[bold]Summary[/]: {counted(fetched.entries, 'entry')} fetched, "
        f"{counted(fetched.new, 'new paper')} ({store.count_papers()} stored); "
        f"digests sent: {report.sent}, "
        f"already sent today: {report.already}, empty: {report.empty}, failed: {report.failed}."
    )
    if report.sent == 0 and report.already:
        console.print(
            f"Today's editions were already sent ({counted(report.already, 'subscriber')}); a "
            f"subscriber gets one edition a day. Delete {var} (the demo's config, database and "
            "mail) to start over."
        )
    console.print(f"Maildir with every message: {maildir.resolve()}")
    if written:
        first = sorted(written)[0].resolve()
        console.print(f"Open a digest in a browser: [bold]{first}[/]")
        console.print(serve_hint(config), highlight=False, soft_wrap=True)
        return first
    return None


def serve_hint(config: Config) -> str:
    """How to serve what the demo digests link to (View in browser, Manage, Unsubscribe).

    The demo only sends; the links point at ``sender.base_url``, which ``newsletter serve``
    answers on ``web.port``. Without the scheduler it sends nothing more.
    """
    import os
    import shlex
    import sys

    from newsletter.config import ENV_DATABASE_URL

    try:
        shown = config.path.relative_to(Path.cwd())
    except ValueError:
        shown = config.path
    exe = Path(sys.argv[0]) if sys.argv and sys.argv[0].endswith("newsletter") else None
    program = str(exe) if exe is not None and exe.parent != Path(".") else "newsletter"
    from urllib.parse import urlsplit

    port = urlsplit(config.settings.sender.base_url).port or config.settings.web.port
    command = f"{program} --config {shlex.quote(str(shown))} serve --no-scheduler --port {port}"
    if os.environ.get(ENV_DATABASE_URL):  # it would win over the demo config's own database
        command = f"{ENV_DATABASE_URL}= {command}"
    return (
        f"The digests' links (View in browser, Manage topics, Unsubscribe) go to "
        f"{config.settings.sender.base_url}; to follow them, run: {command} "
        "(web pages only, no more mail; Ctrl-C stops it)."
    )
