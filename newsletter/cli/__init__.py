"""The ``newsletter`` command: a thin layer over the same functions the scheduler and web use.

Each command parses its options, calls one domain function with the command's one
:class:`~newsletter.services.Services` (its clock included) and prints what it returns. One
module per command group:

- :mod:`.app`: the click group (``-c/--config`` after any command), the per-command
  :class:`Context` and the error handling;
- :mod:`.output`: consoles, the ``error:`` line, tables, progress and the reports;
- :mod:`.sending`: ``send`` and ``preview``;
- :mod:`.ranking`: ``rank`` and ``feedback``;
- :mod:`.subscribers` and :mod:`.subscriber_lists`: the ``subscribers`` group;
- :mod:`.operations`: ``db``, ``fetch``, ``status``, ``bounces poll``;
- :mod:`.cache`: ``cache show`` and ``cache clean`` (the model cache);
- :mod:`.servers`: ``serve``, ``worker``, ``inbound``, ``sink``;
- :mod:`.starter`: ``init`` and ``demo``.

Importing this package registers every command on :data:`cli`; ``newsletter = newsletter.cli:main``.

May import: core, config, store, sources, semantic, rank, digest, deliver, services, subscribe,
bounces, runs, edition, subscriber_lists, web, operations.
"""

from __future__ import annotations

from newsletter.cli import (  # noqa: F401  (each registers its commands on `cli`)
    cache,
    operations,
    ranking,
    sending,
    servers,
    starter,
    subscriber_lists,
    subscribers,
)
from newsletter.cli.app import NO_CONFIG, CommandGroup, Context, cli, errors, main
from newsletter.cli.output import (
    SendProgress,
    fail,
    make_console,
    print_fetch_report,
    print_send_report,
    seconds_text,
    setup_output,
    shown,
    took_line,
)
from newsletter.cli.sending import do_send, send_by_workers
from newsletter.cli.starter import example_config

__all__ = [
    "NO_CONFIG",
    "CommandGroup",
    "Context",
    "SendProgress",
    "cli",
    "do_send",
    "errors",
    "example_config",
    "fail",
    "main",
    "make_console",
    "print_fetch_report",
    "print_send_report",
    "seconds_text",
    "send_by_workers",
    "setup_output",
    "shown",
    "took_line",
]
