"""Subscribers from a CSV file (``newsletter subscribers import``), in batches.

Each batch of rows is validated in Python, looked up with two statements (who is present, who
said no in any letter case) and added in one transaction, so a million-row import costs a few
thousand statements rather than several per row. The consent rules are those of one-by-one adds
(:func:`newsletter.subscribe.consent_block`): an address that unsubscribed, was suppressed or
erased is never made active by an import. A cell that starts with ``'`` and then a formula
character (``'=...``, as the export and spreadsheets write one) is read without that quote.
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from newsletter.addresses import InvalidAddress, address_key, normalize_name
from newsletter.config import Config
from newsletter.errors import NewsletterError
from newsletter.models import Frequency, NewSubscriber, SubscriberStatus
from newsletter.services import Services
from newsletter.store import Store
from newsletter.subscribe import (
    LIVE,
    Choices,
    InvalidRequest,
    Subscriptions,
    blocked_message,
    parse_address,
)
from newsletter.subscriber_lists.export import from_spreadsheet_cell

IMPORT_STATUSES = {
    "": SubscriberStatus.ACTIVE,
    "active": SubscriberStatus.ACTIVE,
    "paused": SubscriberStatus.PAUSED,
    "unsubscribed": SubscriberStatus.UNSUBSCRIBED,
    "suppressed": SubscriberStatus.SUPPRESSED,
    "complained": SubscriberStatus.SUPPRESSED,  # marked the mail as spam: never mail again
}
"""The ``status`` column's values, and the status each imports as."""

BATCH = 2000
"""Rows validated, looked up and added together."""


class ImportFileError(NewsletterError):
    """The file cannot be imported at all (no header with an ``email`` column)."""


@dataclass
class ImportReport:
    """What an import did (or, dry, would do)."""

    added: int = 0
    kept: int = 0
    """Of ``added``: rows added unsubscribed or suppressed (kept for the record, never mailed)."""
    present: int = 0
    problems: list[str] = field(default_factory=list)
    """Refused rows, each ``file:line: why``."""
    notes: list[str] = field(default_factory=list)
    rows: int = 0


@dataclass(frozen=True, slots=True)
class _Row:
    where: str
    address: str
    name: str
    status: SubscriberStatus
    topics: tuple[str, ...]
    timezone: str
    send_hour: int | None
    frequency: Frequency
    consent: str
    line: int


@functools.cache
def _zones() -> frozenset[str]:
    from newsletter.config.time_zones import time_zones

    return frozenset(time_zones())


def import_csv(
    services: Services,
    path: Path,
    now: datetime,
    *,
    default_topics: Sequence[str] = (),
    dry_run: bool = False,
    progress: Callable[[ImportReport], None] | None = None,
) -> ImportReport:
    """Add the subscribers of a CSV file (see ``newsletter subscribers import --help``).

    Refused rows are reported and the rest go on; raises :class:`ImportFileError` when the
    file has no header with an ``email`` column.
    """
    config, store = services.config, services.store
    service = Subscriptions(services)
    report = ImportReport()
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or "email" not in reader.fieldnames:
            raise ImportFileError(f"{path}: the first row must be a header with an 'email' column")
        batch: list[_Row] = []
        seen: dict[str, SubscriberStatus] = {}  # added earlier in this file, and how
        choices: dict[tuple[object, ...], Choices | InvalidRequest] = {}
        end = reader.line_num
        for raw in reader:
            line, end = end + 1, reader.line_num  # a quoted field may span lines: its first
            report.rows += 1
            # An export writes a cell a spreadsheet would run as `'=...`: read what was stored.
            cells = {
                k: from_spreadsheet_cell(v) if isinstance(v, str) else v for k, v in raw.items()
            }
            row = _parse(service, path, line, cells, default_topics, report, choices)
            if row is not None:
                batch.append(row)
            if len(batch) >= BATCH:
                _apply(config, store, service, batch, seen, now, dry_run, report)
                batch = []
                if progress is not None:
                    progress(report)
        _apply(config, store, service, batch, seen, now, dry_run, report)
    if progress is not None:
        progress(report)
    return report


