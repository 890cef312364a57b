"""Fetch → parse → decide → write, one source at a time; one bad source never stops the rest.

:func:`decide` is pure: given what a source announced and what is stored, it says what to
insert and what to update. Only :func:`run_fetch` touches the network and the store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from newsletter.config import Config, SourceSettings
from newsletter.identity import content_hash
from newsletter.models import Paper, PaperData, PaperWrite, SourceState, capped
from newsletter.sources import PARSERS, arxiv_api
from newsletter.sources.base import ParseResult, Skipped, clean_result
from newsletter.sources.fetch import Fetcher, FetchError
from newsletter.store import Store
from newsletter.text import strip_controls

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SourceReport:
    """What fetching one source did: entries read, papers stored by kind, what was skipped
    and the errors met."""

    source: str
    url: str
    entries: int = 0
    new: int = 0
    """Papers announced as new: the ones the next digests can carry."""
    updated: int = 0
    unchanged: int = 0
    unannounced: int = 0
    """Papers stored but not announced as new: revisions of papers never seen here (arXiv
    ``replace``), and backfill from the arXiv API. Kept for merging and search."""
    merged: int = 0
    """Entries folded into another entry for the same paper in the same answer."""
    skipped: tuple[Skipped, ...] = ()
    errors: tuple[str, ...] = ()
    not_modified: bool = False
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether the source was fetched and read without errors."""
        return not self.errors

    @property
    def stored(self) -> int:
        """Papers of this answer now in the database (new, updated, unchanged or unannounced)."""
        return self.new + self.updated + self.unchanged + self.unannounced

    @property
    def status(self) -> str:
        """How the fetch went: ``ok``, ``partial`` (errors, some papers stored), ``failed``, or
        ``not modified (304)``."""
        if self.not_modified:
            return "not modified (304)"
        if not self.errors:
            return "ok"
        return "partial" if self.stored else "failed"

    def as_json(self) -> dict[str, Any]:
        """The source's report as ``newsletter fetch --json`` prints it."""
        return {
            "source": self.source,
            "url": self.url,
            "status": self.status,
            "entries": self.entries,
            "new": self.new,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "unannounced": self.unannounced,
            "merged": self.merged,
            "not_modified": self.not_modified,
            "skipped": [{"what": k.what, "reason": k.reason} for k in self.skipped],
            "errors": list(self.errors),
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True, slots=True)
class FetchReport:
    """What one fetch did, source by source, with the totals."""

    sources: tuple[SourceReport, ...] = field(default=())
    embedded: int = 0
    """Papers given a vector for semantic ranking after the fetch (0 when it is off)."""
    matching: str = ""
    """One line: whether ranking fuses meaning with keywords, or why it is lexical."""

    @property
    def new(self) -> int:
        """Papers stored for the first time, over all sources."""
        return sum(s.new for s in self.sources)

    @property
    def updated(self) -> int:
        """Stored papers a source changed (a new version or better text), over all sources."""
        return sum(s.updated for s in self.sources)

    @property
    def unannounced(self) -> int:
        """Papers stored but not announced as new, over all sources."""
        return sum(s.unannounced for s in self.sources)

    @property
    def entries(self) -> int:
        """Entries the sources listed, over all sources."""
        return sum(s.entries for s in self.sources)

    @property
    def skipped(self) -> int:
        """Entries left out as unusable, over all sources."""
        return sum(len(s.skipped) for s in self.sources)

    @property
    def failed(self) -> tuple[SourceReport, ...]:
        """The sources that reported errors."""
        return tuple(s for s in self.sources if not s.ok)

    def as_json(self) -> dict[str, Any]:
        """The report as ``newsletter fetch --json`` prints it: totals, then each source."""
        return {
            "entries": self.entries,
            "new": self.new,
            "updated": self.updated,
            "unannounced": self.unannounced,
            "skipped": self.skipped,
            "failed_sources": [s.source for s in self.failed],
            "embedded": self.embedded,
            "matching": self.matching,
            "sources": [s.as_json() for s in self.sources],
        }


def _merge(old: Paper, new: PaperData) -> PaperData:
    """The stored paper updated with what a source now says about it."""
    newer = new.version is not None and (old.version is None or new.version > old.version)
    same_or_newer = new.version is not None and (old.version is None or new.version >= old.version)
    text_from_new = newer or (
        same_or_newer and new.announce_type is not None and new.announce_type.is_update
    )
    return PaperData(
        key=old.key,
        title=new.title if (text_from_new or not old.title) and new.title else old.title,
        abstract=new.abstract
        if (text_from_new or not old.abstract) and new.abstract
        else old.abstract,
        authors=new.authors if (text_from_new or not old.authors) and new.authors else old.authors,
        categories=tuple(dict.fromkeys((*old.categories, *new.categories))),
        url=old.url or new.url,
        pdf_url=old.pdf_url or new.pdf_url,
        code_url=old.code_url or new.code_url,
        version=max(v for v in (old.version, new.version, 0) if v is not None) or None,
        announce_type=new.announce_type,
        published=old.published or new.published,
        upvotes=new.upvotes if new.upvotes is not None else old.upvotes,
        comments=new.comments if new.comments is not None else old.comments,
        code_stars=new.code_stars if new.code_stars is not None else old.code_stars,
    )


