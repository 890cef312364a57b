"""The HTML pages. No JavaScript; every form posts to its own URL.

GETs never change anything (link scanners follow them): confirm, unsubscribe and "more/less
like this" links open a page with one button. The unsubscribe URL also takes the RFC 8058 one-click POST that mail
clients send from the ``List-Unsubscribe`` header.

Why one module of this length: it is one short section per page (subscribe, confirm, manage,
feedback, unsubscribe, archive), mostly a GET and a POST each, all sharing the page helpers, the
CSRF check and the wording of :func:`token_problem`; the logic behind them lives elsewhere
(:mod:`newsletter.subscribe`, :mod:`newsletter.subscribe.votes`).
"""

from __future__ import annotations

import logging
from datetime import date
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from newsletter.addresses import InvalidAddress, normalize_name
from newsletter.edition.archive import archivable, trending_on
from newsletter.errors import DeliveryError, RelayError, SubscriberError
from newsletter.models import Subscriber, SubscriberStatus
from newsletter.services.link_tokens import Purpose, TokenError
from newsletter.subscribe import InvalidRequest, LinkUsed
from newsletter.subscribe.own_topics import LEXICAL_NOTE, OwnTopicEditor, lexical_only
from newsletter.subscribe.votes import Feedback
from newsletter.web.context import WebContext, web_context
from newsletter.web.security import (
    CSRF_FIELD,
    client_address,
    csrf_cookie_value,
    csrf_field,
    csrf_ok,
    set_csrf_cookie,
)

log = logging.getLogger(__name__)
router = APIRouter(include_in_schema=False)

HONEYPOT = "website"


Ctx = Depends(web_context)


def page(ctx: WebContext, name: str, status: int = 200, **values: Any) -> HTMLResponse:
    """The page rendered from template ``web/{name}``."""
    settings = ctx.config.settings
    html = ctx.env.get_template(f"web/{name}").render(
        sender=settings.sender, brand=settings.sender.from_name or "Trending papers", **values
    )
    return HTMLResponse(html, status_code=status)


def form_page(
    ctx: WebContext, request: Request, name: str, status: int = 200, **values: Any
) -> HTMLResponse:
    """:func:`page` for a page with a form: its ``csrf`` field signed for the browser's CSRF
    cookie, which the response sets (a new one when the browser has none)."""
    cookie = csrf_cookie_value(request)
    response = page(ctx, name, status, csrf=csrf_field(ctx.service.tokens, cookie), **values)
    set_csrf_cookie(request, response, cookie)
    return response


def message(ctx: WebContext, title: str, text: str, status: int, **extra: Any) -> HTMLResponse:
    """A page with a title and one paragraph of text."""
    return page(ctx, "message.html", status, title=title, text=text, **extra)


def token_problem(ctx: WebContext, e: TokenError, what: str) -> HTMLResponse:
    """The page explaining why a link's token cannot be used (used, expired or damaged)."""
    if isinstance(e, LinkUsed):
        if e.subscribed:  # a second click: harmless, but the link hands out nothing
            return message(
                ctx,
                "You are already subscribed",
                "This confirmation link was used already. Every digest has a link to manage "
                "your subscription.",
                200,
            )
        return message(
            ctx,
            "This link can no longer be used",
            "This confirmation link was sent before the subscription ended. If you want the "
            "digest again, subscribe again: we will mail you a new link.",
            400,
            subscribe_link=True,
        )
    if e.expired:
        return message(
            ctx,
            "This link has expired",
            f"The {what} link is too old. You can start again from the subscribe page.",
            400,
            subscribe_link=True,
        )
    return message(
        ctx,
        "This link is not valid",
        f"The {what} link is damaged or incomplete; copy the whole link from the mail.",
        400,
        subscribe_link=True,
    )


# ---------------------------------------------------------------------------- subscribe


