"""The exceptions newsletter raises.

Every error names the thing that failed (a file and line, a feed, an address) and, where there
was one, chains its cause (``raise ... from e``)::

    NewsletterError
    ├── ConfigError          a config file is missing, unreadable or invalid (file:line: key: why)
    ├── SourceError          one source could not be fetched or parsed (source name, URL, why)
    ├── StoreError           the database is unreachable or not migrated
    ├── DeliveryError        one message could not be handed to the relay
    │   └── RelayError       the relay itself is unusable (unreachable, TLS, auth): stop the run
    └── SubscriberError      an address or subscriber command is invalid
"""

from __future__ import annotations


class NewsletterError(Exception):
    """Root of every error newsletter raises on purpose."""


class ConfigError(NewsletterError):
    """A config file is missing, unreadable or invalid.

    ``problems`` holds one line per mistake, each ``file:line: key.path: what is wrong``.
    """

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        if len(problems) == 1:
            message = problems[0]
        else:
            message = f"{len(problems)} problems in {path}:\n  " + "\n  ".join(problems)
        super().__init__(message)


class SourceError(NewsletterError):
    """One source could not be fetched or parsed."""

    def __init__(self, source: str, url: str, reason: str) -> None:
        self.source = source
        self.url = url
        self.reason = reason
        super().__init__(f"source {source!r} ({url}): {reason}")


class StoreError(NewsletterError):
    """The database is unreachable, or its schema is not at the version this code needs."""


class DeliveryError(NewsletterError):
    """One message could not be handed to the relay.

    ``code`` is the SMTP reply code when the relay gave one (``None`` for a dropped connection),
    ``temporary`` says whether a later retry may succeed, ``stage`` is the SMTP command that
    failed (``MAIL``, ``RCPT``, ``DATA``), ``throttled`` that the relay asked us to slow down
    (454, "too many", "rate limit"), and ``ambiguous`` that the connection was lost after the
    final dot with no reply (RFC 1047): the relay may have accepted the message.
    """

    def __init__(
        self,
        address: str,
        reason: str,
        *,
        code: int | None,
        temporary: bool,
        stage: str = "",
        throttled: bool = False,
        ambiguous: bool = False,
    ) -> None:
        self.address = address
        self.reason = reason
        self.code = code
        self.temporary = temporary
        self.stage = stage
        self.throttled = throttled
        self.ambiguous = ambiguous
        super().__init__(f"{address}: {reason}")


class RelayError(NewsletterError):
    """The relay cannot be used at all (unreachable, TLS failure, authentication refused)."""


class SubscriberError(NewsletterError):
    """An address or a subscriber command is invalid."""