def _fold(first: PaperData, second: PaperData) -> PaperData:
    """Two entries for one paper within the same batch: one record."""
    as_paper = Paper(
        id=0,
        key=first.key,
        title=first.title,
        abstract=first.abstract,
        authors=first.authors,
        categories=first.categories,
        url=first.url,
        pdf_url=first.pdf_url,
        code_url=first.code_url,
        version=first.version,
        published=first.published,
        first_seen=datetime.min,
        updated=datetime.min,
        sources=(),
        upvotes=first.upvotes,
        comments=first.comments,
        code_stars=first.code_stars,
    )
    return replace(
        _merge(as_paper, second), announce_type=first.announce_type or second.announce_type
    )


def decide(
    incoming: Sequence[PaperData],
    existing: Mapping[str, Paper],
    *,
    announces_new: bool = True,
    source: str | None = None,
) -> list[PaperWrite]:
    """What to write for a batch of announced papers. Pure: no I/O, no clock.

    ``source`` names who announced the batch: a stored paper not yet linked to it gets a link.
    """
    batch: dict[str, PaperData] = {}
    for d in incoming:
        batch[d.key] = _fold(batch[d.key], d) if d.key in batch else d
    writes: list[PaperWrite] = []
    for key, d in batch.items():
        old = existing.get(key)
        if old is None:
            announced = announces_new and not (
                d.announce_type is not None and d.announce_type.is_update
            )
            signals = d.upvotes is not None or d.code_stars is not None
            writes.append(PaperWrite(d, None, True, signals, announced))
            continue
        merged = _merge(old, d)
        meta = content_hash(merged) != content_hash(old)
        signals = (merged.upvotes, merged.comments, merged.code_stars) != (
            old.upvotes,
            old.comments,
            old.code_stars,
        )
        new_link = source is not None and source not in old.sources
        promote = (
            not old.announced
            and announces_new
            and not (d.announce_type is not None and d.announce_type.is_update)
        )
        writes.append(PaperWrite(merged, old.id, meta, signals, new_link=new_link, promote=promote))
    return writes


ProgressFn = Callable[[SourceSettings, SourceReport | None], None]
"""Called with ``None`` when a source starts, then with its report when it is done."""


def fetch_source(
    config: Config, source: SourceSettings, store: Store, fetcher: Fetcher, now: datetime
) -> SourceReport:
    """Fetch, parse and store one source. Never raises for a source's own trouble."""
    started = time.perf_counter()
    location = config.resolve(source.url)
    state = store.source_state(source.name)
    if source.kind == "arxiv_api" and location.startswith(("http://", "https://")):
        report, etag, last_modified = _fetch_pages(source, location, store, fetcher, now)
    else:
        report, etag, last_modified = _fetch_one(source, location, state, store, fetcher, now)
    # Errors quote servers and feeds: no escape sequence reaches the logs, the store or a terminal.
    errors = tuple(map(strip_controls, report.errors))
    report = replace(report, errors=errors, seconds=time.perf_counter() - started)
    if report.not_modified:
        store.save_source_state(
            replace(
                state, last_fetch=now, last_success=now, last_error=None, consecutive_failures=0
            )
        )
    elif report.errors:
        log.warning("source %s (%s): %s", source.name, location, "; ".join(report.errors))
        stored = report.stored
        _save_failure(store, state, now, "; ".join(report.errors), count=stored or None)
    else:
        stored = report.stored
        store.save_source_state(
            SourceState(source.name, etag, last_modified, now, now, None, stored, 0)
        )
    return report


def _fetch_one(
    source: SourceSettings,
    location: str,
    state: SourceState,
    store: Store,
    fetcher: Fetcher,
    now: datetime,
) -> tuple[SourceReport, str | None, str | None]:
    report = SourceReport(source.name, location)
    try:
        got = fetcher.fetch(
            location,
            etag=state.etag,
            last_modified=state.last_modified,
            allow_private=source.allow_private,
            delay=source.page_delay,
        )
    except FetchError as e:
        return replace(report, errors=(str(e),)), state.etag, state.last_modified
    if got.not_modified:
        return replace(report, not_modified=True), state.etag, state.last_modified
    assert got.body is not None
    parsed = PARSERS[source.kind](got.body, location)
    report = _store_page(report, source, parsed, store, now)
    if parsed.problems:
        # Keep what parsed, but fetch the whole feed again next time.
        return report, None, None
    return report, got.etag, got.last_modified


