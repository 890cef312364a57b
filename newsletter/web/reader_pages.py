"""Pages reached by a digest's year-long links: a vote ("more/less like this") and "view in
browser", and the form that mails a reader fresh manage links when the link that opened the page
is too old to hand them out (docs/subscribing.md). The subscription pages themselves (subscribe,
confirm, manage, unsubscribe, the archive) are in :mod:`newsletter.web.pages`.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from newsletter.addresses import masked_address
from newsletter.errors import DeliveryError, RelayError
from newsletter.feedback import Ballot, FeedbackError, FeedbackLinks
from newsletter.models import Subscriber
from newsletter.render import DigestLinks
from newsletter.subscribe import Outcome
from newsletter.tokens import MAX_AGE, Purpose, TokenError
from newsletter.web.archive import render_sent_edition
from newsletter.web.context import WebContext
from newsletter.web.pages import Ctx, _feedback, _stale_form, message, page, token_problem
from newsletter.web.security import (
    CSP_DIGEST,
    CSRF_FIELD,
    csrf_cookie_value,
    csrf_field,
    csrf_ok,
    set_csrf_cookie,
)

log = logging.getLogger(__name__)
router = APIRouter(include_in_schema=False)


def _ballot_problem(ctx: WebContext, ballot: Ballot) -> HTMLResponse | None:
    if ballot.subscriber is None:
        return message(ctx, "Not subscribed", ballot.problem or "", 410, subscribe_link=True)
    if ballot.paper is None:
        return message(ctx, "Unknown paper", ballot.problem or "", 404)
    return None


def _feedback_page(
    ctx: WebContext, request: Request, token: str, ballot: Ballot, name: str, status: int = 200
) -> HTMLResponse:
    assert ballot.subscriber is not None
    cookie = csrf_cookie_value(request)
    response = page(
        ctx,
        name,
        status,
        token=token,
        ballot=ballot,
        more=ballot.request.value > 0,
        paper=ballot.paper,
        address=masked_address(ballot.subscriber.email),  # the link may be a forwarded one
        links=ctx.service.links_as_of(ballot.subscriber, ballot.request.signed),
        mail_links=f"/feedback/{token}/links",
        csrf=csrf_field(ctx.service.tokens, cookie),
    )
    set_csrf_cookie(request, response, cookie)
    return response


@router.get("/feedback/{token}", response_class=HTMLResponse)
def feedback_page(token: str, request: Request, ctx: WebContext = Ctx) -> HTMLResponse:
    """One button: a GET records nothing (mail scanners open every link)."""
    try:
        ballot = _feedback(ctx).ballot(token)
    except TokenError as e:
        return token_problem(ctx, e, "“more/less like this”")
    problem = _ballot_problem(ctx, ballot)
    if problem is not None:
        return problem
    return _feedback_page(ctx, request, token, ballot, "feedback.html")


@router.post("/feedback/{token}", response_class=HTMLResponse)
async def feedback_submit(token: str, request: Request, ctx: WebContext = Ctx) -> Response:
    """Record (or undo) the vote a feedback link names."""
    form = await request.form()
    if not csrf_ok(ctx.service.tokens, request, form.get(CSRF_FIELD)):
        return _stale_form(ctx)
    undo = form.get("undo") == "1"
    return await run_in_threadpool(_feedback_sync, ctx, request, token, undo)


def _feedback_sync(ctx: WebContext, request: Request, token: str, undo: bool) -> Response:
    service = _feedback(ctx)
    try:
        ballot = service.undo(token) if undo else service.cast(token)
    except TokenError as e:
        return token_problem(ctx, e, "“more/less like this”")
    except FeedbackError:
        problem = _ballot_problem(ctx, service.ballot(token))
        return problem or message(ctx, "Not recorded", "Nothing was recorded.", 409)
    name = "feedback_undone.html" if undo else "feedback_done.html"
    return _feedback_page(ctx, request, token, ballot, name)


@router.post("/feedback/{token}/links", response_class=HTMLResponse)
async def feedback_mail_links(token: str, request: Request, ctx: WebContext = Ctx) -> Response:
    """Mail fresh manage and unsubscribe links to the reader (the feedback page offers this
    when its own links are too old to hand out)."""
    form = await request.form()
    if not csrf_ok(ctx.service.tokens, request, form.get(CSRF_FIELD)):
        return _stale_form(ctx)
    return await run_in_threadpool(_feedback_mail_links_sync, ctx, token)


def _feedback_mail_links_sync(ctx: WebContext, token: str) -> HTMLResponse:
    try:
        ballot = _feedback(ctx).ballot(token)
    except TokenError as e:
        return token_problem(ctx, e, "“more/less like this”")
    return _mail_links(ctx, ballot.subscriber)


def _mail_links(ctx: WebContext, sub: Subscriber | None) -> HTMLResponse:
    """Mail a reader fresh manage and unsubscribe links, to their own address only."""
    if sub is None:
        return message(
            ctx,
            "Not subscribed",
            "This address is no longer subscribed (its data was erased).",
            410,
            subscribe_link=True,
        )
    try:
        outcome = ctx.service.mail_links(sub)
    except RelayError as e:
        log.error("cannot mail fresh links: %s", e)
        return message(
            ctx, "Please try again later", "We could not send mail just now. Please try later.", 503
        )
    except DeliveryError as e:
        log.warning("fresh links refused by the relay: %s", e)
        outcome = Outcome.MANAGE_SENT  # the same answer as when it went out
    if outcome is Outcome.NOT_SUBSCRIBED:
        return message(
            ctx,
            "You are not subscribed",
            "This address does not get the digest any more. You can subscribe again.",
            200,
            subscribe_link=True,
        )
    if outcome is Outcome.LIMITED:
        return message(
            ctx,
            "Too many requests",
            "A link was mailed to you recently: please check your inbox, or try again later.",
            429,
        )
    return message(
        ctx,
        "Check your inbox",
        "We mailed a link to manage your subscription, or to unsubscribe, to the address the "
        "digest goes to.",
        200,
    )


# ---------------------------------------------------------------------------- unsubscribe


@router.get("/archive/view/{token}", response_class=HTMLResponse)
def archive_view(token: str, ctx: WebContext = Ctx) -> HTMLResponse:
    """A sent digest as its reader got it ("view in browser")."""
    try:
        sub, day, signed = ctx.service.view_for(token)
    except TokenError as e:
        return token_problem(ctx, e, "view-in-browser")
    html = None
    if sub is not None:
        # Links as old as this one, or none: a year-old view link opens no manage page.
        base = ctx.config.settings.sender.base_url
        own = ctx.service.links_as_of(sub, signed)
        ask = f"{base}/archive/view/{token}/links"  # "mail me fresh links" instead
        feedback = FeedbackLinks(ctx.service.tokens, base, signed)
        links = DigestLinks(
            unsubscribe=ask if own is None else own.unsubscribe,
            manage=ask if own is None else own.manage,
            feedback=feedback.for_subscriber(sub),
            by_mail=own is None,  # the footer says what the link does
        )
        html = render_sent_edition(
            ctx.config, ctx.store, ctx.renderer, sub.id, day, links, vectors=ctx.services.vectors
        )
    if html is None:
        return message(ctx, "No such digest", "This digest is not in the archive.", 404)
    response = HTMLResponse(html)
    response.headers["Content-Security-Policy"] = CSP_DIGEST
    return response


@router.get("/archive/view/{token}/links", response_class=HTMLResponse)
def archive_view_links(token: str, request: Request, ctx: WebContext = Ctx) -> HTMLResponse:
    """Where an old "view in browser" page's manage and unsubscribe links lead: one button
    that mails the reader fresh ones (a GET sends nothing)."""
    try:
        ctx.service.view_for(token)
    except TokenError as e:
        return token_problem(ctx, e, "view-in-browser")
    cookie = csrf_cookie_value(request)
    response = page(
        ctx,
        "mail_links.html",
        action=f"/archive/view/{token}/links",
        days=MAX_AGE[Purpose.MANAGE].days,
        csrf=csrf_field(ctx.service.tokens, cookie),
    )
    set_csrf_cookie(request, response, cookie)
    return response


@router.post("/archive/view/{token}/links", response_class=HTMLResponse)
async def archive_view_mail_links(token: str, request: Request, ctx: WebContext = Ctx) -> Response:
    """Mail fresh manage and unsubscribe links to the reader of an old "view in browser" page."""
    form = await request.form()
    if not csrf_ok(ctx.service.tokens, request, form.get(CSRF_FIELD)):
        return _stale_form(ctx)
    return await run_in_threadpool(_view_mail_links_sync, ctx, token)


def _view_mail_links_sync(ctx: WebContext, token: str) -> HTMLResponse:
    try:
        sub, _, _ = ctx.service.view_for(token)
    except TokenError as e:
        return token_problem(ctx, e, "view-in-browser")
    return _mail_links(ctx, sub)
