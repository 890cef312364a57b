"""A sent digest as a web page: the edition rebuilt from the ledger, rendered as it was mailed."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import date

from markupsafe import escape

from newsletter.addresses import masked_address
from newsletter.config import Config
from newsletter.digest.render import DigestLinks, Renderer
from newsletter.edition.archive import sent_digest
from newsletter.semantic.vectors import VectorSource
from newsletter.store import Store

_BODY = re.compile(r"<body\b[^>]*>", re.IGNORECASE)

NOTE_STYLE = (
    "max-width:600px;margin:16px auto 0 auto;padding:10px 14px;border-radius:8px;"
    "background-color:#fff4d6;color:#5c3d00;font-family:-apple-system,BlinkMacSystemFont,"
    '"Segoe UI",Roboto,Arial,sans-serif;font-size:13px;line-height:19px;'
)


def render_sent_edition(
    config: Config,
    store: Store,
    renderer: Renderer,
    subscriber_id: int,
    edition_date: date,
    links: DigestLinks | None,
    *,
    vectors: VectorSource | None = None,
) -> str | None:
    """The HTML of a sent digest, rendered again as it was mailed; ``None`` when there is no
    such sent edition.

    The footer names the reader's address masked (``a…@example.org``): the page is opened by a
    year-long "view in browser" link, which travels with every forwarded copy of the digest.
    What the page cannot show as mailed (an edition sent before digests were recorded, a
    paper revised since) it says in a note above the digest.
    """
    sent = sent_digest(config, store, subscriber_id, edition_date, vectors=vectors)
    if sent is None:
        return None
    digest = sent.digest
    shown = replace(digest.subscriber, email=masked_address(digest.subscriber.email))
    html = renderer.render(
        replace(digest, subscriber=shown),
        links or DigestLinks(unsubscribe="", manage=""),
        grouped=sent.grouped,
    ).html
    note = sent.note
    if note is None:
        return html
    banner = f'<div role="note" class="archive-note" style="{NOTE_STYLE}">{escape(note)}</div>'
    body = _BODY.search(html)  # an operator's template may have no <body>: the note goes first
    at = body.end() if body else 0
    return html[:at] + banner + html[at:]
