"""The time zones a reader may choose: the IANA names, without the entries that are no zone.

A system's zone database holds a few files that load as zones but name none: ``Factory``
(tzdata's placeholder for "no zone set yet", offset 0 and abbreviation ``-00``), ``localtime``
(this machine's own zone under another name: it means something else on every machine) and
``posixrules`` (a template for POSIX TZ strings). ``zoneinfo.available_timezones()`` lists
the first two; the subscribe and manage forms, the CSV import and the config's checks use
:func:`time_zones` and :func:`not_a_zone` instead.
"""

from __future__ import annotations

import functools

NOT_ZONES: dict[str, str] = {
    "Factory": "the zone database's placeholder for a zone not set yet",
    "localtime": "this machine's own zone under another name",
    "posixrules": "a template of the zone database",
}
"""Names that load as zones but are none, with what each is."""


def not_a_zone(name: str) -> str | None:
    """Why ``name`` is no time zone though the zone database has a file of that name, or
    ``None`` (then ``zoneinfo.ZoneInfo`` decides whether it exists)."""
    what = NOT_ZONES.get(name)
    if what is None:
        return None
    return f"{name!r} is {what}, not a time zone; use an IANA name like 'Europe/Berlin'"


@functools.cache
def time_zones() -> tuple[str, ...]:
    """Every time zone a reader may choose, sorted: the IANA names this system knows."""
    import zoneinfo

    return tuple(sorted(z for z in zoneinfo.available_timezones() if z not in NOT_ZONES))
