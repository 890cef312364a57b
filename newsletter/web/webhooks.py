"""The providers' webhook routes: ``POST /webhooks/ses``, ``/mailgun``, ``/postmark``, ``/sendgrid``.

Each route authenticates the request with :mod:`newsletter.bounces.webhooks` and hands the events
to ``apply_events`` (on ``app.state.webhooks``; :func:`install` sets it). A refused request gets
a short fixed answer that repeats nothing it sent (400 malformed, 401 no credentials, 403 wrong,
stale or reused ones, 404 provider not configured, 503 we could not check or apply, so the
provider delivers it again) and one log line naming the provider and the reason.

Replays: an event whose provider id was applied is answered 200 and not applied again. The
store keeps each provider event once, across processes and restarts (the decider's
``event_key``); in front of it, :class:`~newsletter.bounces.webhooks.RecentEvents` (in memory,
bounded) spares the database a provider's retries of what this process just applied. A
Mailgun token is reserved in the store for its body before anything is applied: the same token
with another body, at the same time or after a restart, is refused (403).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from newsletter.bounces import sns
from newsletter.bounces import webhooks as hooks
from newsletter.bounces.decide import BounceDecider
from newsletter.bounces.events import BounceEvent, EventSource
from newsletter.bounces.settings import BounceSettings
from newsletter.bounces.webhook_settings import WebhookSettings
from newsletter.errors import NewsletterError
from newsletter.store import Store
from newsletter.subscribe import Clock
from newsletter.web.security import client_address

log = logging.getLogger("newsletter.webhooks")

ApplyEvents = Callable[[Sequence[BounceEvent]], None]
"""What receives authenticated events: the bounce decider, which scores, suppresses, unsubscribes."""

_ANSWERS = {
    400: "malformed request",
    401: "authentication required",
    403: "forbidden",
    404: "not found",
    503: "try again later",
}


def store_applier(store: Store, settings: BounceSettings) -> ApplyEvents:
    """Events applied by the bounce decider to ``store`` (scores, suppressions, unsubscribes).

    The store keeps each provider event once (its ``provider_id``), across processes and
    restarts. A database error comes back as a :class:`~newsletter.errors.StoreError`.
    """
    decider = BounceDecider(store, settings)

    def apply(events: Sequence[BounceEvent]) -> None:
        decider.apply(list(events))  # the Store raises its database errors as StoreError

    return apply


@dataclass
class WebhookState:
    """What the routes share: settings, clock, where events go, and the replay memories."""

    settings: WebhookSettings
    now: Clock
    apply_events: ApplyEvents
    nonces: hooks.Nonces
    """Where Mailgun tokens are reserved: the store, shared by every process."""
    certificates: sns.Certificates = field(default_factory=sns.Certificates)
    recent: hooks.RecentEvents = field(default_factory=hooks.RecentEvents)


def install(
    app: FastAPI,
    settings: BounceSettings,
    store: Store,
    now: Clock,
    apply_events: ApplyEvents | None = None,
) -> WebhookState:
    """Add the webhook routes to ``app``; events go to ``apply_events``, by default the bounce
    decider on ``store`` (:func:`store_applier`)."""
    hooks_settings = settings.webhooks
    prefix = hooks_settings.ses.cert_url_prefix if hooks_settings.ses else None
    state = WebhookState(
        settings=hooks_settings,
        now=now,
        apply_events=apply_events or store_applier(store, settings),
        nonces=store,
        certificates=sns.Certificates(prefix=prefix),
    )
    app.state.webhooks = state
    app.include_router(router)
    return state


router = APIRouter(prefix="/webhooks", include_in_schema=False)


async def _body(request: Request) -> bytes:
    return await request.body()  # within web.max_body_bytes: the BodyLimit middleware counts it


def _refuse(provider: EventSource, client: str, status: int, reason: str) -> JSONResponse:
    log.warning("webhook %s refused (%d): %s; client %s", provider, status, reason, client)
    headers = {"WWW-Authenticate": 'Basic realm="webhooks"'} if status == 401 else None
    return JSONResponse({"detail": _ANSWERS.get(status, "refused")}, status, headers=headers)


def _handle(request: Request, body: bytes, provider: EventSource) -> JSONResponse:
    state = request.app.state.webhooks
    assert isinstance(state, WebhookState)
    client = client_address(request)
    incoming = hooks.WebhookRequest(
        body=body, headers={k.lower(): v for k, v in request.headers.items()}, client=client
    )
    now = state.now()
    s = state.settings
    try:
        if provider is EventSource.SES and s.ses:
            accepted = hooks.ses(incoming, s.ses, now, state.certificates)
        elif provider is EventSource.MAILGUN and s.mailgun:
            accepted = hooks.mailgun(incoming, s.mailgun, now, state.nonces)
        elif provider is EventSource.POSTMARK and s.postmark:
            accepted = hooks.postmark(incoming, s.postmark, now)
        elif provider is EventSource.SENDGRID and s.sendgrid:
            accepted = hooks.sendgrid(incoming, s.sendgrid, now)
        else:
            raise hooks.Refused(404, f"not configured (bounces.webhooks.{provider} is absent)")
        if accepted.confirm_url is not None:
            try:
                state.certificates.confirm(accepted.confirm_url)
            except sns.SnsError as e:
                raise hooks.Refused(e.status, e.reason) from e
        new = state.recent.new(accepted.events)
        if new:
            try:
                state.apply_events(new)
            except NewsletterError as e:
                raise hooks.Refused(503, f"could not apply {len(new)} events: {e}") from e
        state.recent.applied(new)
    except hooks.Refused as e:
        return _refuse(provider, client, e.status, e.reason)
    duplicates = len(accepted.events) - len(new)
    log.info(
        "webhook %s: %d events applied, %d already applied, %d records ignored%s",
        provider,
        len(new),
        duplicates,
        accepted.ignored,
        f"; {accepted.note}" if accepted.note else "",
    )
    return JSONResponse(
        {"applied": len(new), "duplicates": duplicates, "ignored": accepted.ignored}
    )


@router.post("/ses")
def ses(request: Request, body: bytes = Depends(_body)) -> JSONResponse:
    """Amazon SES notifications through an SNS HTTPS subscription."""
    return _handle(request, body, EventSource.SES)


@router.post("/mailgun")
def mailgun(request: Request, body: bytes = Depends(_body)) -> JSONResponse:
    """Mailgun event webhooks (JSON)."""
    return _handle(request, body, EventSource.MAILGUN)


@router.post("/postmark")
def postmark(request: Request, body: bytes = Depends(_body)) -> JSONResponse:
    """Postmark bounce, spam complaint and subscription change webhooks."""
    return _handle(request, body, EventSource.POSTMARK)


@router.post("/sendgrid")
def sendgrid(request: Request, body: bytes = Depends(_body)) -> JSONResponse:
    """SendGrid's Signed Event Webhook."""
    return _handle(request, body, EventSource.SENDGRID)
