"""The digest excerpt shows what the paper did (issue 29, item 1): judged sample and edge cases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from newsletter.digest.excerpts import (
    LIMIT,
    cut,
    excerpt,
    lead_excerpt,
    sentence_end,
    sentences,
    standalone,
)
from tests.digest.excerpts.evaluate import measure


def test_judged_sample_shows_the_contribution() -> None:
    """Before the picker, 5 of 21 excerpts held the judged contribution sentence and none a
    headline result (docs/digest.md); now nearly all do, within the length limit."""
    rates = measure()
    assert rates.wanted >= 20, rates
    assert rates.results >= 5, rates
    assert rates.longest <= LIMIT


def test_contribution_and_result_in_the_abstracts_order() -> None:
    text = (
        "Large models are everywhere. Serving them is costly. "
        "We propose Foo, a scheduler for mixed GPUs. It has three parts. "
        "Foo cuts serving cost by 41% on real traces."
    )
    assert excerpt(text) == (
        "We propose Foo, a scheduler for mixed GPUs. Foo cuts serving cost by 41% on real traces."
    )


def test_without_a_result_the_context_after_the_contribution() -> None:
    text = "Background here. In this paper, we introduce Bar. It is small. It is fast."
    assert excerpt(text) == "In this paper, we introduce Bar. It is small. It is fast."


def test_a_size_is_not_a_result() -> None:
    text = "Old news. We present Baz. Images are 1024x1024 pixels. Baz is 3.5x faster."
    assert excerpt(text, limit=40) == "We present Baz. Baz is 3.5x faster."


def test_no_contribution_falls_back_to_the_first_sentences() -> None:
    text = "A survey of things. " * 30
    assert excerpt(text) == lead_excerpt(text)
    assert excerpt(text).startswith("A survey of things. A survey")
    assert len(excerpt(text)) <= LIMIT


def test_short_abstracts_are_shown_whole() -> None:
    assert excerpt("Short.") == "Short."
    assert excerpt("") == ""


@pytest.mark.parametrize(
    "text",
    [
        "Models (e.g. R1, o1) fail. They are slow. We present Qux (see Fig. 2). Done.",
        "We compare methods, e.g. Adam and SGD. Results are mixed.",
    ],
)
def test_no_sentence_ends_inside_parentheses_or_after_an_abbreviation(text: str) -> None:
    for s in sentences(text):
        assert s.count("(") == s.count(")"), s
        assert not s.endswith(("e.g.", "Fig.")), s


def test_cut_never_inside_parentheses_nor_after_eg() -> None:
    long = (
        "We propose " + "word " * 40 + "(a parenthesis that runs past the limit of the cut) tail."
    )
    out = cut(long, 230)
    assert out.endswith("…") and "(" not in out
    for eg in (
        "We propose a method that works on many inputs, e.g. " + "images " * 60,
        "We propose a method that works on many inputs, e.g., " + "images " * 60,
    ):
        for limit in range(20, len(eg), 3):
            body = cut(eg, limit).rstrip("…")
            assert not body.endswith(("e.g.", "e.g.,")), (limit, body)
            assert len(cut(eg, limit)) <= limit


def test_deterministic() -> None:
    text = "Background. We propose A. We introduce B. A is 2x faster. B is 3x faster."
    assert len({excerpt(text) for _ in range(5)}) == 1
    assert excerpt(text).startswith("We propose A.")


def test_someone_elses_work_is_not_the_contribution() -> None:
    text = "BERT is a model. It was introduced by Google. We propose Foo. Foo is 2x faster."
    assert excerpt(text) == "We propose Foo. Foo is 2x faster."
    assert excerpt("Background. It then proposes Bar.") == "It then proposes Bar."


def test_a_long_result_is_cut_after_the_clause_with_its_number() -> None:
    text = (
        "Background. We propose Foo, a scheduler. "
        "We achieve up to 3.9x speedups on GPUs (A100, H100, and L40), and also observe a "
        + "power reduction on real hardware " * 8
        + "in practice."
    )
    out = excerpt(text, limit=140)
    assert out == (
        "We propose Foo, a scheduler. We achieve up to 3.9x speedups on GPUs (A100, H100, and L40)…"
    )
    assert len(out) <= 140


def _sentences_one_char_at_a_time(text: str) -> list[str]:
    """The reference: :func:`sentences`' scan as it was written before it let a regex find its
    marks (every character looked at in Python); where a sentence ends is
    :func:`~newsletter.digest.excerpts.sentence_end`'s, for both."""
    out: list[str] = []
    depth = start = i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif c in ".?!" and depth == 0 and (end := sentence_end(text, i)) is not None:
            out.append(text[start:end])
            start = end + 1
            i = end
        i += 1
    if start < n:
        out.append(text[start:])
    return [s for s in out if s.strip()]


