"""The effects a process uses, built once and passed down: store, relay, signer, tokens, clock.

- :mod:`.link_tokens`: signed, purpose-bound tokens for the links in mail.

A command, the web app, the scheduler and each worker process build one :class:`Services` and
hand it to the code that needs an effect; nothing below reads the clock, the key files or the
environment on its own. Tests build one with a fixed clock and a mailer of their choosing.

Each part is built on first use and then kept: a command that never sends does not need a DKIM
key or a link-signing key, and one that sends a thousand digests loads each once.

May import: core, config, store, semantic, deliver.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Generic

from typing_extensions import TypeVar

from newsletter.clock import utcnow
from newsletter.config import Config
from newsletter.deliver.dkim import DkimSigner
from newsletter.deliver.smtp import MailerFactory, SmtpMailer
from newsletter.semantic.vectors import VectorSource
from newsletter.services.link_tokens import Tokens, signing_key
from newsletter.store import Store
from newsletter.store.protocol import SendStore

StoreT = TypeVar("StoreT", bound=SendStore, default=Store, covariant=True)
"""The store the effects hold: a plain ``Services`` is a ``Services[Store]``. The send path
takes a ``Services[SendStore]``, which any of them is (the store is only read from them), so a
send runs as well on an in-memory :class:`~newsletter.store.memory.MemoryStore`."""


@dataclass(eq=False)
class Services(Generic[StoreT]):
    """One process's effects. ``mailer_factory``, when given, replaces the configured relay."""

    config: Config
    store: StoreT
    clock: Callable[[], datetime] = utcnow
    """The wall clock (UTC, timezone-aware)."""
    monotonic: Callable[[], float] = time.monotonic
    """Elapsed time, for durations and stamps that must not jump."""
    relay: MailerFactory | None = None
    rng: random.Random = field(default_factory=random.Random)
    """Randomness that is not security: retry jitter (seed it for a reproducible run)."""

    @classmethod
    def open(cls, config: Config) -> Services:
        """Services over a new :class:`Store` for ``config``'s database (a worker process's)."""
        return Services(config, Store(config.database_url))

    @property
    def mailer_factory(self) -> MailerFactory:
        """Makes one relay connection (the configured SMTP relay unless replaced)."""
        if self.relay is not None:
            return self.relay
        smtp = self.config.settings.smtp
        return lambda: SmtpMailer(smtp)

    @cached_property
    def signer(self) -> DkimSigner | None:
        """The DKIM signer (its key read once), or ``None`` without ``dkim:``."""
        return DkimSigner.from_config(self.config)

    @cached_property
    def secret(self) -> str:
        """The link-signing key (:func:`newsletter.services.link_tokens.signing_key`), read once."""
        return signing_key(self.config)

    @cached_property
    def tokens(self) -> Tokens:
        """Signed link tokens (unsubscribe, manage, view, feedback) on this clock."""
        return Tokens(self.secret, self.clock)

    @cached_property
    def vectors(self) -> VectorSource:
        """Embedding vectors for semantic ranking: stored ones, the model loaded on first need
        (``state`` says whether ranking is semantic, and if not why)."""
        return VectorSource(self.config, self.store, self.clock)

    @cached_property
    def send_vectors(self) -> VectorSource:
        """The vectors a send ranks with: as :attr:`vectors`, but texts without a stored vector
        are embedded by a child process, so the model never joins the send's memory."""
        return VectorSource(self.config, self.store, self.clock, child=True)
