"""The JSON API: the same actions as the pages, described by ``/api/openapi.json``.

No cookies are involved, so no CSRF tokens either: a subscription request is rate limited and
only ever mails the address's owner; the other actions are authorized by their signed token.
"""

from __future__ import annotations

import logging
from datetime import date
from typing import Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from newsletter.addresses import InvalidAddress, normalize_name
from newsletter.edition.archive import archivable, trending_on
from newsletter.errors import DeliveryError, RelayError, SubscriberError
from newsletter.models import Subscriber
from newsletter.services.link_tokens import Purpose, TokenError
from newsletter.subscribe import InvalidRequest, LinkUsed
from newsletter.web.context import WebContext, public_url, web_context
from newsletter.web.security import client_address

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api", tags=["subscriptions"])
Ctx = Depends(web_context)


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TopicOut(BaseModel):
    name: str
    title: str


class SubscribeIn(_In):
    email: str = Field(max_length=320, examples=["ada@example.org"])
    topics: list[str] = Field(max_length=100, examples=[["gpu-kernels"]])
    timezone: str | None = Field(default=None, max_length=64, examples=["Europe/Berlin"])
    send_hour: int | None = Field(default=None, ge=0, le=23)


class ConfirmIn(_In):
    token: str = Field(max_length=4000)


class PreferencesIn(_In):
    topics: list[str] = Field(max_length=100)
    send_hour: int | None = Field(default=None, ge=0, le=23)
    frequency: Literal["daily", "weekly"] = "daily"
    paused: bool = False
    timezone: str | None = Field(default=None, max_length=64, examples=["Europe/Berlin"])
    """Left as it is when absent."""
    name: str | None = Field(default=None, max_length=200)
    """Display name; left as it is when absent."""


class SubscriptionOut(BaseModel):
    email: str
    name: str
    status: str
    topics: list[str]
    timezone: str
    send_hour: int | None
    frequency: str


class Accepted(BaseModel):
    status: Literal["accepted"] = "accepted"
    detail: str = "If the address can receive mail, a message with a link is on its way."


class Problem(BaseModel):
    detail: str
    field: str | None = None


class DayPaper(BaseModel):
    key: str
    title: str
    url: str | None
    """http(s) or mailto only; ``null`` when the feed gave another scheme (``javascript:``...)."""
    pdf_url: str | None = None
    code_url: str | None = None
    authors: list[str]
    upvotes: int | None
    reason: str


class DayTopic(BaseModel):
    topic: str
    title: str
    papers: list[DayPaper]


class DayOut(BaseModel):
    day: date
    timezone: str
    topics: list[DayTopic]


def problem(status: int, detail: str, field: str | None = None) -> JSONResponse:
    """A problem answer: ``status`` with what is wrong and, if known, the field."""
    return JSONResponse(Problem(detail=detail, field=field).model_dump(), status_code=status)


def out(sub: Subscriber) -> SubscriptionOut:
    """The subscription as the API shows it."""
    return SubscriptionOut(
        email=sub.email,
        name=sub.name,
        status=sub.status.value,
        topics=list(sub.topics),
        timezone=sub.timezone,
        send_hour=sub.send_hour,
        frequency=sub.frequency.value,
    )


_ERRORS: dict[int | str, dict[str, object]] = {
    400: {"model": Problem, "description": "A field is invalid, or the link is bad or expired"},
}


@router.get("/topics", response_model=list[TopicOut])
def topics(ctx: WebContext = Ctx) -> list[TopicOut]:
    """The operator's topics, to choose from."""
    return [TopicOut(name=t.name, title=t.label) for t in ctx.config.settings.topics]


@router.post(
    "/subscribe",
    status_code=202,
    response_model=Accepted,
    responses={
        **_ERRORS,
        429: {"model": Problem, "description": "Too many requests"},
        503: {"model": Problem, "description": "Mail cannot be sent right now"},
    },
)
def subscribe(
    body: SubscribeIn, request: Request, ctx: WebContext = Ctx
) -> Accepted | JSONResponse:
    """Ask for a subscription: a confirmation link is mailed (or a manage link, if subscribed).

    The answer is the same whatever the address's state.
    """
    service = ctx.service
    client = client_address(request)
    if not service.allow_client(client):
        return problem(429, "too many subscription requests from your network; try again later")
    try:
        choices = service.choices(body.topics, body.timezone, body.send_hour)
        service.request(body.email, choices, via="api", origin=f"api {client}")
    except InvalidRequest as e:
        return problem(400, e.reason, e.field)
    except RelayError as e:
        log.error("cannot send a confirmation mail: %s", e)
        return problem(503, "mail cannot be sent right now; try again later")
    except DeliveryError as e:
        log.warning("confirmation mail refused: %s", e)
    return Accepted()


