"""Issue 30: readers with the same sections share one message, rendered and encoded once, with
slots for their own values (address, name, view, manage and unsubscribe links, the prefix of
their more/less links, the wrapped footer line with the address). Each reader's message is
byte-equal to their message rendered alone, for every kind of links a digest can carry."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from newsletter.deliver import build_message
from newsletter.digest.render import DigestLinks, Renderer
from newsletter.digest.shared_render import share_key
from newsletter.edition.build import SharedMessages
from newsletter.models import Digest
from tests import digests as D

PAPERS = D.papers()
BASE = "https://papers.example.org"
NOW = datetime(2026, 11, 27, 6, 0, tzinfo=UTC)
READERS = [
    (1, "ada@example.org", "Ada Lovelace"),
    (2, "zoë.long-address-that-wraps-the-footer-line@bücher.example", 'Zoë <Ü> & "q"'),
    (3, "b@x.io", ""),
    (4, "o'neil&co@example.org", "x <y>"),
    (5, ".dot@example.org", "Dot"),
]


def links_for(sid: int, kind: str) -> DigestLinks:
    return D.links_of_kind(sid, kind, BASE)


def digests(sid: int, email: str, name: str) -> list[Digest]:
    return D.reader_digests(sid, email, name)


def alone(renderer: Renderer, digest: Digest, links: DigestLinks, mid: str) -> bytes:
    rendered = renderer.render(digest, links)
    return build_message(
        rendered,
        settings=renderer.settings,
        to_address=digest.subscriber.email,
        to_name=digest.subscriber.name,
        message_id=mid,
        links=links,
        now=NOW,
    ).data


@pytest.mark.parametrize("kind", ["votes", "no-view", "by-mail", "none", "tokens"])
@pytest.mark.parametrize("group", [True, False])
def test_a_shared_message_is_what_each_reader_gets_alone(kind: str, group: bool) -> None:
    renderer = Renderer(D.settings(group_by_topic=group))
    shared = SharedMessages()
    filled = 0
    for round_ in range(2):  # the first sight of a shape is rendered alone; then shared
        for sid, email, name in READERS:
            for n, digest in enumerate(digests(sid, email, name)):
                links, mid = links_for(sid, kind), f"<{round_}.{sid}.{n}@papers.example.org>"
                got = shared.envelope(renderer, digest, links, to=email, message_id=mid, now=NOW)
                if got is None:
                    continue
                filled += 1
                assert got.data == alone(renderer, digest, links, mid), (kind, sid, n)
    if kind == "tokens":  # a token per reader and paper: nothing to share
        assert filled == 0
    else:  # every reader after the first of each shape: four shapes, five readers, two rounds
        assert filled >= 4 * (2 * len(READERS) - 1) - 4, filled


def test_readers_sharing_a_message_get_their_own_values() -> None:
    renderer = Renderer(D.settings())
    shared = SharedMessages()
    outs = []
    for sid, email, name in READERS[:3] * 2:
        digest = D.digest(PAPERS, per_topic=7, sub=D.subscriber(sid, email, name))
        links = links_for(sid, "votes")
        outs.append(shared.envelope(renderer, digest, links, to=email, message_id="<m@x>", now=NOW))
    assert outs[0] is None  # the first reader of the shape is rendered alone
    ada, zoe = outs[3], outs[4]
    assert ada is not None and zoe is not None
    assert b"ada@example.org" in ada.data and b"ada@example.org" not in zoe.data
    assert b"/feedback/tok1.abc.def/" in ada.data and b"tok1" not in zoe.data
    assert b"/feedback/tok2.abc.def/" in zoe.data
    assert b"zo&#235;.long-address" in zoe.data  # the HTML part writes it as a reference


def test_an_operators_template_is_never_shared(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "digest.txt").write_text("{{ subscriber.email | length }}\n")
    renderer = Renderer(D.settings(), templates_dir=tmp_path)
    digest = D.digest(PAPERS, per_topic=1)
    assert share_key(renderer, digest, D.links()) is None
