"""Issue 30: readers with the same sections share one rendering of their digest, cut where their
own values go (address, name, view, manage and unsubscribe links, more/less links, the wrapped
footer line with the address). Each reader's copy is byte-equal to their digest rendered alone."""

from __future__ import annotations

import dataclasses

import pytest

from newsletter.feedback import VoteLinks
from newsletter.fragments import HOLE_MARK
from newsletter.models import Digest
from newsletter.render import DigestLinks, Renderer
from tests import digests as D

PAPERS = D.papers()
BASE = "https://papers.example.org"
READERS = [
    (1, "ada@example.org", "Ada Lovelace"),
    (2, "zoë.long-address-that-wraps-the-footer-line@bücher.example", 'Zoë <Ü> & "q"'),
    (3, "b@x.io", ""),
    (4, "a&b<c>@example.org", "x"),
]


def alone(renderer: Renderer) -> Renderer:
    """The same renderer with no shared renderings: each message rendered for itself."""
    solo = Renderer(renderer.settings)
    solo.skeletons = None
    return solo


def links_for(sid: int, kind: str) -> DigestLinks:
    base = D.links(sid)
    votes = VoteLinks(BASE).for_digest(f"tok{sid}.abc.def")
    if kind == "votes":
        return dataclasses.replace(base, feedback=votes)
    if kind == "no-view":
        return dataclasses.replace(base, view=None, feedback=votes)
    if kind == "by-mail":
        ask = f"{BASE}/archive/view/t{sid}/links"
        return dataclasses.replace(base, manage=ask, unsubscribe=ask, by_mail=True)
    if kind == "none":
        return dataclasses.replace(base, feedback=None)
    if kind == "web":  # the archive page: no manage or unsubscribe link at all
        return DigestLinks(unsubscribe="", manage="")
    return base  # per-paper tokens, as mailed before


def digests(sid: int, email: str, name: str) -> list[Digest]:
    sub = D.subscriber(sid, email, name)
    return [
        D.digest(PAPERS, per_topic=7, sub=sub),
        D.digest(PAPERS, per_topic=2, offset=5, sub=sub),
        D.empty_digest(sub),
        dataclasses.replace(D.hostile_digest(), subscriber=sub),
    ]


@pytest.mark.parametrize("kind", ["votes", "no-view", "by-mail", "none", "web", "tokens"])
@pytest.mark.parametrize("group", [True, False])
def test_a_shared_rendering_is_what_each_reader_gets_alone(kind: str, group: bool) -> None:
    shared = Renderer(D.settings(group_by_topic=group))
    assert shared.skeletons is not None  # the shipped templates share
    solo = alone(shared)
    for _ in range(2):  # the second round is served from the shared renderings
        for sid, email, name in READERS:
            for digest in digests(sid, email, name):
                links = links_for(sid, kind)
                mine, own = shared.render(digest, links), solo.render(digest, links)
                assert mine == own, (kind, sid, digest.sections[:1])
                assert HOLE_MARK not in mine.html + mine.text
    # One rendering per shape, not per reader: four readers, four digests each.
    kept = len(shared.skeletons._cache)  # type: ignore[attr-defined]
    assert kept <= 4 * 2


def test_readers_sharing_a_rendering_get_their_own_values() -> None:
    renderer = Renderer(D.settings())
    outs = []
    for sid, email, name in READERS[:2]:
        digest = D.digest(PAPERS, per_topic=7, sub=D.subscriber(sid, email, name))
        outs.append(renderer.render(digest, links_for(sid, "votes")))
    assert len(renderer.skeletons._cache) == 1  # type: ignore[union-attr]
    ada, zoe = outs
    assert "ada@example.org" in ada.html and "ada@example.org" in ada.text
    assert "ada@example.org" not in zoe.html + zoe.text
    assert "/feedback/tok1.abc.def/" in ada.html and "/feedback/tok2.abc.def/" in zoe.html
    assert "tok1" not in zoe.html and D.links(1).manage in ada.text
    assert "zo&#235;.long-address" in zoe.html and "zoë.long-address" in zoe.text


def test_an_operators_template_is_rendered_for_each_reader(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "digest.txt").write_text("{{ subscriber.email | upper }} {{ subscriber.id }}\n")
    renderer = Renderer(D.settings(), templates_dir=tmp_path)
    assert renderer.skeletons is None
    out = renderer.render(D.digest(PAPERS, per_topic=1), D.links())
    assert out.text.strip() == "ADA@EXAMPLE.ORG 1"
