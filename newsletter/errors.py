"""The exceptions newsletter raises.

Every error names the thing that failed (a file and line, a feed, an address) and, where there
was one, chains its cause (``raise ... from e``)::

    NewsletterError
    ├── ConfigError          a config file is missing, unreadable or invalid (file:line: key: why)
    ├── FetchError           a source could not be fetched (newsletter.sources.fetch)
    │   └── BlockedAddress   its URL, a redirect or a DNS answer points where sources may not go
    ├── StoreError           the database is unreachable or not migrated
    │   ├── DatabaseUnavailable  the server is down, the database is missing, the login refused
    │   ├── DatabaseReadOnly     the SQLite file (or its folder) cannot be written
    │   └── UnsupportedDatabase  the URL names a database newsletter does not support
    ├── NotInstalled         an optional part (an extra such as ``postgres``) is not installed
    ├── ModelUnavailable     the sentence encoder cannot run: ranking is lexical (semantic.model)
    ├── PortInUse            a port newsletter should listen on is taken
    ├── DeliveryError        one message could not be handed to the relay
    ├── RelayError           the relay itself is unusable (unreachable, TLS, auth): stop the run
    ├── BrokerError          the Celery broker cannot be reached (newsletter.edition.workers)
    ├── BadSendRequest       a send request cannot run as given (newsletter.edition.request)
    ├── MailboxError         the bounce mailbox cannot be read (newsletter.bounces.poll)
    ├── Refused              a bounce webhook request is refused (newsletter.bounces.webhooks)
    ├── SnsError             an Amazon SNS message cannot be authenticated (bounces.sns)
    ├── TokenError           a link's token is tampered with, expired or for another purpose
    │   └── LinkUsed         a confirmation link was used already (newsletter.subscribe)
    ├── ImportFileError      a subscriber CSV cannot be read at all (newsletter.subscriber_lists.csv_import)
    ├── UnreadableMail       a received mail is nested too deeply to read (newsletter.operations.inbound_mail)
    └── SubscriberError      an address or subscriber command is invalid
        ├── InvalidAddress   an address cannot be used (newsletter.addresses)
        ├── InvalidRequest   a field of a subscription request is invalid (newsletter.subscribe)
        ├── OwnTopicRefused  a reader's own topic cannot be saved as given (newsletter.subscribe.own_topics)
        └── FeedbackError    a vote names an unknown paper or subscriber (newsletter.subscribe.votes)

``RelayError`` is not a ``DeliveryError``: one message failing and the relay failing take
different paths (the first is recorded against its subscriber, the second stops the run), and
handlers catch them apart. ``tests/test_errors.py`` holds this tree to the code.
"""

from __future__ import annotations

import errno
from enum import IntEnum


class ExitStatus(IntEnum):
    """The exit statuses of the ``newsletter`` command (documented in docs/operations.md)."""

    OK = 0
    FAILED = 1
    """An edition or a source failed, or another error (the message says which)."""
    RELAY_UNUSABLE = 2
    """The relay could not be used (unreachable, not SMTP, TLS, login): the run stopped."""
    CONFIG = 3
    """The config file is missing or invalid, or a setting is unusable (a database URL)."""
    DATABASE_UNAVAILABLE = 4
    """The database server is down, the database is missing, or the login was refused."""
    DATABASE_READ_ONLY = 5
    """The SQLite database file (or its folder) cannot be written."""
    NOT_INSTALLED = 6
    """An optional part is not installed (e.g. ``pip install 'newsletter[postgres]'``)."""
    PORT_IN_USE = 7
    """A port to listen on (``serve``, ``inbound``, ``sink``) is taken by another program."""
    STOPPED = 8
    """``send --now`` was stopped by SIGTERM or SIGINT (Ctrl-C): the messages in flight were
    finished and recorded, the rest given back; run it again to finish the edition."""


