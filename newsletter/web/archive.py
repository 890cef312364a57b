"""A sent digest as a web page: the edition rebuilt from the ledger, rendered as it was mailed."""

from __future__ import annotations

from dataclasses import replace
from datetime import date

from newsletter.addresses import masked_address
from newsletter.config import Config
from newsletter.edition.archive import sent_digest
from newsletter.render import DigestLinks, Renderer
from newsletter.semantic.vectors import VectorSource
from newsletter.store import Store


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
    """The HTML of a sent digest, re-rendered; ``None`` when there is no such sent edition.

    The footer names the reader's address masked (``a…@example.org``): the page is opened by a
    year-long "view in browser" link, which travels with every forwarded copy of the digest.
    """
    digest = sent_digest(config, store, subscriber_id, edition_date, vectors=vectors)
    if digest is None:
        return None
    shown = replace(digest.subscriber, email=masked_address(digest.subscriber.email))
    return renderer.render(
        replace(digest, subscriber=shown), links or DigestLinks(unsubscribe="", manage="")
    ).html
