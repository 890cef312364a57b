"""Getting started: ``newsletter init`` writes a starter config, ``newsletter demo`` runs one
full edition offline on the bundled snapshot feeds (:mod:`newsletter.operations.demo`)."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import click

from newsletter.cli import output
from newsletter.cli.app import Context, cli, errors
from newsletter.cli.output import fail, print_fetch_report, shown
from newsletter.errors import NewsletterError


def example_config() -> Path:
    """The commented starter config shipped with this install."""
    here = Path(__file__).resolve().parent.parent  # the newsletter package
    for candidate in (
        here / "data" / "newsletter.example.yaml",
        here.parent / "config" / "newsletter.example.yaml",
    ):
        if candidate.is_file():
            return candidate
    raise NewsletterError("the example config is missing from this install")


DEMO_STARTER_HEADER = """\
# newsletter: a starter config that works on this machine today (`newsletter init --demo`).
# Sources are the snapshot feeds in demo-feeds/ (no internet needed), links point at
# http://localhost:8000 (`newsletter serve`), and mail goes to a local sink on 127.0.0.1:2525
# (`newsletter sink --port 2525`). For production, change: sources (live feeds), sender
# (from, postal_address, base_url: the public https URL of `newsletter serve`), smtp (your
# relay), subscribers; `newsletter init` writes the full commented example of every key.
"""


@cli.command()
@click.argument("path", default="newsletter.yaml", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.option(
    "--demo",
    "demo_starter",
    is_flag=True,
    help="A config that works offline today: snapshot feeds (copied beside it), links on "
    "localhost, mail to a local sink.",
)
def init(path: Path, force: bool, demo_starter: bool) -> None:
    """Write a commented starter config to PATH (default ./newsletter.yaml)."""
    with errors():
        if path.exists() and not force:
            fail(f"{path} already exists; pass --force to overwrite it")
        path.parent.mkdir(parents=True, exist_ok=True)
        if demo_starter:
            from newsletter.operations.demo import DEMO_FEEDS, shipped_demo

            config_file, feeds = shipped_demo()
            body = config_file.read_text(encoding="utf-8").split("\ndatabase:", 1)[1]
            body = re.sub(
                r"url: sqlite:///demo\.db.*",
                "url: sqlite:///var/newsletter.db  # beside this file",
                body,
            )
            body = re.sub(
                r"secret_key_file: secret\.key.*", "secret_key_file: var/secret.key", body
            )
            path.write_text(DEMO_STARTER_HEADER + "\ndatabase:" + body, encoding="utf-8")
            shutil.copytree(feeds, path.parent / DEMO_FEEDS, dirs_exist_ok=True)
        else:
            shutil.copyfile(example_config(), path)
    c = "" if path == Path("newsletter.yaml") else f" -c {shlex.quote(str(path))}"
    output.console.print(f"Wrote [bold]{path}[/]. Next:", highlight=False)
    if demo_starter:
        output.console.print(
            "  1. in another terminal, a local relay that keeps every message: "
            "newsletter sink --port 2525\n"
            f"  2. newsletter db upgrade{c}  (adds the three example subscribers)\n"
            f"  3. newsletter fetch{c} && newsletter send --now{c}\n"
            f"  4. newsletter serve{c}  (the digests' links, on http://localhost:8000)\n"
            "For production, change in it: sources (live feeds), sender.base_url (the public "
            "https URL of 'newsletter serve'), sender.from and postal_address, smtp (your "
            "relay), subscribers.",
            highlight=False,
        )
        return
    output.console.print(
        f"  1. edit it: topics (what readers follow), sender.from and postal_address ({path})\n"
        f"  2. newsletter db upgrade{c}\n"
        f"  3. newsletter fetch{c} && newsletter send --now --dry-run{c}\n"
        "For production, change: sender.base_url to the public https URL of 'newsletter serve' "
        "(the digests' confirm, manage and unsubscribe links go there), smtp to your relay "
        "(password in $NEWSLETTER_SMTP_PASSWORD), sender.from to a domain with SPF and DKIM "
        "(docs/deploy.md). To try it all offline first: newsletter init --demo DIR/newsletter.yaml",
        highlight=False,
    )


@cli.command()
@click.option(
    "--dir",
    "var",
    default="newsletter-demo",
    type=click.Path(file_okay=False, path_type=Path),
    show_default=True,
    help="The demo's own directory: its config, snapshot feeds, database, Maildir and digests.",
)
@click.pass_obj
def demo(obj: Context, var: Path) -> None:
    """One full edition on the bundled demo: fetch snapshots, send to a local SMTP sink.

    The demo runs on its own config and SQLite database in --dir, never on yours: --config,
    $NEWSLETTER_CONFIG and $NEWSLETTER_DATABASE_URL are not read. Delete the directory to start
    over.
    """
    from newsletter.operations.demo import prepare_demo, run_demo

    with errors():
        config = prepare_demo(var)
        if obj.config_path:
            output.console.print(
                f"The demo ignores the config {shown(obj.config_path)}: it runs on its own, "
                f"{shown(config.path)}.",
                highlight=False,
            )
        run_demo(
            config, var, output.console, print_fetch_report=print_fetch_report, clock=obj.clock
        )
