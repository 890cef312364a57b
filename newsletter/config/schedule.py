"""When and by whom digests are sent: the ``schedule:`` and ``workers:`` sections.

Fetch times as crontabs (with APScheduler's weekday numbering guarded), the default send hour
and timezone, and the Celery workers that send chunks of subscribers when the section is there.
"""

from __future__ import annotations

import os
import re
from typing import Literal

from pydantic import Field, field_validator

from newsletter.config.base import ENV_BROKER_URL, _check_timezone, _Strict


class FetchTime(_Strict):
    cron: str
    """Five-field crontab: minute hour day month weekday, e.g. "30 20 * * sun,mon,tue,wed,thu".

    Weekdays by name: APScheduler counts them from Monday (mon=0, unlike crontab), so weekday
    numbers and ranges past Sunday ("sun-thu": write "sun,mon-thu") are refused.
    """
    timezone: str = "America/New_York"

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        from apscheduler.triggers.cron import CronTrigger

        weekdays = _weekday_problem(value)
        if weekdays is not None:
            raise ValueError(f"bad crontab {value!r}: {weekdays}")
        try:
            CronTrigger.from_crontab(value)
        except ValueError as e:
            raise ValueError(
                f"bad crontab {value!r}: {e} (e.g. '30 20 * * sun,mon,tue,wed,thu')"
            ) from e
        return value

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        return _check_timezone(value)


_WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
"""APScheduler 3.x order of ``day_of_week``: Monday is 0, Sunday 6 (crontab: Sunday is 0)."""


def _weekday_problem(cron: str) -> str | None:
    """Why the weekday field of ``cron`` would not mean what a crontab reader expects."""
    fields = cron.split()
    if len(fields) != 5:
        return None  # APScheduler's own message says how many fields it wants
    weekday = fields[4].lower()
    if re.search(r"\d", weekday.split("/", 1)[0]):
        return (
            f"weekday {fields[4]!r}: write day names (mon, tue, ... sun), not numbers: in "
            "crontab 0 is Sunday, but APScheduler counts from Monday (mon=0 ... sun=6), so "
            "numbers would pick other days than you meant"
        )
    for part in weekday.split(","):
        m = re.fullmatch(r"([a-z]{3})-([a-z]{3})(/\d+)?", part)
        if m is None or m.group(1) not in _WEEKDAYS or m.group(2) not in _WEEKDAYS:
            continue
        first, last = _WEEKDAYS.index(m.group(1)), _WEEKDAYS.index(m.group(2))
        if first > last:
            head = m.group(1) if first == 6 else f"{m.group(1)}-sun"
            tail = "mon" if last == 0 else f"mon-{m.group(2)}"
            return (
                f"weekday range {part!r} runs backwards: APScheduler counts weekdays from Monday "
                f"(mon=0 ... sun=6) and a range cannot wrap past Sunday; write {head},{tail}"
            )
    return None


def _default_fetch_times() -> list[FetchTime]:
    # arXiv announces at 20:00 US Eastern, Sunday to Thursday; fetch shortly after, and once in
    # the early morning so Hugging Face upvotes are fresh before the first editions go out.
    return [
        FetchTime(cron="30 20 * * sun,mon,tue,wed,thu", timezone="America/New_York"),
        FetchTime(cron="0 4 * * *", timezone="UTC"),
    ]


class ScheduleSettings(_Strict):
    timezone: str = "UTC"
    """Default timezone for subscribers who did not choose one, and for edition dates."""
    send_hour: int = Field(default=7, ge=0, le=23)
    """Default local hour of the edition for subscribers who did not choose one."""
    weekly_weekday: int = Field(default=0, ge=0, le=6)
    """The day weekly editions go out: Monday=0 … Sunday=6."""
    fetch: list[FetchTime] = Field(default_factory=_default_fetch_times)
    tick_minutes: int = Field(default=5, ge=1, le=60)
    """How often the scheduler looks for due editions."""
    misfire_grace_minutes: int = Field(default=360, ge=0)
    """An edition more than this late (the machine was down) is reported missed, not sent."""
    coalesce: bool = True
    """After downtime, run a missed fetch once instead of once per missed time."""
    no_listing: Literal["skip", "send"] = "skip"
    """When arXiv announced nothing since a subscriber's last edition (Fridays and Saturdays):
    skip the edition, recording why (its papers wait for the next one), or send what there is."""

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        return _check_timezone(value)


_BROKER_SCHEMES = ("redis", "rediss", "amqp", "amqps", "pyamqp", "sentinel")


class WorkersSettings(_Strict):
    """Scale-out: Celery workers render and send chunks of subscribers (``newsletter worker``).

    With this section, ``newsletter send`` and the scheduler enqueue chunks instead of sending
    in-process. The workers share the database, so it must be PostgreSQL."""

    broker_url: str = "redis://127.0.0.1:6379/0"
    """Redis (``redis://``) or RabbitMQ (``amqp://``); ``$NEWSLETTER_BROKER_URL`` overrides it."""
    result_backend: str | None = None
    """Where chunk results go (for ``send``'s progress): default the Redis broker, or ``rpc://``
    with RabbitMQ."""
    queue: str = "newsletter"
    chunk_size: int = Field(default=500, ge=1, le=100_000)
    """Subscribers per task."""
    visibility_timeout: int = Field(default=3600, ge=1)
    """Seconds (Redis broker): a task not acknowledged by then is given to another worker; this
    is how a chunk of a worker that died is picked up again. Keep it above a chunk's run time."""
    retry_delay: int = Field(default=60, ge=1)
    """Seconds before a chunk is tried again after the relay failed. (A dead worker's claimed
    editions are taken over after ``delivery.claim_lease``, keeping their Message-ID.)"""

    @field_validator("broker_url", "result_backend")
    @classmethod
    def _broker(cls, value: str | None) -> str | None:
        if value is None:
            return None
        scheme = value.split("://", 1)[0] if "://" in value else ""
        if scheme not in (*_BROKER_SCHEMES, "rpc", "db+postgresql", "db+postgresql+psycopg"):
            raise ValueError(
                f"{value!r} is not a broker URL (redis://host:6379/0 or amqp://user:pass@host//)"
            )
        return value

    @field_validator("queue")
    @classmethod
    def _queue(cls, value: str) -> str:
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$", value):
            raise ValueError(f"{value!r}: use letters, digits, '.', '_', ':' or '-'")
        return value

    def broker(self) -> str:
        """The broker URL in force: the environment, else the config."""
        return os.environ.get(ENV_BROKER_URL) or self.broker_url

    def backend(self) -> str:
        """The result backend in force: configured, else Redis broker, else ``rpc://``."""
        if self.result_backend:
            return self.result_backend
        broker = self.broker()
        return broker if broker.startswith(("redis", "rediss")) else "rpc://"
