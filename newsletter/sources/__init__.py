"""Sources: one module per kind. Each turns downloaded bytes into :class:`PaperData`.

Parsers are pure (bytes in, papers out); :mod:`newsletter.sources.fetch` does all network I/O.

May import: core, config, store.
"""

from __future__ import annotations

from collections.abc import Callable

from newsletter.sources import arxiv_api, arxiv_rss, feed, hf_daily
from newsletter.sources.base import ParseResult, Skipped

Parser = Callable[[bytes, str], ParseResult]

PARSERS: dict[str, Parser] = {
    "arxiv_rss": arxiv_rss.parse,
    "arxiv_api": arxiv_api.parse,
    "hf_daily": hf_daily.parse,
    "feed": feed.parse,
}

__all__ = ["PARSERS", "ParseResult", "Parser", "Skipped"]
