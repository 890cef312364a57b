"""Pages reached by a digest's year-long links: a vote ("more/less like this") and "view in
browser" (one token serves both: :mod:`newsletter.subscribe.votes`), and the form that mails a reader fresh manage links when the link that opened the page
is too old to hand them out (docs/subscribing.md). The subscription pages themselves (subscribe,
confirm, manage, unsubscribe, the archive) are in :mod:`newsletter.web.pages`.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from newsletter.addresses import masked_address
from newsletter.digest.render import DigestLinks
from newsletter.edition.archive import left_out
from newsletter.errors import DeliveryError, RelayError
from newsletter.models import Subscriber
from newsletter.services.link_tokens import MAX_AGE, Purpose, TokenError
from newsletter.subscribe import Outcome
from newsletter.subscribe.votes import Ballot, DigestVote, FeedbackError, VoteLinks
from newsletter.web.archive import render_sent_edition
from newsletter.web.context import WebContext
from newsletter.web.pages import (
    Ctx,
    _feedback,
    _stale_form,
    form_page,
    message,
    page,
    token_problem,
)
from newsletter.web.security import (
    CSP_DIGEST,
    CSRF_FIELD,
    csrf_ok,
)

log = logging.getLogger(__name__)
router = APIRouter(include_in_schema=False)


def _ballot_problem(ctx: WebContext, ballot: Ballot) -> HTMLResponse | None:
    if ballot.subscriber is None:
        return message(ctx, "Not subscribed", ballot.problem or "", 410, subscribe_link=True)
    if not ballot.in_digest:
        return message(ctx, "Not in this digest", ballot.problem or "", 404)
    if ballot.paper is None:
        return message(ctx, "Unknown paper", ballot.problem or "", 404)
    return None


def _path(link: str | DigestVote) -> str:
    """What follows ``/feedback/`` in the link (the page's forms post back to it)."""
    return link.path if isinstance(link, DigestVote) else link


def _feedback_page(
    ctx: WebContext,
    request: Request,
    link: str | DigestVote,
    ballot: Ballot,
    name: str,
    status: int = 200,
) -> HTMLResponse:
    assert ballot.subscriber is not None
    return form_page(
        ctx,
        request,
        name,
        status,
        token=_path(link),
        ballot=ballot,
        more=ballot.request.value > 0,
        paper=ballot.paper,
        address=masked_address(ballot.subscriber.email),  # the link may be a forwarded one
        links=ctx.service.links_as_of(ballot.subscriber, ballot.request.signed),
        mail_links=f"/feedback/{_path(link)}/links",
    )


def _vote(request: Request, token: str, paper_id: int, vote: str) -> DigestVote:
    """The digest vote a link's path names. Raises :class:`TokenError`."""
    topic = request.path_params.get("topic")
    return DigestVote.parse(token, paper_id, vote, topic if isinstance(topic, str) else None)


@router.get("/feedback/{token}/{paper_id:int}/{vote}", response_class=HTMLResponse)
@router.get("/feedback/{token}/{topic}/{paper_id:int}/{vote}", response_class=HTMLResponse)
def vote_page(
    token: str, paper_id: int, vote: str, request: Request, ctx: WebContext = Ctx
) -> HTMLResponse:
    """A digest's more/less link (its token is the digest's; the paper must be in it)."""
    try:
        link = _vote(request, token, paper_id, vote)
    except TokenError as e:
        return token_problem(ctx, e, "“more/less like this”")
    return _show_ballot(ctx, request, link)


@router.get("/feedback/{token}", response_class=HTMLResponse)
def feedback_page(token: str, request: Request, ctx: WebContext = Ctx) -> HTMLResponse:
    """One button: a GET records nothing (mail scanners open every link)."""
    return _show_ballot(ctx, request, token)


def _show_ballot(ctx: WebContext, request: Request, link: str | DigestVote) -> HTMLResponse:
    try:
        ballot = _feedback(ctx).ballot(link)
    except TokenError as e:
        return token_problem(ctx, e, "“more/less like this”")
    problem = _ballot_problem(ctx, ballot)
    if problem is not None:
        return problem
    return _feedback_page(ctx, request, link, ballot, "feedback.html")


@router.post("/feedback/{token}/{paper_id:int}/{vote}", response_class=HTMLResponse)
@router.post("/feedback/{token}/{topic}/{paper_id:int}/{vote}", response_class=HTMLResponse)
async def vote_submit(
    token: str, paper_id: int, vote: str, request: Request, ctx: WebContext = Ctx
) -> Response:
    """Record (or undo) the vote a digest's more/less link names."""
    try:
        link = _vote(request, token, paper_id, vote)
    except TokenError as e:
        return token_problem(ctx, e, "“more/less like this”")
    return await _submit(ctx, request, link)


@router.post("/feedback/{token}", response_class=HTMLResponse)
async def feedback_submit(token: str, request: Request, ctx: WebContext = Ctx) -> Response:
    """Record (or undo) the vote a feedback link names."""
    return await _submit(ctx, request, token)


async def _submit(ctx: WebContext, request: Request, link: str | DigestVote) -> Response:
    form = await request.form()
    if not csrf_ok(ctx.service.tokens, request, form.get(CSRF_FIELD)):
        return _stale_form(ctx)
    undo = form.get("undo") == "1"
    return await run_in_threadpool(_feedback_sync, ctx, request, link, undo)


def _feedback_sync(
    ctx: WebContext, request: Request, link: str | DigestVote, undo: bool
) -> Response:
    service = _feedback(ctx)
    try:
        ballot = service.undo(link) if undo else service.cast(link)
    except TokenError as e:
        return token_problem(ctx, e, "“more/less like this”")
    except FeedbackError:
        problem = _ballot_problem(ctx, service.ballot(link))
        return problem or message(ctx, "Not recorded", "Nothing was recorded.", 409)
    name = "feedback_undone.html" if undo else "feedback_done.html"
    return _feedback_page(ctx, request, link, ballot, name)


@router.post("/feedback/{token}/{paper_id:int}/{vote}/links", response_class=HTMLResponse)
@router.post("/feedback/{token}/{topic}/{paper_id:int}/{vote}/links", response_class=HTMLResponse)
async def vote_mail_links(
    token: str, paper_id: int, vote: str, request: Request, ctx: WebContext = Ctx
) -> Response:
    """Mail fresh manage and unsubscribe links to the reader (a digest link's page offers this
    when its own links are too old to hand out)."""
    try:
        link = _vote(request, token, paper_id, vote)
    except TokenError as e:
        return token_problem(ctx, e, "“more/less like this”")
    return await _ask_links(ctx, request, link)


@router.post("/feedback/{token}/links", response_class=HTMLResponse)
async def feedback_mail_links(token: str, request: Request, ctx: WebContext = Ctx) -> Response:
    """Mail fresh manage and unsubscribe links to the reader (the feedback page offers this
    when its own links are too old to hand out)."""
    return await _ask_links(ctx, request, token)


async def _ask_links(ctx: WebContext, request: Request, link: str | DigestVote) -> Response:
    form = await request.form()
    if not csrf_ok(ctx.service.tokens, request, form.get(CSRF_FIELD)):
        return _stale_form(ctx)
    return await run_in_threadpool(_feedback_mail_links_sync, ctx, link)


def _feedback_mail_links_sync(ctx: WebContext, link: str | DigestVote) -> HTMLResponse:
    try:
        ballot = _feedback(ctx).ballot(link)
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
        links = DigestLinks(
            unsubscribe=ask if own is None else own.unsubscribe,
            manage=ask if own is None else own.manage,
            more=f"{base}/archive/view/{token}/more",  # as the mail's notes link it
            # The more/less links carry this page's own token: they expire with it.
            feedback=VoteLinks(base).for_digest(token),
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


@router.get("/archive/view/{token}/more", response_class=HTMLResponse)
def archive_view_more(token: str, ctx: WebContext = Ctx) -> HTMLResponse:
    """What a sent digest's limits left out, per section: where its "3 more in the archive"
    notes lead (issue 44)."""
    try:
        sub, day, _ = ctx.service.view_for(token)
    except TokenError as e:
        return token_problem(ctx, e, "view-in-browser")
    found = None if sub is None else left_out(ctx.store, sub.id, day)
    if found is None:
        return message(ctx, "No such digest", "This digest is not in the archive.", 404)
    base = ctx.config.settings.sender.base_url
    return page(
        ctx,
        "archive_more.html",
        found=found,
        view=f"{base}/archive/view/{token}",
        label=f"{day:%A}, {day:%B} {day.day}, {day.year}",
    )


@router.get("/archive/view/{token}/links", response_class=HTMLResponse)
def archive_view_links(token: str, request: Request, ctx: WebContext = Ctx) -> HTMLResponse:
    """Where an old "view in browser" page's manage and unsubscribe links lead: one button
    that mails the reader fresh ones (a GET sends nothing)."""
    try:
        ctx.service.view_for(token)
    except TokenError as e:
        return token_problem(ctx, e, "view-in-browser")
    return form_page(
        ctx,
        request,
        "mail_links.html",
        action=f"/archive/view/{token}/links",
        days=MAX_AGE[Purpose.MANAGE].days,
    )


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