@router.post(
    "/confirm",
    response_model=SubscriptionOut,
    responses={
        **_ERRORS,
        409: {"model": Problem, "description": "The link was used already, or is stale"},
    },
)
def confirm(
    body: ConfirmIn, request: Request, ctx: WebContext = Ctx
) -> SubscriptionOut | JSONResponse:
    """Confirm a subscription with the token from the confirmation link.

    A link confirms once, and never after the address unsubscribed (409).
    """
    try:
        sub = ctx.service.confirm(body.token, origin=f"api {client_address(request)}")
    except LinkUsed as e:
        return problem(409, str(e), "token")
    except TokenError as e:
        return problem(400, str(e), "token")
    return out(sub)


def _manage(ctx: WebContext, token: str) -> Subscriber | JSONResponse:
    try:
        sub = ctx.service.subscriber_for(Purpose.MANAGE, token)
    except TokenError as e:
        return problem(400, str(e), "token")
    if sub is None:
        return problem(404, "no such subscriber", "token")
    return sub


@router.get(
    "/subscription/{token}",
    response_model=SubscriptionOut,
    responses={**_ERRORS, 404: {"model": Problem}},
)
def get_subscription(token: str, ctx: WebContext = Ctx) -> SubscriptionOut | JSONResponse:
    """A subscriber's choices, by the token of their manage link."""
    sub = _manage(ctx, token)
    return sub if isinstance(sub, JSONResponse) else out(sub)


@router.put(
    "/subscription/{token}",
    response_model=SubscriptionOut,
    responses={**_ERRORS, 404: {"model": Problem}, 409: {"model": Problem}},
)
def put_subscription(
    token: str, body: PreferencesIn, ctx: WebContext = Ctx
) -> SubscriptionOut | JSONResponse:
    """Change topics, timezone, hour, frequency, name, or pause, by the manage link's token."""
    sub = _manage(ctx, token)
    if isinstance(sub, JSONResponse):
        return sub
    try:
        choices = ctx.service.choices(
            body.topics, body.timezone or sub.timezone, body.send_hour, body.frequency
        )
        name = None
        if body.name is not None:
            try:
                name = normalize_name(body.name)
            except InvalidAddress as e:
                raise InvalidRequest("name", str(e)) from e
        return out(ctx.service.update(sub, choices, paused=body.paused, name=name))
    except InvalidRequest as e:
        return problem(400, e.reason, e.field)
    except SubscriberError as e:
        return problem(409, str(e))


@router.post(
    "/unsubscribe/{token}",
    response_model=SubscriptionOut | None,
    responses=_ERRORS,
)
def unsubscribe(token: str, ctx: WebContext = Ctx) -> SubscriptionOut | JSONResponse | None:
    """Unsubscribe at once by the token of the unsubscribe link; idempotent."""
    try:
        sub = ctx.service.unsubscribe(token)
    except TokenError as e:
        return problem(400, str(e), "token")
    return None if sub is None else out(sub)


@router.get("/archive/{day}", response_model=DayOut, responses={404: {"model": Problem}})
async def archive_day(day: str, ctx: WebContext = Ctx) -> DayOut | JSONResponse:
    """The papers first seen on a day, ranked per topic (public)."""
    try:
        when = date.fromisoformat(day)
    except ValueError:
        return problem(404, f"{day!r} is not a date like 2026-11-17")
    if not archivable(when, ctx.now()):
        return problem(404, "there is no archive for that day")
    page = await run_in_threadpool(
        trending_on, ctx.config, ctx.store, when, vectors=ctx.services.vectors
    )
    return DayOut(
        day=page.day,
        timezone=page.timezone,
        topics=[
            DayTopic(
                topic=s.name,
                title=s.title,
                papers=[
                    DayPaper(
                        key=i.paper.key,
                        title=i.paper.title,
                        url=public_url(i.paper.url),
                        pdf_url=public_url(i.paper.pdf_url),
                        code_url=public_url(i.paper.code_url),
                        authors=list(i.paper.authors),
                        upvotes=i.paper.upvotes,
                        reason=i.reason,
                    )
                    for i in s.items
                ],
            )
            for s in page.sections
        ],
    )
