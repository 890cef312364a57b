"""Subscribers written out for the operator: the CSV of ``newsletter subscribers export`` and
one subscriber's whole record (``newsletter subscribers show``).

The CSV is the format :mod:`newsletter.subscriber_lists.csv_import` reads back (it ignores the ``votes`` column).
Cells a spreadsheet would run as a formula are written with a leading ``'`` (see
:func:`spreadsheet_cell`), and the importer takes that quote off again.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from newsletter.bounces import report as bounce_report
from newsletter.models import OwnTopic, Subscriber, SubscriberStatus, Vote
from newsletter.store import Store
from newsletter.store.bounces import BounceRecord, BounceScore

CSV_FIELDS = (
    "email",
    "name",
    "status",
    "topics",
    "timezone",
    "send_hour",
    "frequency",
    "created",
    "confirmed",
    "votes",
    "own_topics",
)
"""The export's header row. ``votes``: the reader's "more/less like this" votes, ``+KEY`` or
``-KEY``, separated by spaces; ``own_topics``: the topics they wrote themselves, in their order,
each ``sentence [like: KEY KEY]``, separated by `` | `` (import ignores both columns: a
reader's words and votes are theirs to give again)."""


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
"""What a spreadsheet (Excel, LibreOffice, Google Sheets) takes as the start of a formula."""


def spreadsheet_cell(value: str | int) -> str | int:
    """``value`` as the export writes it: with a ``'`` in front when a spreadsheet would run it.

    A reader chooses their own name (the manage page, the API): ``=HYPERLINK("https://…")``
    would be a live formula in the operator's spreadsheet. OWASP's rule: a cell starting with
    ``= + - @``, tab or CR gets a leading ``'``, which spreadsheets show as text and hide. Cells
    that already start with quotes before such a character get one more, so that
    :func:`from_spreadsheet_cell` gives back exactly what was stored, whatever it was.
    """
    if isinstance(value, str) and value.lstrip("'").startswith(FORMULA_START):
        return "'" + value
    return value


def from_spreadsheet_cell(value: str) -> str:
    """The stored value of an exported cell: :func:`spreadsheet_cell` undone.

    Only a ``'`` before a formula character (after any further quotes) is taken off, so a
    name like ``'t Hooft`` from another program's CSV is read as it is written.
    """
    if value.startswith("'") and value.lstrip("'").startswith(FORMULA_START):
        return value[1:]
    return value


def votes_text(votes: Sequence[Vote]) -> str:
    """A reader's votes as the ``votes`` column holds them: ``+KEY -KEY …``."""
    return " ".join(f"{'+' if v.more else '-'}{v.paper_key}" for v in votes)


def own_topics_text(topics: Sequence[OwnTopic]) -> str:
    """A reader's own topics as the ``own_topics`` column holds them."""
    return " | ".join(
        t.text + (f" [like: {' '.join(t.examples)}]" if t.examples else "")
        for t in sorted(topics, key=lambda t: t.position)
    )


def csv_row(
    sub: Subscriber, votes: Sequence[Vote] = (), own: Sequence[OwnTopic] = ()
) -> list[str | int]:
    """One subscriber as an export row, in the order of :data:`CSV_FIELDS`."""
    return [
        sub.email,
        sub.name,
        sub.status.value,
        " ".join(sub.topics),
        sub.timezone,
        "" if sub.send_hour is None else sub.send_hour,
        sub.frequency.value,
        sub.created.isoformat(),
        sub.confirmed.isoformat() if sub.confirmed else "",
        votes_text(votes),
        own_topics_text(own),
    ]


def csv_rows(store: Store, status: SubscriberStatus | None = None) -> Iterator[list[str | int]]:
    """Every subscriber (only those with ``status``, when given) as export rows, header
    excluded, with their votes and own topics."""
    for batch in store.iter_subscribers(status):
        ids = [s.id for s in batch]
        votes = store.votes_for(ids)
        own = store.own_topics_of(ids)
        for s in batch:
            yield csv_row(s, votes.get(s.id, ()), own.get(s.id, ()))


def write_csv(store: Store, out: TextIO, status: SubscriberStatus | None = None) -> int:
    """Write the export (header row, then one row per subscriber) to ``out``; returns how many
    subscribers it holds. Cells that would be formulas are written as text (:func:`spreadsheet_cell`)."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    count = 0
    for row in csv_rows(store, status):
        writer.writerow([spreadsheet_cell(cell) for cell in row])
        count += 1
    return count


@dataclass(frozen=True)
class SubscriberRecord:
    """One subscriber with what is kept about them: consent, votes, own topics, bounces."""

    subscriber: Subscriber
    consent: dict[str, Any]
    """The consent record (how, when, where they agreed; earlier ones under ``history``), or
    empty when none was recorded."""
    votes: list[Vote]
    """Newest first."""
    bounce_score: BounceScore | None
    bounce_history: list[BounceRecord]
    own_topics: list[OwnTopic] = field(default_factory=list)
    """The topics they wrote themselves, in their order."""

    @property
    def consent_history(self) -> list[dict[str, Any]]:
        """Every consent entry recorded (the ``history`` list, else the one record); empty when
        none was recorded."""
        return list(self.consent.get("history") or ([self.consent] if self.consent else []))

    def as_json(self) -> dict[str, Any]:
        """The record as ``newsletter subscribers show --json`` prints it."""
        sub = self.subscriber
        return {
            "email": sub.email,
            "name": sub.name,
            "status": sub.status.value,
            "topics": list(sub.topics),
            "timezone": sub.timezone,
            "send_hour": sub.send_hour,
            "frequency": sub.frequency.value,
            "created": sub.created.isoformat(),
            "confirmed": sub.confirmed.isoformat() if sub.confirmed else None,
            "consent": self.consent,
            "votes": [
                {
                    "paper": v.paper_key,
                    "title": v.title,
                    "vote": "more" if v.more else "less",
                    "topic": v.topic,
                    "when": v.created_at.isoformat(),
                }
                for v in self.votes
            ],
            "own_topics": [
                {
                    "n": t.position,
                    "text": t.text,
                    "like": list(t.examples),
                    "created": t.created.isoformat(),
                    "updated": t.updated.isoformat(),
                }
                for t in self.own_topics
            ],
            "bounces": bounce_report.subscriber_json(self.bounce_score, self.bounce_history),
        }


def subscriber_record(store: Store, sub: Subscriber) -> SubscriberRecord:
    """Everything kept about ``sub``: their consent record, votes, own topics and bounces."""
    return SubscriberRecord(
        subscriber=sub,
        consent=store.consent_record(sub.id) or {},
        votes=store.votes_of(sub.id),
        bounce_score=store.bounce_score(sub.id),
        bounce_history=store.bounce_history(sub.id),
        own_topics=sorted(store.own_topics_of([sub.id]).get(sub.id, ()), key=lambda t: t.position),
    )
