"""A send's policy: the request and the settings it reads, fixed once when the run starts.

:class:`SendPolicy` is built once per run (per worker chunk) from a validated
:class:`~newsletter.edition.request.SendRequest` and the config; the planner
(:mod:`.plan`) and the applier (:mod:`.loop`) read it and nothing else, so no setting is looked
up in the middle of a run and a test states a whole policy in one line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from newsletter.config import Config
from newsletter.deliver.ledger import run_owner
from newsletter.edition.request import SendRequest
from newsletter.models import Subscriber

CLAIM_CHUNK = 50
"""Subscribers claimed per ledger transaction."""


@dataclass(frozen=True, slots=True)
class SendPolicy:
    """What one send run does, and the settings it follows."""

    to: str | None = None
    """Only this (normalized) address."""
    topic: str | None = None
    """Only the followers of this topic; their digest then holds only it."""
    due: Callable[[Subscriber], bool] | None = None
    """Only the subscribers whose edition is due now (the scheduler's filter)."""
    subscriber_ids: Sequence[int] | None = None
    """Only these subscribers (a worker's chunk)."""
    force: bool = False
    """Re-send ``to``'s edition of the day although it went out."""
    dry_run: bool = False
    """Rank and render, claim and send nothing."""
    keep_rendered: int = 0
    """Rendered digests the report keeps (a dry run keeps every one)."""
    owner: str = ""
    """This run's name in the ledger (:func:`~newsletter.deliver.ledger.run_owner`)."""
    message_domain: str = "localhost"
    """The right-hand side of the Message-IDs (``sender.message_domain``)."""
    lease: timedelta = timedelta(minutes=15)
    """How long a claim holds before another run may take it (``delivery.claim_lease``)."""
    resend_unknown: bool = True
    """``delivery.on_unknown: resend``: a claim may take over an ``unknown`` edition."""
    skip_quiet: bool = False
    """``schedule.no_listing: skip`` on a run that is not forced: skip days without listings."""
    empty_skips: bool = True
    """``digest.empty: skip``: a digest with nothing new is recorded skipped, not sent."""
    default_zone: str = "UTC"
    """The zone of a subscriber without one of their own (``schedule.timezone``)."""
    claim_chunk: int = CLAIM_CHUNK

    @classmethod
    def of(cls, request: SendRequest, config: Config, *, owner: str | None = None) -> SendPolicy:
        """The policy of ``request`` under ``config`` (validated here unless it already was).

        ``owner`` names the run in the ledger (the recorded run's own name; default: a new
        one)."""
        request = request if request.checked else request.validated(config)
        s = config.settings
        return cls(
            to=request.to,
            topic=request.topic,
            due=request.due,
            subscriber_ids=request.subscriber_ids,
            force=request.force,
            dry_run=request.dry_run,
            keep_rendered=request.keep_rendered,
            owner=owner or run_owner(),
            message_domain=s.sender.message_domain,
            lease=timedelta(seconds=s.delivery.claim_lease),
            resend_unknown=s.delivery.on_unknown == "resend",
            skip_quiet=s.schedule.no_listing == "skip" and not request.force,
            empty_skips=s.digest.empty == "skip",
            default_zone=s.schedule.timezone,
        )