def _subscribe_form(
    ctx: WebContext,
    request: Request,
    *,
    status: int = 200,
    error: str | None = None,
    field: str | None = None,
    values: dict[str, Any] | None = None,
) -> HTMLResponse:
    settings = ctx.config.settings
    v = {
        "email": "",
        "topics": [],
        "timezone": settings.schedule.timezone,
        "send_hour": settings.schedule.send_hour,
        **(values or {}),
    }
    return form_page(
        ctx,
        request,
        "subscribe.html",
        status,
        topics=settings.topics,
        timezones=ctx.timezones,
        values=v,
        error=error,
        field=field,
        honeypot=HONEYPOT,
    )


@router.get("/", response_class=HTMLResponse)
@router.get("/subscribe", response_class=HTMLResponse)
def subscribe_page(request: Request, ctx: WebContext = Ctx) -> HTMLResponse:
    """The subscribe form."""
    return _subscribe_form(ctx, request)


def _int_or_none(value: object) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(str(value))
    except ValueError as e:
        raise InvalidRequest("send_hour", "an hour from 0 to 23") from e


@router.post("/subscribe", response_class=HTMLResponse)
async def subscribe_submit(request: Request, ctx: WebContext = Ctx) -> Response:
    """Ask for a subscription from the form; the page says to check the mail or what to correct."""
    form = await request.form()
    if not csrf_ok(ctx.service.tokens, request, form.get(CSRF_FIELD)):
        return message(
            ctx,
            "Please try again",
            "This form has expired or did not come from this site. Reload the page and submit it again.",
            403,
            subscribe_link=True,
        )
    return await run_in_threadpool(
        _subscribe_sync, ctx, request, dict(form), form.getlist("topics")
    )


def _subscribe_sync(
    ctx: WebContext, request: Request, form: dict[str, Any], topics: list[Any]
) -> Response:
    service = ctx.service
    client = client_address(request)
    if not service.allow_client(client):
        return message(
            ctx,
            "Too many requests",
            "Too many subscription requests came from your network. Please try again later.",
            429,
        )
    email = str(form.get("email", "")).strip()
    values = {
        "email": email,
        "topics": [str(t) for t in topics],
        "timezone": str(form.get("timezone", "")),
        "send_hour": form.get("send_hour", ""),
    }
    if form.get(HONEYPOT):
        log.info("subscription form with the honeypot filled from %s; ignored", client)
        return page(ctx, "check_inbox.html")
    try:
        choices = service.choices(
            [str(t) for t in topics],
            str(form.get("timezone") or "") or None,
            _int_or_none(form.get("send_hour")),
        )
        service.request(email, choices, via="web form", origin=f"web {client}")
    except InvalidRequest as e:
        return _subscribe_form(
            ctx, request, status=400, error=e.reason, field=e.field, values=values
        )
    except RelayError as e:
        log.error("cannot send a confirmation mail: %s", e)
        return message(
            ctx,
            "Please try again later",
            "We could not send mail just now. Nothing was recorded; please try again later.",
            503,
        )
    except DeliveryError as e:
        log.warning("confirmation mail refused: %s", e)  # same answer: no enumeration
    return page(ctx, "check_inbox.html")


# ---------------------------------------------------------------------------- confirm


@router.get("/confirm/{token}", response_class=HTMLResponse)
def confirm_page(token: str, ctx: WebContext = Ctx) -> HTMLResponse:
    """The page with the button that confirms a subscription."""
    try:
        ctx.service.check_confirmation(token)
    except TokenError as e:
        return token_problem(ctx, e, "confirmation")
    return page(ctx, "confirm.html", token=token)


@router.post("/confirm/{token}", response_class=HTMLResponse)
def confirm_submit(token: str, request: Request, ctx: WebContext = Ctx) -> HTMLResponse:
    """Confirm the subscription; the page shows its topics and links."""
    try:
        sub = ctx.service.confirm(token, origin=f"web {client_address(request)}")
    except TokenError as e:
        return token_problem(ctx, e, "confirmation")
    links = ctx.service.links(sub)
    titles = [ctx.config.settings.topic(t).label for t in sub.topics]
    return page(ctx, "confirmed.html", subscriber=sub, links=links, topics=titles)


