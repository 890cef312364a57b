"""YAML config → validated, frozen settings.

Every mistake is reported as ``file:line: key.path: what is wrong``: unknown keys, bad values,
duplicate keys, topics a subscriber names but nobody defined. Paths inside a config file (feed
files, a SQLite database) are relative to the file's own folder. Secrets come from the
environment: ``NEWSLETTER_DATABASE_URL`` overrides ``database.url``, ``NEWSLETTER_BROKER_URL``
overrides ``workers.broker_url``, and the SMTP password is read from the variable that
``smtp.password_env`` names.

One module per domain, as :mod:`newsletter.bounces.settings` holds the ``bounces:`` section:

* :mod:`~newsletter.config.base`: the strict base model, environment variable names, shared checks;
* :mod:`~newsletter.config.delivery`: ``sender``, ``smtp``, ``delivery``, ``dkim``, ``alerts``;
* :mod:`~newsletter.config.content`: ``sources``, ``fetch``, ``topics``, ``digest``, ``ranking``;
* :mod:`~newsletter.config.schedule`: ``schedule``, ``workers``;
* :mod:`~newsletter.config.web`: ``web`` (admin token, metrics), ``inbound``, signing-key rules;
* :mod:`~newsletter.config.settings`: ``Settings`` (every section) and ``Config``;
* :mod:`~newsletter.config.yaml_lines`: the YAML line map that gives every error its ``file:line``;
* :mod:`~newsletter.config.load`: finding, validating and loading a file, with the environment.

Import from here (``from newsletter.config import Config``); the modules are the layout.

May import: core, bounces.settings.
"""

from __future__ import annotations

from newsletter.bounces.settings import BounceSettings
from newsletter.config.base import (
    DEFAULT_CONFIG,
    ENV_BROKER_URL,
    ENV_CONFIG,
    ENV_DATABASE_URL,
)
from newsletter.config.content import (
    SOURCE_SCHEMES,
    ArxivId,
    DigestSettings,
    FetchSettings,
    Keyword,
    OwnTopicsSettings,
    RankingSettings,
    SourceKind,
    SourceSettings,
    TopicSettings,
    source_url_problem,
)
from newsletter.config.delivery import (
    DKIM_HEADERS,
    AlertSettings,
    DeliverySettings,
    DkimSettings,
    SenderSettings,
    SmtpSettings,
)
from newsletter.config.load import (
    check_workers_database,
    config_from_settings,
    load_config,
    parse_config,
    valid_keys,
)
from newsletter.config.schedule import FetchTime, ScheduleSettings, WorkersSettings
from newsletter.config.settings import Config, DatabaseSettings, Settings, SubscriberSeed
from newsletter.config.web import (
    MAKE_SECRET_KEY,
    MIN_ADMIN_TOKEN_LENGTH,
    MIN_SECRET_KEY_DISTINCT,
    MIN_SECRET_KEY_LENGTH,
    PUBLISHED_SECRET_KEYS,
    InboundSettings,
    RateLimitSettings,
    WebSettings,
    admin_token_problem,
    loopback_listen,
    secret_key_problem,
)
from newsletter.config.yaml_lines import Loc
from newsletter.errors import ConfigError

__all__ = [
    "DEFAULT_CONFIG",
    "DKIM_HEADERS",
    "ENV_BROKER_URL",
    "ENV_CONFIG",
    "ENV_DATABASE_URL",
    "MAKE_SECRET_KEY",
    "MIN_ADMIN_TOKEN_LENGTH",
    "MIN_SECRET_KEY_DISTINCT",
    "MIN_SECRET_KEY_LENGTH",
    "PUBLISHED_SECRET_KEYS",
    "SOURCE_SCHEMES",
    "AlertSettings",
    "ArxivId",
    "BounceSettings",
    "Config",
    "ConfigError",
    "DatabaseSettings",
    "DeliverySettings",
    "DigestSettings",
    "DkimSettings",
    "FetchSettings",
    "FetchTime",
    "InboundSettings",
    "Keyword",
    "Loc",
    "OwnTopicsSettings",
    "RankingSettings",
    "RateLimitSettings",
    "ScheduleSettings",
    "SenderSettings",
    "Settings",
    "SmtpSettings",
    "SourceKind",
    "SourceSettings",
    "SubscriberSeed",
    "TopicSettings",
    "WebSettings",
    "WorkersSettings",
    "admin_token_problem",
    "check_workers_database",
    "config_from_settings",
    "load_config",
    "loopback_listen",
    "parse_config",
    "secret_key_problem",
    "source_url_problem",
    "valid_keys",
]