def _parse(
    service: Subscriptions,
    path: Path,
    line: int,
    raw: dict[str, str | None],
    default_topics: Sequence[str],
    report: ImportReport,
    cache: dict[tuple[object, ...], Choices | InvalidRequest],
) -> _Row | None:
    """One CSV row validated, or ``None`` with the reason added to ``report.problems``."""
    where = f"{path}:{line}"
    raw_status = (raw.get("status") or "").strip().lower()
    status = IMPORT_STATUSES.get(raw_status)
    if status is None:
        why = (
            "never confirmed; they subscribe by confirming by email"
            if raw_status == "pending"
            else "unknown status (active, paused, unsubscribed, suppressed, complained)"
        )
        report.problems.append(f"{where}: status {raw_status!r}: {why}")
        return None
    try:
        address = parse_address(raw.get("email") or "")
        name = normalize_name(raw.get("name") or "")
        wanted = (raw.get("topics") or "").replace(";", " ").split() or list(default_topics)
        tz = (raw.get("timezone") or "").strip() or None
        hour = (raw.get("send_hour") or "").strip()
        frequency = (raw.get("frequency") or "daily").strip() or "daily"
        if status not in LIVE:  # never mailed: kept for the record as it is
            known = service.topic_names
            wanted = [t for t in wanted if t in known] or known[:1]
            tz = tz if tz in _zones() else None
            hour = hour if hour.isdigit() and int(hour) < 24 else ""
            frequency = frequency if frequency in ("daily", "weekly") else "daily"
        choices = _choices(
            cache, service, tuple(wanted), tz, int(hour) if hour.isdigit() else None, frequency
        )
    except (InvalidRequest, InvalidAddress) as e:
        report.problems.append(f"{where}: {e}")
        return None
    return _Row(
        where,
        address,
        name,
        status,
        choices.topics,
        choices.timezone,
        choices.send_hour,
        choices.frequency,
        (raw.get("consent") or "").strip(),
        line,
    )


def _choices(
    cache: dict[tuple[object, ...], Choices | InvalidRequest],
    service: Subscriptions,
    topics: tuple[str, ...],
    timezone: str | None,
    send_hour: int | None,
    frequency: str,
) -> Choices:
    """``service.choices``, remembered for one import: a list holds few distinct combinations."""
    key = (topics, timezone, send_hour, frequency)
    hit = cache.get(key)
    if hit is None:
        try:
            hit = service.choices(topics, timezone, send_hour, frequency)
        except InvalidRequest as e:
            hit = e
        if len(cache) > 10_000:
            cache.clear()
        cache[key] = hit
    if isinstance(hit, InvalidRequest):
        raise InvalidRequest(hit.field, hit.reason)  # a fresh one: no traceback piles up
    return hit


def _apply(
    config: Config,
    store: Store,
    service: Subscriptions,
    batch: list[_Row],
    seen: dict[str, SubscriberStatus],
    now: datetime,
    dry_run: bool,
    report: ImportReport,
) -> None:
    """Decide each row of a batch as a one-by-one add would, then add the new ones at once."""
    if not batch:
        return
    present, said_no = store.import_lookup([r.address for r in batch])
    erased: dict[str, datetime] = {}
    if store.any_forgotten():
        keys = {r.address: service.forgotten_key(r.address) for r in batch}
        found = store.forgotten_among(list(keys.values()))
        erased = {a: found[k] for a, k in keys.items() if k in found}
    name = Path(batch[0].where.rsplit(":", 1)[0]).name
    new: list[NewSubscriber] = []
    for r in batch:
        existing = present.get(r.address, seen.get(r.address))
        if existing is not None and (existing in LIVE) == (r.status in LIVE):
            report.present += 1
            continue
        if existing is not None and r.status not in LIVE:
            report.notes.append(
                f"{r.where}: {r.address} is {r.status.value} in the file but "
                f"{existing.value} here; left {existing.value} "
                f"(newsletter subscribers remove {r.address} to unsubscribe)"
            )
            report.present += 1
            continue
        blocked = _blocked(config, r.address, said_no, erased)
        if blocked is not None:
            report.problems.append(f"{r.where}: {blocked}")
            continue
        if existing is not None:  # pending here: confirmation by email only
            report.problems.append(
                f"{r.where}: {r.address} is {existing.value} here; it becomes a "
                "subscriber when it confirms by email"
            )
            continue
        if r.status not in LIVE:
            report.kept += 1
        report.added += 1
        seen[r.address] = r.status
        if r.status not in LIVE:  # a later row may spell it in another letter case
            said_no.setdefault(address_key(r.address), (r.address, r.status, now))
        new.append(
            NewSubscriber(
                r.address,
                r.name,
                r.status,
                r.topics,
                r.timezone,
                r.send_hour,
                r.frequency,
                {
                    "how": "import",
                    "when": now.isoformat(),
                    "where": f"{name}:{r.line}",
                    "source": r.consent,
                    "status": r.status.value,
                },
            )
        )
    if not dry_run:
        store.add_subscribers(new, now)


def _blocked(
    config: Config,
    address: str,
    said_no: dict[str, tuple[str, SubscriberStatus, datetime | None]],
    erased: dict[str, datetime],
) -> str | None:
    """The batch form of :func:`newsletter.subscribe.consent_block`: the same reasons."""
    hit = said_no.get(address_key(address))
    if hit is not None:
        email, status, changed = hit
        since = f" on {changed:%Y-%m-%d}" if changed else ""
        reason = f"{email}: {status.value}{since}; stays {status.value}"
    elif address in erased:
        reason = f"{address}: erased (--forget) on {erased[address]:%Y-%m-%d}; not added back"
    else:
        return None
    return blocked_message(config, address, reason)
