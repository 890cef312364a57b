"""What every route uses, built once by :func:`newsletter.web.build_app`."""

from __future__ import annotations

from dataclasses import dataclass

import jinja2
from fastapi import Request

from newsletter.config import Config
from newsletter.digest.render import Renderer, safe_url
from newsletter.services import Services
from newsletter.store import Store
from newsletter.subscribe import Clock, Subscriptions


@dataclass
class WebContext:
    config: Config
    store: Store
    service: Subscriptions
    services: Services
    """The process's effects (relay, signer, tokens, clock), shared with the sends it starts."""
    env: jinja2.Environment
    renderer: Renderer
    now: Clock
    timezones: list[str]


def web_context(request: Request) -> WebContext:
    """The app's :class:`WebContext` (a FastAPI dependency)."""
    ctx = request.app.state.web
    assert isinstance(ctx, WebContext)
    return ctx


def public_url(value: str | None) -> str | None:
    """A link from feed data as pages and the API may show it: http(s) or mailto, else ``None``.

    The same policy as the digests (:func:`newsletter.digest.render.safe_url`): ``javascript:``,
    ``data:`` and every other scheme are dropped, whatever the case or leading spaces.
    """
    return safe_url(value) or None


def http_url(value: str | None) -> str:
    """A link from feed data for an ``href``: :func:`public_url`, or ``#`` when it has none."""
    return public_url(value) or "#"
