"""Realistic digests for render tests, the browser check, screenshots and bench/bench_render.py.

Papers come from the golden parse results of tests/fixtures (real titles, abstracts, author
lists; Hugging Face upvotes, comments and code links), so what is measured and looked at is what
subscribers get. ``hostile_paper`` carries the feed text a renderer must keep as text.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, date, datetime
from email.message import EmailMessage
from email.utils import format_datetime
from pathlib import Path
from typing import Any

from newsletter.addresses import format_address
from newsletter.config import Settings
from newsletter.deliver.message import WIRE_POLICY, header_safe
from newsletter.digest.render import DigestLinks, RenderedDigest
from newsletter.models import (
    Digest,
    DigestItem,
    Paper,
    Subscriber,
    SubscriberStatus,
    TopicSection,
)
from newsletter.services.link_tokens import Tokens
from newsletter.subscribe.votes import FeedbackLinks

GOLDEN = Path(__file__).resolve().parent / "fixtures" / "golden"
NOW = datetime(2026, 11, 22, 6, 0, tzinfo=UTC)
EDITION = date(2026, 11, 22)
FILES = (
    "hf-daily-papers-2026-11-17-evening.json.json",
    "hf-daily-papers-2026-11-17-morning.json.json",
    "arxiv-rss-cs.DC-2026-11-16.xml.json",
    "arxiv-rss-cs.LG-2026-11-16.xml.json",
    "arxiv-rss-cs.DC-2026-11-17.xml.json",
)
TOPICS = ("LLM serving", "Mixture of experts", "GPU kernels")


def papers() -> list[Paper]:
    """Every distinct fixture paper, first the Hugging Face ones (upvotes, code links)."""
    seen: dict[str, Paper] = {}
    for name in FILES:
        for raw in json.loads((GOLDEN / name).read_text())["papers"]:
            if raw["key"] in seen:
                continue
            seen[raw["key"]] = paper(len(seen) + 1, raw)
    return list(seen.values())


def paper(pid: int, raw: dict[str, Any]) -> Paper:
    return Paper(
        id=pid,
        key=raw["key"],
        title=raw["title"],
        abstract=raw["abstract"],
        authors=tuple(raw["authors"]),
        categories=tuple(raw["categories"]),
        url=raw["url"],
        pdf_url=raw["pdf_url"],
        code_url=raw["code_url"],
        version=raw["version"],
        published=None,
        first_seen=NOW,
        updated=NOW,
        sources=("fixture",),
        upvotes=raw["upvotes"],
        comments=raw["comments"],
        code_stars=raw.get("code_stars"),
    )


def subscriber(
    sid: int = 1, email: str = "ada@example.org", name: str = "Ada Lovelace"
) -> Subscriber:
    return Subscriber(
        id=sid,
        email=email,
        name=name,
        status=SubscriberStatus.ACTIVE,
        topics=("llm-serving", "moe", "gpu-kernels"),
        timezone="UTC",
        created=NOW,
    )


def reason(p: Paper, topic: str) -> str:
    words = topic.lower()
    why = f"title: *{words}*" if words.split()[0] in p.title.lower() else f"abstract: *{words}*"
    if p.upvotes:
        why += f"; {p.upvotes} upvotes"
    return why


def digest(
    all_papers: list[Paper],
    *,
    per_topic: int = 4,
    offset: int = 0,
    sub: Subscriber | None = None,
    topics: tuple[str, ...] = TOPICS,
) -> Digest:
    """A grouped digest: ``per_topic`` papers for each topic, starting at ``offset``."""
    sections = []
    at = offset
    for title in topics:
        chosen = [all_papers[(at + i) % len(all_papers)] for i in range(per_topic)]
        at += per_topic
        items = tuple(
            DigestItem(p, title.lower(), 10.0 - i, reason(p, title)) for i, p in enumerate(chosen)
        )
        sections.append(TopicSection(title.lower().replace(" ", "-"), title, items))
    return Digest(sub or subscriber(), EDITION, tuple(sections), topics)


def empty_digest(sub: Subscriber | None = None) -> Digest:
    return Digest(sub or subscriber(), EDITION, (), TOPICS[:2])


HOSTILE_TITLE = "<script>alert(1)</script> {{ 7*7 }} <img src=x onerror=alert(2)> & \"quotes\" 'q'"


def hostile_paper(pid: int = 9999) -> Paper:
    return Paper(
        id=pid,
        key="2611.99999",
        title=HOSTILE_TITLE,
        abstract="{% for x in range(3) %}loop{% endfor %} <b onmouseover=alert(3)>bold</b> "
        "</td></tr></table><h1>break out</h1> a & b < c > d. " + "word " * 80,
        authors=("<i>Eve</i>", "{{ config }}", "Mallory \r\nBcc: x@evil.example"),
        categories=("cs.<b>LG</b>",),
        url="javascript:alert(4)",
        pdf_url='https://arxiv.org/pdf/2611.99999"><script>alert(5)</script>',
        code_url="https://github.com/x/y?a=1&b=<2>",
        version=1,
        published=None,
        first_seen=NOW,
        updated=NOW,
        sources=("fixture",),
        upvotes=7,
        comments=None,
    )


def hostile_digest() -> Digest:
    p = hostile_paper()
    item = DigestItem(p, "llm", 1.0, "title: *<script>x</script>* {{ 7*7 }}")
    return Digest(
        subscriber(name='Eve "<x>" \r\nBcc: evil@example.org'),
        EDITION,
        (TopicSection("llm", "LLM <serving>", (item,)),),
        ("LLM <serving>",),
    )


SECRET = "a-fixed-secret-for-rendering-tests"
FEEDBACK = FeedbackLinks(Tokens(SECRET, now=lambda: NOW), "https://papers.example.org")
"""One run's feedback links (real signed tokens on a fixed clock, so goldens are stable)."""


