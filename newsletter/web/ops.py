"""Operations endpoints: /metrics (Prometheus text format) and the admin send trigger."""

from __future__ import annotations

import hmac
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.concurrency import run_in_threadpool

from newsletter.bounces import report as bounce_report
from newsletter.models import EditionStatus, SubscriberStatus
from newsletter.store import Store
from newsletter.web.context import WebContext
from newsletter.web.limits import validation_problem

if TYPE_CHECKING:
    from newsletter.edition import SendRequest

router = APIRouter()


def _ctx(request: Request) -> WebContext:
    ctx: WebContext = request.app.state.web
    return ctx


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def prometheus_text(snapshot: dict[str, Any]) -> str:
    """The counts of :meth:`Store.ops_snapshot` in the Prometheus text format."""
    lines = [
        "# HELP newsletter_subscribers Subscribers by status.",
        "# TYPE newsletter_subscribers gauge",
    ]
    subs = snapshot["subscribers"]
    for status in SubscriberStatus:
        lines.append(
            f'newsletter_subscribers{{status="{status.value}"}} {subs.get(status.value, 0)}'
        )
    lines += [
        "# HELP newsletter_editions_today Today's editions (UTC date) by ledger status.",
        "# TYPE newsletter_editions_today gauge",
    ]
    eds = snapshot["editions_today"]
    for st in EditionStatus:
        lines.append(f'newsletter_editions_today{{status="{st.value}"}} {eds.get(st.value, 0)}')
    lines += [
        "# HELP newsletter_papers Papers stored.",
        "# TYPE newsletter_papers gauge",
        f"newsletter_papers {snapshot['papers']}",
        "# HELP newsletter_last_run_timestamp_seconds When the last run of each kind finished.",
        "# TYPE newsletter_last_run_timestamp_seconds gauge",
    ]
    ok_lines = [
        "# HELP newsletter_last_run_ok 1 if the last run of each kind succeeded.",
        "# TYPE newsletter_last_run_ok gauge",
    ]
    dur_lines = [
        "# HELP newsletter_last_run_duration_seconds Duration of the last run of each kind.",
        "# TYPE newsletter_last_run_duration_seconds gauge",
    ]
    for kind, run in sorted(snapshot["last_runs"].items()):
        when = run["finished"] or run["started"]
        lines.append(
            f'newsletter_last_run_timestamp_seconds{{kind="{_label(kind)}"}} {when.timestamp():.0f}'
        )
        ok_lines.append(
            f'newsletter_last_run_ok{{kind="{_label(kind)}"}} {1 if run["status"] == "ok" else 0}'
        )
        if run["duration"] is not None:
            dur_lines.append(
                f'newsletter_last_run_duration_seconds{{kind="{_label(kind)}"}} {run["duration"]:.3f}'
            )
    lines += ok_lines + dur_lines
    if "interrupted_runs" in snapshot:
        lines += [
            "# HELP newsletter_runs_interrupted Runs still recorded as running whose process is "
            "gone (killed); the next run records them as interrupted.",
            "# TYPE newsletter_runs_interrupted gauge",
            f"newsletter_runs_interrupted {snapshot['interrupted_runs']}",
        ]
    lines += [
        "# HELP newsletter_source_consecutive_failures Failed fetches in a row, per failing source.",
        "# TYPE newsletter_source_consecutive_failures gauge",
    ]
    for source, failures, _ in snapshot["failing_sources"]:
        lines.append(
            f'newsletter_source_consecutive_failures{{source="{_label(source)}"}} {failures}'
        )
    return "\n".join(lines) + "\n"


@router.get("/metrics", include_in_schema=False, response_class=PlainTextResponse)
def metrics(request: Request) -> PlainTextResponse:
    """Prometheus metrics: subscribers, editions, runs and deliverability."""
    ctx = _ctx(request)
    from newsletter.runs import count_interrupted

    snapshot = ctx.store.ops_snapshot(ctx.now().date(), ctx.config.settings.fetched_sources())
    snapshot["interrupted_runs"] = count_interrupted(ctx.store, ctx.now())
    text = prometheus_text(snapshot) + deliverability_text(ctx.store, ctx.now())
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


def deliverability_text(store: Store, now: datetime) -> str:
    """Bounce and complaint metrics: today's events by kind, recent editions' rates."""
    rates = store.edition_rates(now.date() - timedelta(days=bounce_report.RATE_DAYS))
    today = store.events_per_day(now.replace(hour=0, minute=0, second=0, microsecond=0))
    lines = bounce_report.prometheus_lines(rates, today.get(now.date(), {}))
    return "\n".join(lines) + "\n"


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
    expected = ctx.config.settings.web.admin_token()
    if expected is None:
        raise HTTPException(404, "the admin endpoint is disabled (set the admin token variable)")
    given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise HTTPException(401, "a valid 'Authorization: Bearer <token>' header is required")
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
