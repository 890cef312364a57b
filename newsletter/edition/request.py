"""A request to send editions, validated once for every front end.

``newsletter send``, ``POST /admin/send``, the scheduler's tick and the workers' chunks each
build a :class:`SendRequest` and hand it to :func:`newsletter.edition.send`; what makes a
request valid (an address that parses, ``force`` only with one, a topic the config has, an
active subscriber) is checked here, in :meth:`SendRequest.validated`, and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from newsletter.addresses import InvalidAddress, normalize_address
from newsletter.config import Config
from newsletter.errors import NewsletterError
from newsletter.models import Subscriber, SubscriberStatus
from newsletter.store.protocol import SubscriberReads


class BadSendRequest(NewsletterError):
    """A send request that cannot run as given; the message says what to change."""


KINDS = ("send", "scheduled", "admin", "chunk")
"""What started a send: the CLI, the scheduler, the admin endpoint, a worker's chunk."""


def force_problem(force: bool, to: str | None) -> str | None:
    """The force rule, the one place it is written: a forced re-send names one address."""
    if force and not to:
        return "force re-sends one subscriber's edition: give the address"
    return None


@dataclass(frozen=True)
class SendRequest:
    """What to send now: everyone due, one address, one topic's followers, or a worker's chunk."""

    kind: str = "send"
    """Recorded with the run (one of :data:`KINDS`)."""
    to: str | None = None
    """Only this address (normalized by :meth:`validated`)."""
    topic: str | None = None
    """Only the followers of this topic; their digest then holds only it."""
    due: Callable[[Subscriber], bool] | None = None
    """Only the subscribers whose edition is due now (the scheduler's filter)."""
    force: bool = False
    """Re-send today's edition to ``to`` although it went out (marked as forced)."""
    dry_run: bool = False
    """Rank and render, send nothing and record nothing."""
    keep_rendered: int = 0
    """Keep this many rendered digests in the report (the demo's 'open this in a browser')."""
    subscriber_ids: Sequence[int] | None = None
    """Only these subscribers (a worker's chunk)."""
    wait: bool = True
    """With workers: wait for the queued chunks (else return once they are queued)."""
    checked: bool = field(default=False, compare=False, repr=False)
    """Set by :meth:`validated`: the request needs no second check."""

    def validated(self, config: Config, store: SubscriberReads | None = None) -> SendRequest:
        """This request with ``to`` normalized, or :class:`BadSendRequest` saying what is wrong.

        With ``store``, ``to`` must also be an active subscriber."""
        if self.kind not in KINDS:
            raise BadSendRequest(f"unknown kind of send {self.kind!r} (one of {', '.join(KINDS)})")
        to = self.to
        if to is not None:
            try:
                to = normalize_address(to)
            except InvalidAddress as e:
                raise BadSendRequest(str(e)) from e
        if (problem := force_problem(self.force, to)) is not None:
            raise BadSendRequest(problem)
        names = [t.name for t in config.settings.topics]
        if self.topic is not None and self.topic not in names:
            raise BadSendRequest(f"unknown topic {self.topic} (available: {', '.join(names)})")
        if to is not None and store is not None:
            sub = store.get_subscriber(to)
            if sub is None:
                raise BadSendRequest(
                    f"{to} is not a subscriber; add it with "
                    f"'newsletter subscribers add {to} --topic NAME'"
                )
            if sub.status is not SubscriberStatus.ACTIVE:
                raise BadSendRequest(
                    f"{to} is {sub.status.value}; only active subscribers get digests"
                )
        return replace(self, to=to, checked=True)

    def by_workers(self, config: Config) -> bool:
        """True when the workers send this request (a whole-list send with ``workers:`` set)."""
        return (
            config.settings.workers is not None
            and self.to is None
            and not self.dry_run
            and self.subscriber_ids is None
        )
