"""What every route uses, built once by :func:`newsletter.web.create_app`."""

from __future__ import annotations

from dataclasses import dataclass

import jinja2
from fastapi import Request

from newsletter.config import Config
from newsletter.render import Renderer
from newsletter.store import Store
from newsletter.subscribe import Clock, Subscriptions


@dataclass
class WebContext:
    config: Config
    store: Store
    service: Subscriptions
    env: jinja2.Environment
    renderer: Renderer
    now: Clock
    timezones: list[str]


def web_context(request: Request) -> WebContext:
    ctx = request.app.state.web
    assert isinstance(ctx, WebContext)
    return ctx


def http_url(value: str | None) -> str:
    """Only http(s) links from feed data reach an ``href``."""
    if value and value.lower().startswith(("https://", "http://")):
        return value
    return "#"