def _fetch_pages(
    source: SourceSettings, base: str, store: Store, fetcher: Fetcher, now: datetime
) -> tuple[SourceReport, None, None]:
    """The arXiv API: one page per request, ``page_delay`` apart, each page stored as it comes."""
    report = SourceReport(source.name, base)
    query = arxiv_api.search_query(
        source.query, source.categories, source.date_from, source.date_to
    )
    if query is None and not arxiv_api.has_query(base):
        return (
            replace(
                report,
                errors=("nothing to ask the arXiv API: set query, categories or date_from",),
            ),
            None,
            None,
        )
    start = 0
    requests = 0
    empty_retried = False
    while requests < source.max_pages:
        url = arxiv_api.page_url(base, query, start, source.page_size)
        requests += 1
        try:
            got = fetcher.fetch(url, allow_private=source.allow_private, delay=source.page_delay)
        except FetchError as e:
            return replace(report, errors=(*report.errors, f"page at {start}: {e}")), None, None
        assert got.body is not None
        parsed = arxiv_api.parse(got.body, url)
        if (
            parsed.entries == 0
            and not parsed.problems
            and parsed.total is not None
            and start < parsed.total
        ):
            # The API sometimes answers a page inside the results with nothing: ask once more.
            if not empty_retried:
                empty_retried = True
                continue
            problem = (
                f"the arXiv API answered an empty page at {start} of {parsed.total} results "
                "twice; stopped there (the next fetch continues from the start)"
            )
            return replace(report, errors=(*report.errors, problem)), None, None
        empty_retried = False
        report = _store_page(report, source, parsed, store, now)
        log.info(
            "source %s: page at %d: %d entries (%d of %s so far)",
            source.name,
            start,
            parsed.entries,
            report.entries,
            parsed.total if parsed.total is not None else "?",
        )
        if parsed.problems or parsed.entries == 0:
            break
        start += parsed.entries
        if parsed.total is not None and start >= parsed.total:
            break
    return report, None, None


def _store_page(
    report: SourceReport, source: SourceSettings, parsed: ParseResult, store: Store, now: datetime
) -> SourceReport:
    """Decide and write one parsed page; add its counts to the report."""
    parsed = clean_result(parsed)  # feed text is normalised here, before anything uses it
    parsed = replace(parsed, papers=tuple(_capped(source.name, p) for p in parsed.papers))
    for s in parsed.skipped:
        log.info("source %s: skipped %s: %s", source.name, s.what, s.reason)
    existing = store.papers_by_keys(p.key for p in parsed.papers)
    writes = decide(
        parsed.papers, existing, announces_new=source.kind != "arxiv_api", source=source.name
    )
    store.write_papers(source.name, writes, now)
    inserted = sum(1 for w in writes if w.paper_id is None)
    unannounced = sum(1 for w in writes if w.paper_id is None and not w.announced)
    promoted = sum(1 for w in writes if w.paper_id is not None and w.promote)
    new = inserted - unannounced + promoted  # a stored backfill that a listing now announces
    updated = sum(
        1
        for w in writes
        if w.paper_id is not None and not w.promote and (w.metadata_changed or w.signals_changed)
    )
    merged = len(parsed.papers) - len(writes)
    if merged:
        log.info(
            "source %s: %d entries merged with another entry for the same paper",
            source.name,
            merged,
        )
    return replace(
        report,
        entries=report.entries + parsed.entries,
        new=report.new + new,
        updated=report.updated + updated,
        unannounced=report.unannounced + unannounced,
        unchanged=report.unchanged + len(writes) - new - updated - unannounced,
        merged=report.merged + merged,
        skipped=(*report.skipped, *parsed.skipped),
        errors=(*report.errors, *parsed.problems),
    )


def _capped(source: str, paper: PaperData) -> PaperData:
    """``paper`` within the caps on stored text (:func:`newsletter.models.capped`), with one
    log line per field it cut, naming the source and the paper."""
    paper, notes = capped(paper)
    for note in notes:
        log.warning("source %s: paper %.200s: %s", source, paper.key, note)
    return paper


def _save_failure(
    store: Store, state: SourceState, now: datetime, error: str, count: int | None = None
) -> None:
    store.save_source_state(
        replace(
            state,
            last_fetch=now,
            last_error=error,
            last_count=count if count is not None else state.last_count,
            consecutive_failures=state.consecutive_failures + 1,
        )
    )


def run_fetch(
    config: Config,
    store: Store,
    now: datetime,
    *,
    fetcher: Fetcher | None = None,
    only: Sequence[str] = (),
    progress: ProgressFn | None = None,
) -> FetchReport:
    """Fetch every enabled source (or those named in ``only``), isolating failures per source."""
    own = fetcher is None
    fetcher = fetcher or Fetcher.from_settings(
        config.settings.fetch, contact=config.settings.sender.contact
    )
    reports: list[SourceReport] = []
    try:
        for source in config.settings.sources:
            if not source.enabled or (only and source.name not in only):
                continue
            if progress is not None:
                progress(source, None)
            try:
                report = fetch_source(config, source, store, fetcher, now)
            except Exception as e:  # one source's unexpected failure must not stop the others
                log.exception("source %s failed unexpectedly", source.name)
                report = SourceReport(
                    source.name,
                    source.url,
                    errors=(strip_controls(f"unexpected error: {type(e).__name__}: {e}"),),
                )
            reports.append(report)
            if progress is not None:
                progress(source, report)
    finally:
        if own:
            fetcher.close()
    return FetchReport(tuple(reports))
