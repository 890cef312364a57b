"""Logging, always on stderr: readable lines for people, one JSON object per line for machines.

A command someone runs (``fetch``, ``send``, ``demo``, …) writes readable lines wherever its
output goes (a terminal, ``| tee``, CI logs, cron mail), so a person reads the same thing
everywhere. JSON is for the long-running services (:data:`SERVICES`) when stderr is not a
terminal (the journal, a container's log), and for any command when asked
(``--log-format json`` or ``NEWSLETTER_LOG_FORMAT=json``).

Run steps log one line each with their counts in ``extra={"counts": {...}}`` so a log pipeline
can chart them: ``{"ts": ..., "level": "info", "logger": "newsletter.run", "msg": "send done",
"counts": {"sent": 3, ...}}``.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal

Format = Literal["auto", "json", "text"]

SERVICES = frozenset({"serve", "worker", "inbound"})
"""The commands that run until stopped, whose logs a journal or a container keeps: ``auto`` is
JSON for them when stderr is not a terminal."""

run_log = logging.getLogger("newsletter.run")
_STANDARD = set(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        """The record as one JSON object, with its extra fields."""
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        """The record as one readable line, with its counts and any traceback."""
        line = f"{record.levelname.lower()} {record.name}: {record.getMessage()}"
        counts = getattr(record, "counts", None)
        if isinstance(counts, dict) and counts:
            line += " (" + ", ".join(f"{k}={v}" for k, v in counts.items()) + ")"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time (test runners swap it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def uses_json() -> bool:
    """Whether the root logger writes JSON lines (then stderr is for machines: no prose)."""
    return any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)


def setup_logging(verbosity: int = 0, fmt: Format = "auto", *, service: bool = False) -> None:
    """Configure the root logger once for a command. ``auto``: readable lines, or JSON for a
    ``service`` (see :data:`SERVICES`) whose stderr is not a terminal."""
    use_json = fmt == "json" or (fmt == "auto" and service and not sys.stderr.isatty())
    handler = _StderrHandler()
    handler.setFormatter(JsonFormatter() if use_json else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(logging.DEBUG, logging.WARNING - 10 * verbosity))
    # One line per run step (with counts) is always wanted in machine logs; for people the
    # commands print their own summaries, so the step lines appear only with -v.
    run_log.setLevel(logging.INFO if use_json or verbosity else logging.WARNING)
    logging.getLogger("newsletter").setLevel(logging.INFO if use_json else root.level)
    for noisy in ("apscheduler", "uvicorn.access", "mail.log", "asyncio", "alembic"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


def step(msg: str, **counts: Any) -> None:
    """One line per run step, with its counts."""
    run_log.info(msg, extra={"counts": counts})