# ---------------------------------------------------------------------------- manage


def _manage_form(
    ctx: WebContext,
    request: Request,
    token: str,
    sub: Subscriber,
    *,
    saved: bool = False,
    undone: bool = False,
    error: str | None = None,
    status: int = 200,
    own_error: str | None = None,
    own_done: str | None = None,
    own_form: dict[str, str] | None = None,
) -> HTMLResponse:
    editor = own_editor(ctx)
    return form_page(
        ctx,
        request,
        "manage.html",
        status,
        own_on=editor.on,
        own_topics=editor.mine(sub) if editor.on else (),
        own_limits=editor.settings,
        own_lexical=lexical_only(ctx.config),
        own_note=LEXICAL_NOTE,
        own_error=own_error,
        own_done=OWN_DONE.get(own_done or ""),
        own_form=own_form or {},
        subscriber=sub,
        token=token,
        topics=ctx.config.settings.topics,
        timezones=ctx.timezones,
        links=ctx.service.links(sub),
        saved=saved,
        error=error,
        default_hour=ctx.config.settings.schedule.send_hour,
        votes=_feedback(ctx).votes(sub),
        undone=undone,
    )


OWN_DONE = {
    "added": "Your own topic was added; it shows in your next digest.",
    "edited": "Your own topic was changed.",
    "removed": "Your own topic was removed.",
}
"""What the manage page says after a change to the reader's own topics (``?own=...``)."""


def own_editor(ctx: WebContext) -> OwnTopicEditor:
    """The own-topic rules on the app's store and clock."""
    return OwnTopicEditor(ctx.config, ctx.store, ctx.now)


def _name(value: str) -> str:
    try:
        return normalize_name(value)
    except InvalidAddress as e:
        raise InvalidRequest("name", str(e)) from e


def _manage_subscriber(ctx: WebContext, token: str) -> Subscriber:
    sub = ctx.service.subscriber_for(Purpose.MANAGE, token)
    if sub is None:
        raise TokenError("this link is not valid")
    return sub


@router.get("/manage/{token}", response_class=HTMLResponse)
def manage_page(
    token: str,
    request: Request,
    saved: int = 0,
    undone: int = 0,
    own: str = "",
    ctx: WebContext = Ctx,
) -> HTMLResponse:
    """The manage page: topics, schedule, pause and votes."""
    try:
        sub = _manage_subscriber(ctx, token)
    except TokenError as e:
        return token_problem(ctx, e, "manage")
    if sub.status not in (SubscriberStatus.ACTIVE, SubscriberStatus.PAUSED):
        return message(
            ctx,
            "You are not subscribed",
            f"{sub.email} does not get the digest any more. You can subscribe again.",
            200,
            subscribe_link=True,
        )
    return _manage_form(
        ctx, request, token, sub, saved=bool(saved), undone=bool(undone), own_done=own
    )


@router.post("/manage/{token}", response_class=HTMLResponse)
async def manage_submit(token: str, request: Request, ctx: WebContext = Ctx) -> Response:
    """Save the choices made on the manage page (topics, name, schedule, pause)."""
    form = await request.form()
    if not csrf_ok(ctx.service.tokens, request, form.get(CSRF_FIELD)):
        return message(
            ctx,
            "Please try again",
            "This form has expired or did not come from this site. Reload the page and submit it again.",
            403,
        )
    return await run_in_threadpool(
        _manage_sync, ctx, request, token, dict(form), form.getlist("topics")
    )


def _manage_sync(
    ctx: WebContext, request: Request, token: str, form: dict[str, Any], topics: list[Any]
) -> Response:
    try:
        sub = _manage_subscriber(ctx, token)
    except TokenError as e:
        return token_problem(ctx, e, "manage")
    try:
        choices = ctx.service.choices(
            [str(t) for t in topics],
            str(form.get("timezone") or "") or sub.timezone,
            _int_or_none(form.get("send_hour")),
            str(form.get("frequency") or "daily"),
        )
        name = None if "name" not in form else _name(str(form["name"]))
        ctx.service.update(sub, choices, paused=bool(form.get("paused")), name=name)
    except InvalidRequest as e:
        return _manage_form(ctx, request, token, sub, error=e.reason, status=400)
    except SubscriberError as e:
        return message(ctx, "You are not subscribed", str(e), 409, subscribe_link=True)
    return RedirectResponse(f"/manage/{token}?saved=1", status_code=303)


