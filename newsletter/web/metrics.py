"""Prometheus metrics over the store: subscribers, editions, runs, sources, deliverability.

Built with ``prometheus_client`` rather than written by hand, so the exposition format (escaping,
types, content type) is the library's. The numbers live in the database, not in this process
(the web app, ``newsletter send`` and the workers all write there), so each scrape reads them
through one custom collector (:class:`StoreCollector`) registered on a private
``CollectorRegistry``; nothing is put in the library's global registry.

Where they are served (never to the public by default, since they tell subscriber counts, run
results and failing sources' names):

* ``GET /metrics`` on the web app, with ``Authorization: Bearer <admin token>`` (the same token
  as ``POST /admin/send``; without that variable set the route answers 404);
* ``web.metrics_listen`` (e.g. ``127.0.0.1:9464``): a separate listener on a loopback address,
  without a token, started by ``newsletter serve`` (:func:`listener`).

Bounce events are counted only when verified (a valid VERP token, a provider's signed webhook,
or the Message-ID of the digest sent to that very address): an unverified report is stored in
the subscriber's history only, so the metrics move the same whether a forged report names a
subscriber or a stranger (docs/design.md, "Unverified bounce reports are kept for the
operator").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import generate_latest, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from newsletter.bounces import report as bounce_report
from newsletter.config import Config, loopback_listen
from newsletter.errors import NewsletterError, listen_error
from newsletter.models import EditionStatus, SubscriberStatus
from newsletter.store import Store

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The text format ``generate_latest`` writes, as every Prometheus version reads it."""

BOUNCE_KINDS = ("hard", "soft", "complaint", "unsubscribe")


class StoreCollector(Collector):
    """Reads the metrics from the store at each scrape (a ``prometheus_client`` collector)."""

    def __init__(self, config: Config, store: Store, now: Callable[[], datetime]) -> None:
        self.config = config
        self.store = store
        self.now = now

    def collect(self) -> Iterator[Metric]:
        """Every metric, as gauges (each is a current count or a last value, never a counter)."""
        from newsletter.runs.leases import count_interrupted

        now = self.now()
        snapshot = self.store.ops_snapshot(now.date(), self.config.settings.fetched_sources())
        yield from _snapshot_metrics(snapshot)
        interrupted = GaugeMetricFamily(
            "newsletter_runs_interrupted",
            "Runs still recorded as running whose process is gone (killed); the next run "
            "records them as interrupted.",
        )
        interrupted.add_metric([], count_interrupted(self.store, now))
        yield interrupted
        yield from _deliverability_metrics(self.store, now)


def _snapshot_metrics(snapshot: dict[str, Any]) -> Iterator[Metric]:
    subs = GaugeMetricFamily("newsletter_subscribers", "Subscribers by status.", labels=["status"])
    for status in SubscriberStatus:
        subs.add_metric([status.value], snapshot["subscribers"].get(status.value, 0))
    yield subs
    eds = GaugeMetricFamily(
        "newsletter_editions_today",
        "Today's editions (UTC date) by ledger status.",
        labels=["status"],
    )
    for st in EditionStatus:
        eds.add_metric([st.value], snapshot["editions_today"].get(st.value, 0))
    yield eds
    papers = GaugeMetricFamily("newsletter_papers", "Papers stored.")
    papers.add_metric([], snapshot["papers"])
    yield papers
    when = GaugeMetricFamily(
        "newsletter_last_run_timestamp_seconds",
        "When the last run of each kind finished.",
        labels=["kind"],
    )
    ok = GaugeMetricFamily(
        "newsletter_last_run_ok", "1 if the last run of each kind succeeded.", labels=["kind"]
    )
    duration = GaugeMetricFamily(
        "newsletter_last_run_duration_seconds",
        "Duration of the last run of each kind.",
        labels=["kind"],
    )
    for kind, run in sorted(snapshot["last_runs"].items()):
        at = run["finished"] or run["started"]
        when.add_metric([kind], round(at.timestamp()))
        ok.add_metric([kind], 1 if run["status"] == "ok" else 0)
        if run["duration"] is not None:
            duration.add_metric([kind], round(run["duration"], 3))
    yield from (when, ok, duration)
    failing = GaugeMetricFamily(
        "newsletter_source_consecutive_failures",
        "Failed fetches in a row, per failing source.",
        labels=["source"],
    )
    for source, failures, _ in snapshot["failing_sources"]:
        failing.add_metric([source], failures)
    yield failing


