"""Issue 30: a topic's section is rendered once per run and shared by every reader of the topic,
with each reader's more/less links joined in (one token per digest: the section keeps the links'
ends and leaves out the prefix, which holds the reader's token). Each reader's copy is
byte-equal to their digest rendered alone, by a renderer that has seen no other reader."""

from __future__ import annotations

import pytest

from newsletter.digest.fragments import HOLE_MARK
from newsletter.digest.render import DigestLinks, RenderedDigest, Renderer
from newsletter.models import Digest
from tests import digests as D

PAPERS = D.papers()
BASE = "https://papers.example.org"
READERS = [
    (1, "ada@example.org", "Ada Lovelace"),
    (2, "zoë.long-address-that-wraps-the-footer-line@bücher.example", 'Zoë <Ü> & "q"'),
    (3, "b@x.io", ""),
    (4, "a&b<c>@example.org", "x"),
]


def alone(renderer: Renderer, digest: Digest, links: DigestLinks) -> RenderedDigest:
    """``digest`` rendered by a fresh renderer of the same settings: nothing shared."""
    return Renderer(renderer.settings).render(digest, links)


def section_fragments(renderer: Renderer) -> list[object]:
    """The cached HTML topic sections of ``renderer`` (kept with their holes)."""
    cache = renderer.html_env.globals["once"]._cache  # type: ignore[attr-defined]
    return [v for k, v in cache.items() if k[-2:-1] == ("html",) and hasattr(k[0], "items")]


def links_for(sid: int, kind: str) -> DigestLinks:
    return D.links_of_kind(sid, kind, BASE)


def digests(sid: int, email: str, name: str) -> list[Digest]:
    return D.reader_digests(sid, email, name)


@pytest.mark.parametrize("kind", ["votes", "no-view", "by-mail", "none", "web", "tokens"])
@pytest.mark.parametrize("group", [True, False])
def test_a_shared_rendering_is_what_each_reader_gets_alone(kind: str, group: bool) -> None:
    shared = Renderer(D.settings(group_by_topic=group))
    own: dict[tuple[int, int], RenderedDigest] = {}  # each digest alone: the same both rounds
    for _ in range(2):  # the second round is served from the shared sections
        for sid, email, name in READERS:
            for i, digest in enumerate(digests(sid, email, name)):
                links = links_for(sid, kind)
                mine = shared.render(digest, links)
                if (sid, i) not in own:
                    own[sid, i] = alone(shared, digest, links)
                assert mine == own[sid, i], (kind, sid, digest.sections[:1])
                assert HOLE_MARK not in mine.html + mine.text
    # One rendering per section, not per reader: four readers, the same sections each.
    sections = {s for sid, e, n in READERS[:1] for d in digests(sid, e, n) for s in d.sections}
    assert len(section_fragments(shared)) <= len(sections)


def test_readers_sharing_a_rendering_get_their_own_values() -> None:
    renderer = Renderer(D.settings())
    outs = []
    for sid, email, name in READERS[:2]:
        digest = D.digest(PAPERS, per_topic=7, sub=D.subscriber(sid, email, name))
        outs.append(renderer.render(digest, links_for(sid, "votes")))
    # Both readers' sections came from one rendering, kept with the links' ends written in.
    kept = section_fragments(renderer)
    assert kept and all(getattr(f, "joinable", None) for f in kept)
    ada, zoe = outs
    assert "ada@example.org" in ada.html and "ada@example.org" in ada.text
    assert "ada@example.org" not in zoe.html + zoe.text
    assert "/feedback/tok1.abc.def/" in ada.html and "/feedback/tok2.abc.def/" in zoe.html
    assert "tok1" not in zoe.html and D.links(1).manage in ada.text
    assert "zo&#235;.long-address" in zoe.html and "zoë.long-address" in zoe.text


def test_an_operators_template_is_rendered_for_each_reader(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "digest.txt").write_text("{{ subscriber.email | upper }} {{ subscriber.id }}\n")
    renderer = Renderer(D.settings(), templates_dir=tmp_path)
    out = renderer.render(D.digest(PAPERS, per_topic=1), D.links())
    assert out.text.strip() == "ADA@EXAMPLE.ORG 1"