_PIECES = st.sampled_from(
    [" ", ".", "?", "!", "(", ")", "[", "]", "{", "}", '"', "'", "”", "’", "“", "A", "a", "7",
     "e.g", "et al", "Fig", "J", "We", "x", "É", "é", "\u00a0"]
)  # fmt: skip


@given(st.lists(_PIECES, max_size=60).map("".join))
@settings(max_examples=3000, deadline=None)
def test_sentences_cut_where_the_one_character_at_a_time_reference_cuts(text: str) -> None:
    """The regex scan over the marks cuts exactly where looking at every character did."""
    assert sentences(text) == _sentences_one_char_at_a_time(text)


def test_sentences_of_the_fixture_feeds_match_the_reference() -> None:
    """Real abstracts (every summary of the bundled feeds) cut the same way too."""
    from pathlib import Path

    import feedparser

    feeds = Path(__file__).resolve().parents[2] / "fixtures" / "feeds"
    texts = [
        " ".join(str(entry.get("summary", "")).split())
        for path in sorted([*feeds.glob("*.xml"), *feeds.glob("*.atom")])
        for entry in feedparser.parse(path.read_bytes()).entries
    ]
    assert len(texts) > 50
    for text in texts:
        assert sentences(text) == _sentences_one_char_at_a_time(text)


# ---------------------------------------------------------------- from the claim (issue 43)


def _shown(feed: str, key: str) -> str:
    """The excerpt the digest shows for a real fixture paper: its abstract as text, excerpted."""
    from newsletter.digest.latex import to_text
    from tests.digest.excerpts.evaluate import _papers

    return excerpt(to_text(_papers(feed)[key].abstract))


LG = "arxiv-rss-cs.LG-2026-11-16.xml"


def test_the_excerpt_starts_at_the_claim_not_at_a_connective_pointing_back() -> None:
    """The issue's papers: "To address this challenge, we propose…", "In order to solve these
    issues, …", "However, … Furthermore, we propose RT-NeRF…" reached readers who never saw
    the challenge, the issues or what came before "However"."""
    cuda_llm = _shown(LG, "2611.00025")
    assert cuda_llm == (
        "We propose a novel framework called Feature Search and Reinforcement (FSR). The "
        "automatically generated kernels can outperform general human-written code by a "
        "factor of up to 179× in execution speeds."
    )
    fused = _shown(LG, "2611.00020")
    assert fused.startswith("We present a novel methodology for building GPU libraries")
    # The "However" sentence came first for its "(> 30 FPS)": a number before the claim is
    # background unless the paper speaks of itself.
    rt_nerf = _shown(LG, "2611.00027")
    assert rt_nerf == (
        "We propose RT-NeRF, which to the best of our knowledge is the first "
        "algorithm-hardware co-design acceleration of NeRF."
    )
    light_field = _shown("arxiv-rss-cs.DC-2026-11-17.xml", "2611.00034")
    assert "saving 15×∼24× storage compared with MobileNeRF" in light_field
    for text in (cuda_llm, fused, rt_nerf, light_field):
        assert not text.startswith(("To address", "In order", "However", "Furthermore"))
        assert "Meanwhile" not in text


