"""Email address validation and header-safe formatting."""

from __future__ import annotations

import contextlib
import functools
import re
import unicodedata
from email.headerregistry import Address

from email_validator import EmailNotValidError, validate_email

from newsletter.errors import SubscriberError

_BREAKS = re.compile("[\r\n\0]")
_ENCODED_WORD = re.compile(r"=\?.*\?=", re.DOTALL)
"""An RFC 2047 encoded-word, which a header decoder would turn into other characters."""


def normalize_address(value: str) -> str:
    """Validate an address and return its normalized form (IDN domains in their Unicode form).

    Raises :class:`SubscriberError` (a ``ValueError`` too, so config validation reports it) when
    the address is invalid, tries to smuggle header lines, or holds an encoded-word (its header
    would show a different address than the envelope).
    """
    if _BREAKS.search(value):
        raise InvalidAddress(f"{value!r}: an address cannot contain line breaks")
    if _ENCODED_WORD.search(value):
        raise InvalidAddress(
            f"{value!r}: an address cannot contain an encoded-word (=?charset?q?...?=): mail "
            "programs would show another address than the one mail goes to; give the address "
            "as it is written (an international one like reader@bücher.example is fine)"
        )
    stripped = value.strip()
    local, at, domain = stripped.rpartition("@")
    if at and _PLAIN_LOCAL.fullmatch(local):  # the common case: only the domain needs work
        try:
            normalized = f"{local}@{_domain(domain)}"
        except EmailNotValidError:
            pass  # the full check below gives the reason
        else:
            if len(normalized) <= 254:
                return normalized
    try:
        result = validate_email(stripped, check_deliverability=False)
    except EmailNotValidError as e:
        raise InvalidAddress(f"{value!r} is not a valid email address: {e}") from e
    return str(result.normalized)


_PLAIN_LOCAL = re.compile(
    r"(?=.{1,64}\Z)[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*",
    re.ASCII,
)
"""An ASCII dot-atom local part: email-validator keeps such a part exactly as it is."""


@functools.lru_cache(maxsize=4096)
def _domain(domain: str) -> str:
    """A domain as email-validator normalizes it (checked once per domain: a list holds few)."""
    return str(validate_email(f"a@{domain}", check_deliverability=False).domain)


def address_key(address: str) -> str:
    """The form under which two spellings of one address are the same: what every lookup "by
    address, letter case aside" compares (``subscribers.email_key``, migration 0012).

    The local part in Unicode NFC, case-folded (``Émile`` and ``émile``, ``ŌTA`` and ``ōta``);
    the domain as :func:`normalize_address` writes it (IDNA, so ``xn--bcher-kva.example`` is
    ``bücher.example``), case-folded too. Computed here, in Python, because SQLite's
    ``lower()`` folds ASCII letters only. For an address :func:`normalize_address` returned,
    this is ``address.casefold()``, the fold the erased-address hashes were always made of.
    Never raises: an address that does not validate (one a bounce report names) keeps its
    domain as written, folded.
    """
    local, at, domain = address.strip().rpartition("@")
    if not at:
        return unicodedata.normalize("NFC", domain).casefold()
    with contextlib.suppress(EmailNotValidError):  # not a valid domain: compared as written
        domain = _domain(domain)
    return f"{unicodedata.normalize('NFC', local).casefold()}@{domain.casefold()}"


def masked_address(address: str) -> str:
    """An address as a page opened by a feedback or "view in browser" link shows it: the local
    part's first character, an ellipsis, the domain (``a…@example.org``).

    Those links live a year and travel with forwarded digests, screenshots and link scanners:
    whoever holds one sees the page, so the page tells the reader which of their addresses it
    is about without handing the whole address to anyone else.
    """
    local, at, domain = address.rpartition("@")
    if not at:
        return "…"
    return f"{local[:1]}…@{domain}"


class InvalidAddress(SubscriberError, ValueError):
    """An address that cannot be used."""


MAX_NAME = 200
"""Longest display name accepted; longer ones are refused rather than cut silently."""


def normalize_name(value: str) -> str:
    """A display name as it will appear in ``To:``: one line, spaces collapsed.

    Raises :class:`InvalidAddress` for line breaks or other control characters (a header
    injection attempt or a pasting accident) and for names over :data:`MAX_NAME` characters.
    Any other Unicode is fine: it is RFC 2047-encoded in headers.
    """
    if not value.replace("\t", " ").isprintable():
        raise InvalidAddress(
            f"name {value!r}: a display name cannot contain line breaks or control characters"
        )
    name = " ".join(value.split())
    if len(name) > MAX_NAME:
        raise InvalidAddress(
            f"name {name[:40]!r}...: a display name is at most {MAX_NAME} characters "
            f"(this one has {len(name)})"
        )
    return name


def envelope_address(address: str) -> tuple[str, bool]:
    """The address as an SMTP envelope carries it, and whether that needs SMTPUTF8.

    An internationalized domain goes out in its ASCII (IDNA, ``xn--``) form, which every relay
    accepts; only a non-ASCII local part needs the relay's SMTPUTF8 extension (RFC 6531).
    """
    if address.isascii():
        return address, False
    try:
        result = validate_email(address, check_deliverability=False)
    except EmailNotValidError as e:
        raise InvalidAddress(f"{address!r} is not a valid email address: {e}") from e
    if result.ascii_email:
        return str(result.ascii_email), False
    return f"{result.local_part}@{result.ascii_domain}", True


def format_address(name: str, address: str) -> str:
    """``Name <addr>`` with the display name encoded per RFC 2047 when needed; CR/LF removed."""
    clean = " ".join(name.split())
    # An encoded-word is not allowed inside an address: an IDN domain goes in its xn-- form.
    local, _, domain = envelope_address(address)[0].rpartition("@")
    return str(Address(display_name=clean, username=local, domain=domain))
