"""The real papers of the feed fixtures, parsed with the project's parsers and merged by id.

Upvotes and comments come from the Hugging Face evening snapshot; categories and sources are the
union over every listing that carried a paper (cross-lists count).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from newsletter.models import Paper, PaperData
from newsletter.sources import arxiv_rss, hf_daily

FEEDS = Path(__file__).resolve().parents[2] / "fixtures" / "feeds"
NOW = datetime(2026, 11, 17, 20, 0, tzinfo=UTC)
FIRST_SEEN = datetime(2026, 11, 17, 6, 0, tzinfo=UTC)

SOURCES = (
    ("arxiv-cs-dc", arxiv_rss.parse, "arxiv-rss-cs.DC-2026-11-16.xml"),
    ("arxiv-cs-lg", arxiv_rss.parse, "arxiv-rss-cs.LG-2026-11-16.xml"),
    ("arxiv-cs-dc", arxiv_rss.parse, "arxiv-rss-cs.DC-2026-11-17.xml"),
    ("hf-daily", hf_daily.parse, "hf-daily-papers-2026-11-17-evening.json"),
)


def load_papers(*, keep_upvotes: bool = True) -> list[Paper]:
    merged: dict[str, tuple[PaperData, list[str]]] = {}
    for source, parse, name in SOURCES:
        path = FEEDS / name
        for d in parse(path.read_bytes(), path.as_uri()).papers:
            if d.key not in merged:
                merged[d.key] = (d, [source])
                continue
            old, sources = merged[d.key]
            merged[d.key] = (
                replace(
                    old,
                    title=old.title or d.title,
                    abstract=old.abstract or d.abstract,
                    categories=tuple(dict.fromkeys((*old.categories, *d.categories))),
                    upvotes=d.upvotes if d.upvotes is not None else old.upvotes,
                    comments=d.comments if d.comments is not None else old.comments,
                ),
                [*sources, source] if source not in sources else sources,
            )
    papers = []
    for i, key in enumerate(sorted(merged), start=1):
        d, sources = merged[key]
        papers.append(
            Paper(
                id=i,
                key=d.key,
                title=d.title,
                abstract=d.abstract,
                authors=d.authors,
                categories=d.categories,
                url=d.url,
                pdf_url=d.pdf_url,
                code_url=d.code_url,
                version=d.version,
                published=d.published,
                first_seen=FIRST_SEEN,
                updated=FIRST_SEEN,
                sources=tuple(sources),
                upvotes=d.upvotes if keep_upvotes else None,
                comments=d.comments if keep_upvotes else None,
            )
        )
    return papers
