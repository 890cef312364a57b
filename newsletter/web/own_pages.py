"""The reader's own topics on the web (issue 45): the manage page's "Your own topics" form (add,
edit, remove) and the page a ``topic add:`` / ``topic remove:`` email command's confirmation
link opens (one button; the GET changes nothing, as every link's page).

The rules (length, HTML, links, examples, limits, the daily edit budget) are
:class:`~newsletter.subscribe.own_topics.OwnTopicEditor`'s; a refusal is shown inline on the manage page,
in its own words, with what the reader typed put back in the form (escaped, as everything).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from newsletter.models import SubscriberStatus
from newsletter.services.link_tokens import TokenError
from newsletter.subscribe.own_mail import OwnTopicCommand, read_own_token
from newsletter.subscribe.own_topics import OwnTopicRefused
from newsletter.web.context import WebContext
from newsletter.web.pages import (
    Ctx,
    _manage_form,
    _manage_subscriber,
    _stale_form,
    form_page,
    message,
    own_editor,
    token_problem,
)
from newsletter.web.security import (
    CSRF_FIELD,
    csrf_ok,
)

router = APIRouter(include_in_schema=False)

FIELD_CHARS = 2000
"""The most a form field is read for (the sentence's own limit is far below)."""


def _field(form: dict[str, Any], name: str) -> str:
    value = form.get(name)
    return str(value)[:FIELD_CHARS] if isinstance(value, str) else ""


@router.post("/manage/{token}/own", response_class=HTMLResponse)
async def own_submit(token: str, request: Request, ctx: WebContext = Ctx) -> Response:
    """Add, change or remove one of the reader's own topics (the manage page's form)."""
    form = await request.form()
    if not csrf_ok(ctx.service.tokens, request, form.get(CSRF_FIELD)):
        return _stale_form(ctx)
    return await run_in_threadpool(_own_sync, ctx, request, token, dict(form))


def _own_sync(ctx: WebContext, request: Request, token: str, form: dict[str, Any]) -> Response:
    try:
        sub = _manage_subscriber(ctx, token)
    except TokenError as e:
        return token_problem(ctx, e, "manage")
    if sub.status not in (SubscriberStatus.ACTIVE, SubscriberStatus.PAUSED):
        return message(ctx, "You are not subscribed", "Subscribe again first.", 409)
    editor = own_editor(ctx)
    action = _field(form, "action")
    text, examples, ident = _field(form, "text"), _field(form, "examples"), _field(form, "id")
    try:
        if action == "add":
            editor.add(sub, text, examples)
            done = "added"
        elif action in ("edit", "remove") and ident.isdigit():
            if action == "edit":
                editor.edit(sub, int(ident), text, examples)
                done = "edited"
            elif editor.remove(sub, int(ident)):
                done = "removed"
            else:
                raise OwnTopicRefused("topic", "that topic is not one of yours (any more)")
        else:
            raise OwnTopicRefused("topic", "the form named nothing to do")
    except OwnTopicRefused as e:
        kept = {"action": action, "id": ident, "text": text, "examples": examples}
        return _manage_form(ctx, request, token, sub, own_error=e.reason, own_form=kept, status=400)
    return RedirectResponse(f"/manage/{token}?own={done}#own", status_code=303)


# ---------------------------------------------------------------------------- mail confirmation


@router.get("/own-topic/{token}", response_class=HTMLResponse)
def own_confirm_page(token: str, request: Request, ctx: WebContext = Ctx) -> HTMLResponse:
    """What an email command asked for, with one button that does it."""
    try:
        command, sub = read_own_token(ctx.service, token)
    except TokenError as e:
        return token_problem(ctx, e, "own topic")
    if sub is None:
        return message(ctx, "Not subscribed", "This address does not get the digest.", 410)
    return _confirm_form(ctx, request, token, command)


def _confirm_form(
    ctx: WebContext, request: Request, token: str, command: OwnTopicCommand, status: int = 200
) -> HTMLResponse:
    return form_page(
        ctx,
        request,
        "own_topic_confirm.html",
        status,
        token=token,
        command=command,
    )


@router.post("/own-topic/{token}", response_class=HTMLResponse)
async def own_confirm_submit(token: str, request: Request, ctx: WebContext = Ctx) -> Response:
    """Carry out the email command the link names (once: a second press changes nothing)."""
    form = await request.form()
    if not csrf_ok(ctx.service.tokens, request, form.get(CSRF_FIELD)):
        return _stale_form(ctx)
    return await run_in_threadpool(_confirm_sync, ctx, token)


def _confirm_sync(ctx: WebContext, token: str) -> HTMLResponse:
    try:
        command, sub = read_own_token(ctx.service, token)
    except TokenError as e:
        return token_problem(ctx, e, "own topic")
    if sub is None:
        return message(ctx, "Not subscribed", "This address does not get the digest.", 410)
    editor = own_editor(ctx)
    try:
        said = command.apply(editor, sub)
    except OwnTopicRefused as e:
        return message(ctx, "Not changed", e.reason, 400)
    links = ctx.service.links(sub)
    return message(ctx, "Done", said, 200, manage_link=links.manage)