def test_a_lead_in_that_stands_alone_stays() -> None:
    assert excerpt("Background. In this paper, we introduce Bar.") == (
        "In this paper, we introduce Bar."
    )
    assert excerpt("Background. To serve LLMs on phones, we propose Bar.") == (
        "To serve LLMs on phones, we propose Bar."
    )
    assert excerpt("Old. Unlike existing works, we introduce Baz.") == (
        "Unlike existing works, we introduce Baz."
    )
    # Only the pieces that point back go: "in this paper" stays, capitalized.
    assert excerpt("Old. Furthermore, in this paper, to do so, we present Qux.") == (
        "In this paper, we present Qux."
    )


@pytest.mark.parametrize(
    ("sentence", "alone"),
    [
        ("However, Foo is 3x faster than Bar.", "Foo is 3x faster than Bar."),
        ("Meanwhile, the kernels are 2x faster.", "The kernels are 2x faster."),
        ("On these benchmarks, Foo is 3x faster.", "Foo is 3x faster."),
        ("Notably, on an A100, Foo is 3x faster.", "On an A100, Foo is 3x faster."),
        # a name written in lower case keeps its case
        ("Moreover, im2win is 3x faster.", "im2win is 3x faster."),
        # not a lead-in: a subject, a clause of its own, or too little left
        ("These results, however, show 3x.", "These results, however, show 3x."),
        ("While these methods are fast, they fail.", "While these methods are fast, they fail."),
        ("Thus, 3x.", "Thus, 3x."),
        ("Foo, Bar and Baz are 3x faster.", "Foo, Bar and Baz are 3x faster."),
    ],
)
def test_a_sentence_shown_alone_loses_the_connective_that_points_back(
    sentence: str, alone: str
) -> None:
    assert standalone(sentence) == alone


def test_a_connective_stays_when_the_sentence_it_points_to_is_shown() -> None:
    text = "Old. We propose Foo. To achieve this, Foo uses tiles. Also, it is small."
    assert excerpt(text) == "We propose Foo. To achieve this, Foo uses tiles. Also, it is small."


_LEADS = st.sampled_from(
    ["", "However, ", "Furthermore, ", "To address this challenge, ", "In this paper, ",
     "To this end, ", "In order to solve these issues, ", "Notably, ", "To serve models, ",
     "Unlike prior work, ", "Moreover, in this work, ", "These, ", "By doing so, ", ", ",
     "However, however, ", "In (this, that), "]
)  # fmt: skip
_BODIES = st.sampled_from(
    ["we propose Foo, a scheduler", "we introduce a method", "our system is 3x faster",
     "the model reaches 41% accuracy", "it then proposes Bar", "Foo cuts cost by 2x",
     "models are large", "this is hard", "we show that it works", "im2win runs on GPUs"]
)  # fmt: skip


def _sentence(lead: str, body: str) -> str:
    return (lead + body)[:1].upper() + (lead + body)[1:] + "."


@given(st.lists(st.tuples(_LEADS, _BODIES).map(lambda t: _sentence(*t)), min_size=1, max_size=8))
@settings(max_examples=2000, deadline=None)
def test_leaving_out_lead_ins_never_garbles_the_excerpt(parts: list[str]) -> None:
    """Whatever the abstract's lead-ins, the excerpt is never empty, starts like a sentence
    (from the claim, when there is one), and holds the abstract's words in their order, at most
    without some of the phrases before a sentence's subject."""
    text = " ".join(parts)
    out = excerpt(text)
    assert out and len(out) <= LIMIT
    assert out.endswith((".", "…")), out
    if out != lead_excerpt(text):  # a claim (an abstract without one is shown from its start)
        assert out[0].isupper() or out.startswith("im2win"), out
        assert not out.startswith(("However", "Furthermore", "To this end", "Notably")), out
    source = iter(text.casefold().split())
    words = out.rstrip("…").casefold().split()
    assert all(w in source for w in words[:-1]), (out, text)  # the last may be cut
