"""What every settings section shares: the strict frozen base model, the environment variables
that point at the config and override it, and the checks several sections make (a slug, a
timezone, an address)."""

from __future__ import annotations

import re
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict

ENV_CONFIG = "NEWSLETTER_CONFIG"
ENV_DATABASE_URL = "NEWSLETTER_DATABASE_URL"
ENV_BROKER_URL = "NEWSLETTER_BROKER_URL"
DEFAULT_CONFIG = "newsletter.yaml"

_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def check_slug(value: str) -> str:
    """``value`` when it is a name sources and topics may have, else the ValueError saying so."""
    if not _SLUG.match(value):
        raise ValueError(f"{value!r}: use lowercase letters, digits, '-' and '_'")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _check_timezone(value: str) -> str:
    from newsletter.config.time_zones import not_a_zone

    if why := not_a_zone(value):
        raise ValueError(why)
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ValueError(
            f"unknown timezone {value!r} (use an IANA name like 'Europe/Berlin')"
        ) from e
    return value


def _check_address(value: str) -> str:
    from newsletter.addresses import normalize_address

    return normalize_address(value)
