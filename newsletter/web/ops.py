"""Operations endpoints: /metrics (Prometheus text format) and the admin send trigger, both
behind the admin token (``web.admin_token_env``)."""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client.registry import CollectorRegistry
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.concurrency import run_in_threadpool

from newsletter.web.context import WebContext
from newsletter.web.limits import validation_problem
from newsletter.web.metrics import CONTENT_TYPE, exposition

if TYPE_CHECKING:
    from newsletter.edition import SendRequest

router = APIRouter()


def _ctx(request: Request) -> WebContext:
    ctx: WebContext = request.app.state.web
    return ctx


def _require_admin(ctx: WebContext, request: Request, what: str) -> None:
    """Refuse the request unless it carries the admin token: 404 when no token is set (the
    route is off), 401 when the ``Authorization: Bearer`` header is missing or wrong."""
    expected = ctx.config.settings.web.admin_token()
    if expected is None:
        raise HTTPException(404, f"{what} (set the admin token variable)")
    given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    if not hmac.compare_digest(given.encode(), expected.encode()):
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
    _require_admin(ctx, request, "the admin endpoint is disabled")
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

    workers = ctx.config.settings.workers
    assert workers is not None
    topic = send_request.topic
    try:
        enqueued = send(ctx.services, send_request, now=ctx.now()).enqueued
        assert enqueued is not None  # a whole-list send with workers: queued
    except BrokerError as e:  # the run is recorded as failed
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
