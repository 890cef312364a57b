"""The whole config file as one model: ``Settings`` (every section), and ``Config`` (the
settings plus the file they came from, which relative paths start at).

The sections live in the modules of their domain; the small ``database:`` and ``subscribers:``
sections live here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, field_validator

from newsletter.bounces.settings import BounceSettings
from newsletter.config.base import _check_address, _check_timezone, _Strict
from newsletter.config.content import (
    DigestSettings,
    FetchSettings,
    OwnTopicsSettings,
    RankingSettings,
    SourceSettings,
    TopicSettings,
)
from newsletter.config.delivery import (
    AlertSettings,
    DeliverySettings,
    DkimSettings,
    SenderSettings,
    SmtpSettings,
)
from newsletter.config.schedule import ScheduleSettings, WorkersSettings
from newsletter.config.web import InboundSettings, WebSettings


class DatabaseSettings(_Strict):
    url: str = "sqlite:///var/newsletter.db"
    """SQLAlchemy URL. SQLite paths are relative to the config file; PostgreSQL: postgresql+psycopg://..."""
    reconnect_seconds: float = Field(default=30.0, ge=0, le=3600)
    """How long a send waits for a lost database connection to come back before it stops."""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        from newsletter.config.database_url import problem

        why = problem(value)
        if why:
            raise ValueError(why)
        return value


class SubscriberSeed(_Strict):
    email: str
    name: str = ""
    topics: list[str] = Field(default_factory=list)
    timezone: str | None = None

    @field_validator("email")
    @classmethod
    def _email(cls, value: str) -> str:
        return _check_address(value)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        from newsletter.addresses import normalize_name

        return normalize_name(value)

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str | None) -> str | None:
        return None if value is None else _check_timezone(value)


class Settings(_Strict):
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    sender: SenderSettings = Field(default_factory=SenderSettings)
    smtp: SmtpSettings = Field(default_factory=SmtpSettings)
    fetch: FetchSettings = Field(default_factory=FetchSettings)
    sources: list[SourceSettings] = Field(default_factory=list)
    topics: list[TopicSettings] = Field(default_factory=list)
    digest: DigestSettings = Field(default_factory=DigestSettings)
    subscribers: list[SubscriberSeed] = Field(default_factory=list)
    schedule: ScheduleSettings = Field(default_factory=ScheduleSettings)
    web: WebSettings = Field(default_factory=WebSettings)
    inbound: InboundSettings = Field(default_factory=InboundSettings)
    alerts: AlertSettings = Field(default_factory=AlertSettings)
    ranking: RankingSettings = Field(default_factory=RankingSettings)
    own_topics: OwnTopicsSettings = Field(default_factory=OwnTopicsSettings)
    """Readers' own topics: on or off and their limits (``subscribers:`` stays the list of
    readers)."""
    dkim: DkimSettings | None = None
    workers: WorkersSettings | None = None
    """Absent: one process sends everything. Present: Celery workers do (see docs/deploy.md)."""
    delivery: DeliverySettings = Field(default_factory=DeliverySettings)
    bounces: BounceSettings = Field(default_factory=BounceSettings)

    def fetched_sources(self) -> set[str]:
        """Names of the sources fetched now (configured and enabled): the ones worth alerting on."""
        return {s.name for s in self.sources if s.enabled}

    def topic(self, name: str) -> TopicSettings:
        """The topic called ``name``; raises :class:`KeyError` when there is none."""
        for topic in self.topics:
            if topic.name == name:
                return topic
        raise KeyError(name)


@dataclass(frozen=True)
class Config:
    """Validated settings plus where they came from."""

    settings: Settings
    path: Path
    database_url: str

    @property
    def base_dir(self) -> Path:
        """The folder of the config file: relative paths in it start there."""
        return self.path.parent

    def resolve(self, location: str) -> str:
        """A source location as the fetcher takes it: URLs unchanged, paths made absolute."""
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", location):
            return location
        return str((self.base_dir / location).resolve())

    def templates_dir(self) -> Path | None:
        """The absolute ``digest.templates_dir``, or ``None`` for the built-in templates."""
        d = self.settings.digest.templates_dir
        return None if d is None else (self.base_dir / d).resolve()
