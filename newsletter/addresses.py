"""Email address validation and header-safe formatting."""

from __future__ import annotations

from email.headerregistry import Address

from email_validator import EmailNotValidError, validate_email

from newsletter.errors import SubscriberError


def normalize_address(value: str) -> str:
    """Validate an address and return its normalized form (IDN domains in their Unicode form).

    Raises :class:`SubscriberError` (a ``ValueError`` too, so config validation reports it) when
    the address is invalid or tries to smuggle header lines.
    """
    if any(c in value for c in "\r\n\0"):
        raise InvalidAddress(f"{value!r}: an address cannot contain line breaks")
    try:
        result = validate_email(value.strip(), check_deliverability=False)
    except EmailNotValidError as e:
        raise InvalidAddress(f"{value!r} is not a valid email address: {e}") from e
    return str(result.normalized)


class InvalidAddress(SubscriberError, ValueError):
    """An address that cannot be used."""


def format_address(name: str, address: str) -> str:
    """``Name <addr>`` with the display name encoded per RFC 2047 when needed; CR/LF removed."""
    clean = " ".join(name.split())
    local, _, domain = address.rpartition("@")
    return str(Address(display_name=clean, username=local, domain=domain))
