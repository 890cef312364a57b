"""Operations endpoints: /metrics (Prometheus text format) and the admin send trigger, both
behind the admin token (``web.admin_token_env``).

Guessing the token is slowed (issue 42): wrong tokens are counted in the database, for every
web process, per client address (IPv6: its /64) and from everyone together
(``web.rate_limit.admin_failures_per_ip``, ``admin_failures``, ``admin_failures_window``). A
client over its allowance is answered 429 with ``Retry-After`` and its token is not compared
(were it compared, a guesser would keep guessing through the 429s: the one right guess would
pass). The right token is never counted, and a client that sent no wrong token is never slowed
by the others: past the overall cap each client is let one failure per window, not none.
"""

from __future__ import annotations

import hmac
import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client.registry import CollectorRegistry
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.concurrency import run_in_threadpool

from newsletter.config import admin_token_problem
from newsletter.subscribe.rules import client_network
from newsletter.web.context import WebContext
from newsletter.web.limits import validation_problem
from newsletter.web.metrics import CONTENT_TYPE, exposition
from newsletter.web.security import client_address

if TYPE_CHECKING:
    from newsletter.edition import SendRequest

log = logging.getLogger(__name__)

router = APIRouter()


def _ctx(request: Request) -> WebContext:
    ctx: WebContext = request.app.state.web
    return ctx


def _require_admin(ctx: WebContext, request: Request, what: str) -> None:
    """Refuse the request unless it carries the admin token: 404 when no token is set (the
    route is off), 503 when the token set is weak (``serve`` refuses to start with one; it is
    never compared), 429 when this client sent too many wrong tokens (see the module's
    docstring), 401 when the ``Authorization: Bearer`` header is missing or wrong.

    Reads and writes the database: call it from a worker thread, not the event loop."""
    web = ctx.config.settings.web
    expected = web.admin_token()
    if expected is None:
        raise HTTPException(404, f"{what} (set the admin token variable)")
    problem = admin_token_problem(expected)
    if problem is not None:
        log.error("the admin token in $%s is refused: %s", web.admin_token_env, problem)
        raise HTTPException(503, f"the admin token in ${web.admin_token_env} is refused: {problem}")
    rl = web.rate_limit
    window = timedelta(seconds=rl.admin_failures_window)
    now = ctx.now()
    client = client_network(client_address(request))
    slowed = HTTPException(
        429,
        "too many wrong admin tokens from your network; try again later",
        headers={"Retry-After": str(rl.admin_failures_window)},
    )
    # Count this request as a failure before comparing (atomically, so guesses sent at once
    # cannot all pass the check), and take the count back if the token is right.
    mine = ctx.store.take_rate(
        f"admin:{client}"[:120], now, window=window, limit=rl.admin_failures_per_ip
    )
    if mine is None:
        raise slowed
    everyone = ctx.store.take_rate("admin:all", now, window=window, limit=rl.admin_failures)
    if everyone is None and mine[1] > 1:  # past the overall cap: one failure per client
        log.warning("admin token: over web.rate_limit.admin_failures; %s slowed", client)
        raise slowed
    given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    if hmac.compare_digest(given.encode(), expected.encode()):
        ctx.store.drop_rate_event(mine[0])
        if everyone is not None:
            ctx.store.drop_rate_event(everyone[0])
        return
    log.warning("admin token: a wrong token from %s", client)
    raise HTTPException(401, "a valid 'Authorization: Bearer <token>' header is required")


@router.get("/metrics", include_in_schema=False, response_model=None)
def metrics(request: Request) -> Response:
    """Prometheus metrics: subscribers, editions, runs and deliverability; with the admin token
    only (they tell subscriber counts and failing sources). A scraper on the same machine can
    use ``web.metrics_listen`` instead (:mod:`newsletter.web.metrics`)."""
    ctx = _ctx(request)
    _require_admin(
        ctx,
        request,
        "/metrics needs the admin token, which is not set; or use web.metrics_listen",
    )
    reg: CollectorRegistry = request.app.state.metrics
    return Response(exposition(reg), media_type=CONTENT_TYPE)


class SendBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    to: str | None = None
    topic: str | None = None
    dry_run: bool = False
    force: bool = False


@router.post("/admin/send", include_in_schema=False, response_model=None)
async def admin_send(request: Request, response: Response) -> dict[str, Any] | JSONResponse:
    """Trigger `send --now` (with the same options) from outside; Bearer token from the env.

    The token is checked before the body is parsed. Like `newsletter send`, a whole-list send
    (no ``to``, not ``dry_run``) with ``workers:`` configured queues the edition's chunks for
    the workers and answers 202 at once."""
    ctx = _ctx(request)
    await run_in_threadpool(_require_admin, ctx, request, "the admin endpoint is disabled")
    raw = await request.body()
    if not raw.strip():
        return validation_problem([{"loc": ("body",), "msg": "a JSON object is required"}])
    try:
        body = SendBody.model_validate_json(raw)
    except ValidationError as e:
        return validation_problem(list(e.errors()))
    return await run_in_threadpool(_admin_send, ctx, request, response, body)


def _admin_send(
    ctx: WebContext, request: Request, response: Response, body: SendBody
) -> dict[str, Any]:
    from newsletter.edition import BadSendRequest, SendRequest, send

    try:
        send_request = SendRequest(
            kind="admin",
            to=body.to,
            topic=body.topic,
            force=body.force,
            dry_run=body.dry_run,
            wait=False,  # the workers send; GET /metrics and `newsletter status` follow them
        ).validated(ctx.config)
    except BadSendRequest as e:
        raise HTTPException(422, str(e)) from e
    jobs = getattr(request.app.state, "jobs", None)
    lock = jobs.lock if jobs is not None else None
    if lock is not None and not lock.acquire(timeout=60):
        raise HTTPException(409, "a scheduled run is in progress; try again shortly")
    try:
        if send_request.by_workers(ctx.config):  # locked only while queuing, not while sending
            response.status_code = 202
            return _enqueue(ctx, send_request)
        report = send(ctx.services, send_request, now=ctx.now()).report
    finally:
        if lock is not None:
            lock.release()
    assert report is not None  # sent in this process
    out: dict[str, Any] = report.as_dict()
    out["relay_error"] = report.relay_error
    out["errors"] = report.errors
    if body.dry_run:
        out["would_send"] = [{"to": a, "subject": r.subject} for a, r in report.rendered]
    return out


def _enqueue(ctx: WebContext, send_request: SendRequest) -> dict[str, Any]:
    """Queue the edition's chunks for the workers (as `send --now --no-wait`); what was queued."""
    from newsletter.edition import send
    from newsletter.edition.workers import BrokerError
    from newsletter.errors import NotInstalled

    workers = ctx.config.settings.workers
    assert workers is not None
    topic = send_request.topic
    try:
        enqueued = send(ctx.services, send_request, now=ctx.now()).enqueued
        assert enqueued is not None  # a whole-list send with workers: queued
    except (BrokerError, NotInstalled) as e:  # the run is recorded as failed (or never began)
        raise HTTPException(
            503, f"{e}; then POST again (editions already sent are left out)"
        ) from e
    return {
        "status": "enqueued",
        "run_id": enqueued.run_id,
        "queue": workers.queue,
        "now": enqueued.now.isoformat(),
        "topic": topic,
        "chunks": len(enqueued.results),
        "subscribers": enqueued.subscribers,
        "already": enqueued.settled,
        "not_due": enqueued.not_due,
        "task_ids": [r.id for r in enqueued.results],
        "progress": (
            "the workers ('newsletter worker') send the queued editions; "
            "'newsletter status' shows today's editions by ledger state (sent, claimed, failed) "
            f"and this run ({enqueued.run_id}: kind admin, status enqueued); GET /metrics has "
            "newsletter_editions_today{status}"
        ),
    }
