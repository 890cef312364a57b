"""The FastAPI app factory: everything the routes need is passed in, nothing is global.

``build_app(services)``: the process's :class:`~newsletter.services.Services` carries the edges
(a real database, ``SmtpMailer`` in production) and the clock; ``create_app(config, store,
mailer_factory, now=utcnow)`` builds them for a process that serves only the web app. Routes are
plain functions (FastAPI runs them in its thread pool), since the store and SMTP are blocking.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from newsletter.clock import utcnow
from newsletter.config import Config
from newsletter.config.time_zones import time_zones
from newsletter.deliver import MailerFactory
from newsletter.digest.render import Renderer, make_environment
from newsletter.services import Services
from newsletter.store import Store
from newsletter.subscribe import Clock, Subscriptions
from newsletter.web import api, ops, own_pages, pages, reader_pages, webhooks
from newsletter.web.context import WebContext, http_url
from newsletter.web.limits import BodyLimit, request_validation_handler
from newsletter.web.metrics import registry as metrics_registry
from newsletter.web.security import security_headers, slash_redirects

log = logging.getLogger(__name__)


def create_app(
    config: Config,
    store: Store,
    mailer_factory: MailerFactory | None = None,
    now: Clock = utcnow,
) -> FastAPI:
    """The web app of a process that serves only it (an ASGI server's factory, a test): its
    :class:`~newsletter.services.Services` built here. See :func:`build_app`."""
    return build_app(Services(config, store, clock=now, relay=mailer_factory))


def build_app(services: Services) -> FastAPI:
    """The web app on the process's ``services`` (config, store, relay, tokens, clock): pages,
    JSON API, ops routes and bounce webhooks."""
    config, store, now = services.config, services.store, services.clock
    env = make_environment(config.templates_dir())
    env.filters["http_url"] = http_url
    css = env.get_template("web/web.css").render()
    ctx = WebContext(
        config=config,
        store=store,
        service=Subscriptions(services),
        services=services,
        env=env,
        renderer=Renderer(config.settings, config.templates_dir()),
        now=now,
        timezones=list(time_zones()),
    )
    app = FastAPI(
        title="newsletter",
        summary="Subscribe to a daily digest of trending research papers; manage; unsubscribe.",
        version="1",
        docs_url=None,
        redoc_url=None,
        openapi_url="/api/openapi.json",
    )
    app.state.web = ctx
    app.state.metrics = metrics_registry(config, store, now)  # GET /metrics (with the token)
    app.add_exception_handler(RequestValidationError, request_validation_handler)

    async def not_found(request: Request, exc: Exception) -> Response:
        """An unknown address opened in a browser gets a page; the API and other clients keep
        FastAPI's JSON ``{"detail": ...}``."""
        assert isinstance(exc, HTTPException)
        browser = "text/html" in request.headers.get("accept", "")
        if (
            exc.status_code == 404
            and exc.detail == "Not Found"  # no route; a route's own 404 says more, in JSON
            and browser
            and not request.url.path.startswith("/api/")
        ):
            return pages.message(
                ctx,
                "Page not found",
                "There is no page at this address. Every digest has links to manage your "
                "subscription and to unsubscribe.",
                404,
                subscribe_link=True,
            )
        return await http_exception_handler(request, exc)

    app.add_exception_handler(HTTPException, not_found)
    # Added first, so it runs inside the security headers: a 413 carries them too.
    app.add_middleware(BodyLimit, max_bytes=config.settings.web.max_body_bytes)
    app.middleware("http")(security_headers)

    @app.get("/static/web.css", include_in_schema=False)
    def stylesheet() -> Response:
        return Response(
            css, media_type="text/css", headers={"Cache-Control": "public, max-age=3600"}
        )

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok", "time": now().isoformat()}

    app.include_router(ops.router)
    app.include_router(pages.router)
    app.include_router(reader_pages.router)
    app.include_router(own_pages.router)
    app.include_router(api.router)
    webhooks.install(app, config.settings.bounces, store, now)
    slash_redirects(app.router, config.settings.sender.base_url)  # not to the client's Host
    return app
