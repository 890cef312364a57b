"""Deliverability as the operator sees it: a subscriber's bounce history, rates, alerts.

Shared by ``newsletter subscribers show``, ``newsletter status``, ``/metrics`` and the alert
after a send, so each shows the same numbers.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from newsletter.bounces.settings import BounceSettings
from newsletter.store.bounces import BounceRecord, BounceScore, EditionRates

RATE_DAYS = 7
"""Editions this many days back are shown with their rates and watched for alerts."""


def subscriber_json(score: BounceScore | None, history: list[BounceRecord]) -> dict[str, Any]:
    """A subscriber's bounce score, suppression reason and events, for ``--json``."""
    return {
        "score": score.score if score else 0.0,
        "last_bounce": score.last_bounce.isoformat() if score and score.last_bounce else None,
        "suppressed_reason": score.suppressed_reason if score else None,
        "suppressed_at": score.suppressed_at.isoformat() if score and score.suppressed_at else None,
        "events": [
            {
                "kind": h.kind,
                "source": h.source,
                "status": h.status,
                "diagnostic": h.diagnostic,
                "edition": h.edition.isoformat() if h.edition else None,
                "verified": h.verified,
                "counted": h.counted,
                "received_at": h.received_at.isoformat(),
            }
            for h in history
        ],
    }


def subscriber_lines(score: BounceScore | None, history: list[BounceRecord]) -> list[str]:
    """The same as text lines, aligned with ``subscribers show``'s other fields."""
    value = f"{score.score:g}" if score else "0"
    if score and score.last_bounce:
        value += f" (last counted {score.last_bounce.isoformat()})"
    lines = [f"bounce score: {value}"]
    if score and score.suppressed_reason:
        when = f"{score.suppressed_at:%Y-%m-%d}: " if score.suppressed_at else ""
        lines.append(f"   stopped: {when}{score.suppressed_reason}")
    lines.append("   bounces:" + ("" if history else " (none)"))
    for h in history:
        how = "verified" if h.verified else "UNVERIFIED, not counted"
        counted = f", +{h.counted:g}" if h.counted else ""
        edition = f" edition {h.edition.isoformat()}" if h.edition else ""
        lines.append(
            f"            {h.received_at:%Y-%m-%d %H:%M} {h.kind} {h.status or '-'} "
            f"via {h.source}{edition} ({how}{counted}) {h.diagnostic[:100]}".rstrip()
        )
    return lines


def alerts_for(rates: list[EditionRates], settings: BounceSettings) -> list[str]:
    """One line per edition whose complaint or hard-bounce rate is over its alert threshold."""
    out: list[str] = []
    for r in rates:
        if not r.sent:
            continue
        if r.rate(r.complaints) > settings.complaint_rate_alert:
            out.append(
                f"edition {r.edition}: {r.complaints} complaint(s) of {r.sent} sent "
                f"({r.rate(r.complaints):.2%}) is over bounces.complaint_rate_alert "
                f"({settings.complaint_rate_alert:.2%})"
            )
        if r.rate(r.hard) > settings.hard_bounce_rate_alert:
            out.append(
                f"edition {r.edition}: {r.hard} hard bounce(s) of {r.sent} sent "
                f"({r.rate(r.hard):.2%}) is over bounces.hard_bounce_rate_alert "
                f"({settings.hard_bounce_rate_alert:.2%})"
            )
    return out


def rates_json(rates: list[EditionRates]) -> list[dict[str, Any]]:
    """Per-edition counts and rates, for ``status --json``."""
    return [
        {
            "edition": r.edition.isoformat(),
            "sent": r.sent,
            "hard": r.hard,
            "soft": r.soft,
            "complaints": r.complaints,
            "hard_rate": round(r.rate(r.hard), 6),
            "complaint_rate": round(r.rate(r.complaints), 6),
        }
        for r in rates
    ]


def days_json(days: dict[date, dict[str, int]]) -> list[dict[str, Any]]:
    """Events received per day, by kind."""
    return [{"day": d.isoformat(), **counts} for d, counts in days.items()]


def rate_lines(rates: list[EditionRates]) -> list[str]:
    """``newsletter status``'s lines: one per edition with anything sent or reported."""
    return [
        f"edition {r.edition}: {r.sent} sent, {r.hard} hard bounce(s) ({r.rate(r.hard):.2%}), "
        f"{r.soft} soft, {r.complaints} complaint(s) ({r.rate(r.complaints):.2%})"
        for r in rates
    ]