class NewsletterError(Exception):
    """Root of every error newsletter raises on purpose; ``exit_status`` is the CLI's."""

    exit_status: ExitStatus = ExitStatus.FAILED


class ConfigError(NewsletterError):
    """A config file is missing, unreadable or invalid.

    ``problems`` holds one line per mistake, each ``file:line: key.path: what is wrong``.
    """

    exit_status = ExitStatus.CONFIG

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        if len(problems) == 1:
            message = problems[0]
        else:
            message = f"{len(problems)} problems in {path}:\n  " + "\n  ".join(problems)
        super().__init__(message)


class StoreError(NewsletterError):
    """The database is unreachable, or its schema is not at the version this code needs."""


class DatabaseUnavailable(StoreError):
    """The database server cannot be reached, the database does not exist, or refused us."""

    exit_status = ExitStatus.DATABASE_UNAVAILABLE


class DatabaseReadOnly(StoreError):
    """The SQLite database file (or the folder it lives in) cannot be written."""

    exit_status = ExitStatus.DATABASE_READ_ONLY


class UnsupportedDatabase(StoreError):
    """The database URL names a database newsletter does not support (only SQLite, PostgreSQL)."""

    exit_status = ExitStatus.CONFIG


class NotInstalled(NewsletterError):
    """An optional part newsletter needs for this setting is not installed."""

    exit_status = ExitStatus.NOT_INSTALLED


class PortInUse(NewsletterError):
    """A port newsletter should listen on is already taken."""

    exit_status = ExitStatus.PORT_IN_USE


class DeliveryError(NewsletterError):
    """One message could not be handed to the relay.

    ``code`` is the SMTP reply code when the relay gave one (``None`` for a dropped connection),
    ``temporary`` says whether a later retry may succeed, ``stage`` is the SMTP command that
    failed (``MAIL``, ``RCPT``, ``DATA``), ``throttled`` that the relay asked us to slow down
    (454, "too many", "rate limit"), and ``ambiguous`` that the connection was lost after the
    final dot with no reply (RFC 1047): the relay may have accepted the message. ``timed_out``:
    the relay did not answer within ``smtp.timeout`` (a stalled relay, counted by the sender).
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
        timed_out: bool = False,
    ) -> None:
        self.address = address
        self.reason = reason
        self.code = code
        self.temporary = temporary
        self.stage = stage
        self.throttled = throttled
        self.ambiguous = ambiguous
        self.timed_out = timed_out
        super().__init__(f"{address}: {reason}")


def listen_error(
    error: OSError, host: str, port: int, *, port_key: str, host_key: str
) -> NewsletterError:
    """The one-line error for an address that cannot be listened on, naming the setting to
    change: ``port_key`` when the port is at fault (taken, privileged), ``host_key`` when the
    host is (not an address of this machine)."""
    where = f"{host}:{port}"
    if error.errno == errno.EADDRINUSE:
        return PortInUse(
            f"port {where} is already in use by another program; stop the other program, or "
            f"set {port_key} to a free port"
        )
    if error.errno == errno.EACCES:
        return NewsletterError(
            f"cannot listen on {where}: permission denied (a port below 1024 needs root or "
            f"CAP_NET_BIND_SERVICE); set {port_key} to a port above 1023"
        )
    if error.errno == errno.EADDRNOTAVAIL:
        return NewsletterError(
            f"cannot listen on {where}: {host} is not an address of this machine; set "
            f"{host_key} to one of its addresses, 127.0.0.1 (this machine only) or 0.0.0.0 "
            "(every interface)"
        )
    return NewsletterError(
        f"cannot listen on {where}: {error.strerror or error}; check {host_key} and {port_key}"
    )


class RelayError(NewsletterError):
    """The relay cannot be used at all (unreachable, TLS failure, authentication refused)."""

    exit_status = ExitStatus.RELAY_UNUSABLE


class SubscriberError(NewsletterError):
    """An address or a subscriber command is invalid."""