def _deliverability_metrics(store: Store, now: datetime) -> Iterator[Metric]:
    """Today's verified events by kind, and each recent edition's sent count and rates."""
    rates = store.edition_rates(now.date() - timedelta(days=bounce_report.RATE_DAYS))
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    today = store.events_per_day(midnight).get(now.date(), {})
    events = GaugeMetricFamily(
        "newsletter_bounce_events_today",
        "Verified bounce, complaint and unsubscribe events received today (UTC), by kind.",
        labels=["kind"],
    )
    for kind in BOUNCE_KINDS:
        events.add_metric([kind], today.get(kind, 0))
    yield events
    sent = GaugeMetricFamily(
        "newsletter_edition_sent", "Digests sent per recent edition date.", labels=["edition"]
    )
    hard = GaugeMetricFamily(
        "newsletter_edition_hard_bounce_rate",
        "Share of an edition's digests that hard-bounced.",
        labels=["edition"],
    )
    complaints = GaugeMetricFamily(
        "newsletter_edition_complaint_rate",
        "Share of an edition's digests reported as spam.",
        labels=["edition"],
    )
    for r in rates:
        label = [r.edition.isoformat()]
        sent.add_metric(label, r.sent)
        hard.add_metric(label, round(r.rate(r.hard), 6))
        complaints.add_metric(label, round(r.rate(r.complaints), 6))
    yield from (sent, hard, complaints)


def registry(config: Config, store: Store, now: Callable[[], datetime]) -> CollectorRegistry:
    """A private registry holding one :class:`StoreCollector` (not the library's global one)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(StoreCollector(config, store, now))
    return reg


def exposition(reg: CollectorRegistry) -> bytes:
    """The registry's metrics in the Prometheus text format (a scrape)."""
    return generate_latest(reg)


@dataclass(frozen=True, slots=True)
class Listen:
    """``web.metrics_listen`` split into its loopback host and port."""

    host: str
    port: int


class MetricsListener:
    """``with MetricsListener(config, store, listen):`` serves the metrics on ``listen`` (a
    ``prometheus_client`` HTTP server in its own thread) until the block ends."""

    def __init__(
        self, config: Config, store: Store, listen: Listen, now: Callable[[], datetime]
    ) -> None:
        self.listen = listen
        self.registry = registry(config, store, now)
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> MetricsListener:
        try:
            self._server, self._thread = start_http_server(
                self.listen.port, self.listen.host, registry=self.registry
            )
        except OSError as e:
            raise listen_error(
                e,
                self.listen.host,
                self.listen.port,
                port_key="web.metrics_listen",
                host_key="web.metrics_listen",
            ) from e
        if self.listen.port == 0:  # tests: the port the system chose
            self.listen = Listen(self.listen.host, int(self._server.server_address[1]))
        log.info("metrics on http://%s:%s/metrics", self.listen.host, self.listen.port)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def listener(config: Config, store: Store, now: Callable[[], datetime]) -> MetricsListener | None:
    """The ``web.metrics_listen`` listener, or ``None`` when it is not configured."""
    value = config.settings.web.metrics_listen
    if value is None:
        return None
    try:
        host, port = loopback_listen(value)
    except ValueError as e:  # the config validated it; a second line of defence
        raise NewsletterError(f"web.metrics_listen: {e}") from e
    return MetricsListener(config, store, Listen(host, port), now)