@router.post("/manage/{token}/unvote", response_class=HTMLResponse)
async def manage_unvote(token: str, request: Request, ctx: WebContext = Ctx) -> Response:
    """Withdraw one of the reader's "more/less like this" votes (listed on the manage page)."""
    form = await request.form()
    if not csrf_ok(ctx.service.tokens, request, form.get(CSRF_FIELD)):
        return _stale_form(ctx)
    return await run_in_threadpool(_unvote_sync, ctx, token, str(form.get("paper") or ""))


def _unvote_sync(ctx: WebContext, token: str, paper: str) -> Response:
    try:
        sub = _manage_subscriber(ctx, token)
    except TokenError as e:
        return token_problem(ctx, e, "manage")
    if not paper.isdigit():
        return message(ctx, "Nothing to undo", "The form named no paper.", 400)
    _feedback(ctx).clear(sub, int(paper))
    return RedirectResponse(f"/manage/{token}?undone=1#votes", status_code=303)


def _stale_form(ctx: WebContext) -> HTMLResponse:
    return message(
        ctx,
        "Please try again",
        "This form has expired or did not come from this site. Reload the page and submit it again.",
        403,
    )


# ---------------------------------------------------------------------------- feedback


def _feedback(ctx: WebContext) -> Feedback:
    return Feedback(ctx.store, ctx.service.tokens, ctx.now)


@router.get("/unsubscribe/{token}", response_class=HTMLResponse)
def unsubscribe_page(token: str, ctx: WebContext = Ctx) -> HTMLResponse:
    """The page with the button that unsubscribes."""
    try:
        sub = ctx.service.subscriber_for(Purpose.UNSUBSCRIBE, token)
    except TokenError as e:
        return token_problem(ctx, e, "unsubscribe")
    done = sub is None or sub.status is SubscriberStatus.UNSUBSCRIBED
    return page(ctx, "unsubscribe.html", token=token, subscriber=sub, done=done)


@router.post("/unsubscribe/{token}", response_class=HTMLResponse)
def unsubscribe_now(token: str, ctx: WebContext = Ctx) -> HTMLResponse:
    """RFC 8058 one-click: no cookie, no CSRF token, no redirect; idempotent; answers 200."""
    try:
        sub = ctx.service.unsubscribe(token)
    except TokenError as e:
        return token_problem(ctx, e, "unsubscribe")
    return page(ctx, "unsubscribed.html", subscriber=sub)


# ---------------------------------------------------------------------------- archive


@router.get("/archive", response_class=HTMLResponse)
def archive_index(ctx: WebContext = Ctx) -> HTMLResponse:
    """The list of days with sent digests."""
    days = ctx.store.sent_edition_dates(60)
    response = page(ctx, "archive_index.html", days=days)
    response.headers["Cache-Control"] = "public, max-age=600"
    return response


@router.get("/archive/{day}", response_class=HTMLResponse)
def archive_day(day: str, ctx: WebContext = Ctx) -> HTMLResponse:
    """The papers trending on one day."""
    try:
        when = date.fromisoformat(day)
    except ValueError:
        return message(ctx, "No such day", f"{day!r} is not a date like 2026-11-17.", 404)
    if not archivable(when, ctx.now()):
        return message(ctx, "No such day", "There is no archive for that day.", 404)
    result = trending_on(ctx.config, ctx.store, when, vectors=ctx.services.vectors)
    response = page(
        ctx, "archive_day.html", day=result, label=f"{when:%A}, {when:%B} {when.day}, {when.year}"
    )
    response.headers["Cache-Control"] = "public, max-age=600"
    return response
