"""Any RSS or Atom feed (a lab blog, a conference's accepted papers).

Items key on an arXiv id when they link one, else on a DOI, else on the normalized link.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urljoin, urlsplit

from newsletter.identity import arxiv_urls, paper_key, parse_arxiv_id
from newsletter.models import PaperData
from newsletter.sources.base import (
    ParseResult,
    Skipped,
    clean_text,
    parse_xml_feed,
    split_authors,
    struct_to_datetime,
)


def bozo_problem(parsed: Any, url: str, body: bytes = b"") -> tuple[str, ...]:
    """feedparser's bozo flag, never ignored: a readable description of what went wrong."""
    head = body[:512].lstrip().lower()
    if not body.strip() and not parsed.entries:
        return ("empty response (0 bytes of feed)",)
    if head.startswith((b"<!doctype html", b"<html")) and not parsed.entries:
        return ("got an HTML page instead of a feed (a login, challenge or error page?)",)
    if not parsed.get("bozo"):
        if not parsed.get("version") and not parsed.entries:
            return ("empty response or not a feed",)
        return ()
    exc = parsed.get("bozo_exception")
    name = type(exc).__name__ if exc is not None else "unknown"
    if name == "CharacterEncodingOverride":
        return (f"declared encoding was wrong; parsed as {parsed.get('encoding', '?')}",)
    line = getattr(exc, "getLineNumber", lambda: None)()
    where = f" at line {line}" if line else ""
    kept = f"; kept the {len(parsed.entries)} entries that parsed" if parsed.entries else ""
    return (f"malformed feed{where}: {exc}{kept}",)


def parse(body: bytes, url: str) -> ParseResult:
    """The papers in an RSS or Atom feed, keyed by arXiv id, DOI or link."""
    parsed = parse_xml_feed(body, generic=True)
    # Relative links (no xml:base) resolve against the feed's own link, else where it came from.
    base = parsed.feed.get("link") or (url if url.startswith(("http://", "https://")) else "")
    papers: list[PaperData] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()
    for entry in parsed.entries:
        title = clean_text(entry.get("title"))
        link = entry.get("link", "") or ""
        if link and base and not urlsplit(link).scheme:
            link = urljoin(base, link)
        guid = entry.get("id", "") or ""
        key = paper_key(
            link=link, ids=(guid,), text=" ".join(x.get("href", "") for x in entry.get("links", []))
        )
        if key is None:
            skipped.append(Skipped(title or "(untitled entry)", "no link, guid or identifier"))
            continue
        if key in seen:
            skipped.append(
                Skipped(title or key, f"duplicate of an earlier entry in the same feed ({key})")
            )
            continue
        seen.add(key)
        found = parse_arxiv_id(key) if not key.startswith(("doi:", "url:")) else None
        abs_url, pdf_url = arxiv_urls(key) if found else (link, None)
        if key.startswith("url:"):
            abs_url = key[4:]  # the link without its tracking parameters
        authors: tuple[str, ...] = tuple(
            clean_text(a.get("name")) for a in entry.get("authors", []) if a.get("name")
        )
        if len(authors) == 1 and "," in authors[0]:
            authors = split_authors(authors[0])
        papers.append(
            PaperData(
                key=key,
                title=title or key,
                abstract=clean_text(_strip_tags(entry.get("summary", ""))),
                authors=authors,
                categories=tuple(t["term"] for t in entry.get("tags", []) if t.get("term")),
                url=abs_url or link,
                pdf_url=pdf_url,
                version=found[1] if found else None,
                published=struct_to_datetime(
                    entry.get("published_parsed") or entry.get("updated_parsed")
                ),
            )
        )
    return ParseResult(
        tuple(papers), tuple(skipped), bozo_problem(parsed, url, body), len(parsed.entries)
    )


def _strip_tags(html: str) -> str:
    import re
    from html import unescape

    return unescape(re.sub(r"<[^>]+>", " ", html or ""))