def links(sid: int = 1, *, feedback: bool = True) -> DigestLinks:
    """A reader's links; the "more/less like this" links are real tokens, made lazily (as in a
    run) when the renderer asks for them, so bench/bench_render.py times them."""
    base = "https://papers.example.org"
    token = "eyJzIjoxLCJlIjoiYWRhQGV4YW1wbGUub3JnIn0.Z0_abcdefghijklmnopqrstuvwxyz0123456789"
    email = "ada@example.org" if sid == 1 else f"reader{sid}@example.org"
    return DigestLinks(
        unsubscribe=f"{base}/unsubscribe/{token}{sid}",
        manage=f"{base}/manage/{token}{sid}",
        view=f"{base}/archive/view/{token}{sid}",
        feedback=FEEDBACK.for_subscriber(subscriber(sid, email)) if feedback else None,
    )


def settings(**digest: Any) -> Settings:
    return Settings.model_validate(
        {
            "sender": {
                "from": "Trending Papers <digest@papers.example.org>",
                "postal_address": "Trending Papers, 1 Example Street, 10115 Berlin, Germany",
                "base_url": "https://papers.example.org",
            },
            "inbound": {"address": "papers-request@papers.example.org"},
            "digest": digest,
        }
    )


def email_message_bytes(
    rendered: RenderedDigest,
    *,
    settings: Settings,
    to_address: str,
    to_name: str,
    message_id: str,
    links: DigestLinks,
    now: datetime,
) -> bytes:
    """The message as ``build_message`` wrote it before newsletter.deliver.mime: ``EmailMessage``.

    The slow reference: bench/bench_render.py times it, tests/deliver/test_mime.py compares with it.
    """
    sender = settings.sender
    msg = EmailMessage()
    msg["Subject"] = header_safe(rendered.subject)
    msg["From"] = format_address(sender.from_name, sender.from_address)
    msg["To"] = format_address(to_name, to_address)
    if sender.reply_to:
        msg["Reply-To"] = sender.reply_to
    msg["Date"] = format_datetime(now)
    msg["Message-ID"] = message_id
    list_id = sender.list_id or f"Trending papers <digest.{sender.message_domain}>"
    msg["List-Id"] = header_safe(list_id)
    request = settings.inbound.address
    msg["List-Unsubscribe"] = f"<{links.unsubscribe}>" + (
        f", <mailto:{request}?subject=unsubscribe>" if request else ""
    )
    msg["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    msg["Auto-Submitted"] = "auto-generated"
    msg["Precedence"] = "bulk"
    msg["X-Auto-Response-Suppress"] = "OOF, AutoReply"
    msg.set_content(rendered.text, cte="quoted-printable")
    msg.add_alternative(rendered.html, subtype="html", cte="quoted-printable")
    return msg.as_bytes(policy=WIRE_POLICY)


# ---------------------------------------------------------------------------- readers sharing one


def links_of_kind(sid: int, kind: str, base_url: str = "https://papers.example.org") -> DigestLinks:
    """Reader ``sid``'s links of one kind: ``votes`` (one token per digest), ``no-view`` (a
    preview: the text part carries the more/less links), ``by-mail`` (manage and unsubscribe
    mail fresh links), ``none`` (no feedback), ``web`` (the archive page: no manage or
    unsubscribe link), else per-paper tokens, as mailed before."""
    from newsletter.subscribe.votes import VoteLinks

    mine = links(sid)
    votes = VoteLinks(base_url).for_digest(f"tok{sid}.abc.def")
    if kind == "votes":
        return dataclasses.replace(mine, feedback=votes)
    if kind == "no-view":
        return dataclasses.replace(mine, view=None, feedback=votes)
    if kind == "by-mail":
        ask = f"{base_url}/archive/view/t{sid}/links"
        return dataclasses.replace(mine, manage=ask, unsubscribe=ask, by_mail=True, feedback=votes)
    if kind == "none":
        return dataclasses.replace(mine, feedback=None)
    if kind == "web":
        return DigestLinks(unsubscribe="", manage="")
    return mine


def reader_digests(sid: int, email: str, name: str) -> list[Digest]:
    """Four digests of one reader: seven papers a topic, two (others), none, hostile text."""
    sub = subscriber(sid, email, name)
    every = papers()
    return [
        digest(every, per_topic=7, sub=sub),
        digest(every, per_topic=2, offset=5, sub=sub),
        empty_digest(sub),
        dataclasses.replace(hostile_digest(), subscriber=sub),
    ]
