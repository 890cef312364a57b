"""A sent digest as a web page: the edition rebuilt from the ledger, rendered as it was mailed."""

from __future__ import annotations

from datetime import date

from newsletter.config import Settings
from newsletter.edition.archive import sent_digest
from newsletter.render import DigestLinks, Renderer
from newsletter.store import Store


def render_sent_edition(
    settings: Settings,
    store: Store,
    renderer: Renderer,
    subscriber_id: int,
    edition_date: date,
    links: DigestLinks | None,
) -> str | None:
    """The HTML of a sent digest, re-rendered; ``None`` when there is no such sent edition."""
    digest = sent_digest(settings, store, subscriber_id, edition_date)
    if digest is None:
        return None
    return renderer.render(digest, links or DigestLinks(unsubscribe="", manage="")).html
