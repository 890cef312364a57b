"""Rendering and building one digest message: the per-subscriber cost of an edition.

Fast path: :class:`newsletter.render.Renderer` (the template's CSS inlined once when the renderer
is built; per message a Jinja render of the HTML and the text part, with per-paper values
memoized) and :func:`newsletter.deliver.build_message` (hand-assembled MIME,
:mod:`newsletter.mime`). Naive path, in the same run: render, then ``premailer.transform`` on
every message (``Renderer(inline_once=False)``), then ``EmailMessage`` + ``as_bytes``
(``tests/digests.py`` ``email_message_bytes``, the code ``build_message`` used before).

Digests are built from the real fixture papers (titles, abstracts, authors, Hugging Face
upvotes and code links), 20 papers in three topic sections, each subscriber a different mix and
their own unsubscribe/manage/view links. Each fast batch starts from a fresh renderer, so the
per-paper caches start cold as they do in a run. Targets: the fast path at least 30x faster per
message and at most 1.5 ms per message including the text part and MIME assembly.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

from newsletter.deliver import build_message
from newsletter.models import Digest
from newsletter.render import DigestLinks, Renderer
from tests import digests as D

NOW = datetime(2026, 11, 22, 6, 0, tzinfo=UTC)


def workload(n: int, per_topic: int) -> list[tuple[Digest, DigestLinks, str]]:
    papers = D.papers()
    out = []
    for i in range(n):
        sub = D.subscriber(i + 1, f"reader{i}@example.org", f"Reader {i}")
        digest = D.digest(papers, per_topic=per_topic, offset=(i * 5) % len(papers), sub=sub)
        out.append((digest, D.links(i), f"<{i:08x}.edition@papers.example.org>"))
    return out


def per_message(
    run: Callable[[list[tuple[Digest, DigestLinks, str]]], None],
    work: list[tuple[Digest, DigestLinks, str]],
    repeat: int,
) -> float:
    """Median seconds per message over ``repeat`` batches."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run(work)
        times.append((time.perf_counter() - started) / len(work))
    return statistics.median(times)


def measure(per_topic: int, n_fast: int, n_naive: int, repeat: int) -> dict[str, float]:
    settings = D.settings()
    naive = Renderer(settings, inline_once=False)
    built: list[Renderer] = []  # one fresh renderer per fast batch, built before the clock runs
    setup: list[float] = []
    for _ in range(repeat):
        started = time.perf_counter()
        built.append(Renderer(settings))
        setup.append(time.perf_counter() - started)

    def fast_all(work: list[tuple[Digest, DigestLinks, str]]) -> None:
        r = built.pop()
        for digest, links, mid in work:
            rendered = r.render(digest, links)
            build_message(
                rendered,
                settings=settings,
                to_address=digest.subscriber.email,
                to_name=digest.subscriber.name,
                message_id=mid,
                links=links,
                now=NOW,
            )

    def naive_all(work: list[tuple[Digest, DigestLinks, str]]) -> None:
        for digest, links, mid in work:
            rendered = naive.render(digest, links)
            D.email_message_bytes(
                rendered,
                settings=settings,
                to_address=digest.subscriber.email,
                to_name=digest.subscriber.name,
                message_id=mid,
                links=links,
                now=NOW,
            )

    warm = Renderer(settings)

    def fast_render(work: list[tuple[Digest, DigestLinks, str]]) -> None:
        for digest, links, _ in work:
            warm.render(digest, links)

    def naive_render(work: list[tuple[Digest, DigestLinks, str]]) -> None:
        for digest, links, _ in work:
            naive.render(digest, links)

    sample = warm.render(*workload(1, per_topic)[0][:2])

    def mime_fast(work: list[tuple[Digest, DigestLinks, str]]) -> None:
        for digest, links, mid in work:
            build_message(
                sample,
                settings=settings,
                to_address=digest.subscriber.email,
                to_name=digest.subscriber.name,
                message_id=mid,
                links=links,
                now=NOW,
            )

    def mime_naive(work: list[tuple[Digest, DigestLinks, str]]) -> None:
        for digest, links, mid in work:
            D.email_message_bytes(
                sample,
                settings=settings,
                to_address=digest.subscriber.email,
                to_name=digest.subscriber.name,
                message_id=mid,
                links=links,
                now=NOW,
            )

    fast_work = workload(n_fast, per_topic)
    naive_work = fast_work[:n_naive]
    result = {
        "papers": float(len(fast_work[0][0].items)),
        "html_kb": len(sample.html.encode()) / 1024,
        "text_kb": len(sample.text.encode()) / 1024,
        "fast": per_message(fast_all, fast_work, repeat),
        "naive": per_message(naive_all, naive_work, repeat),
        "render_fast": per_message(fast_render, fast_work, repeat),
        "render_naive": per_message(naive_render, naive_work, repeat),
        "mime_fast": per_message(mime_fast, fast_work, repeat),
        "mime_naive": per_message(mime_naive, naive_work, repeat),
        "setup": statistics.median(setup),
    }
    return result


def main(quick: bool = False) -> str:
    sizes = [(7, 20), (4, 10)] if not quick else [(7, 20)]
    n_fast, n_naive, repeat = (400, 40, 5) if not quick else (40, 5, 2)
    rows = []
    results = {}
    for per_topic, label in sizes:
        r = measure(per_topic, n_fast, n_naive, repeat)
        results[label] = r
        rows.append(
            f"| {int(r['papers'])} papers ({r['html_kb']:.0f} KB HTML, {r['text_kb']:.0f} KB text) "
            f"| {r['naive'] * 1e3:.2f} ms | {r['fast'] * 1e3:.3f} ms | "
            f"**{r['naive'] / r['fast']:.0f}x** |"
        )
    main_r = results[20]
    ok_ratio = main_r["naive"] / main_r["fast"] >= 30
    ok_time = main_r["fast"] <= 1.5e-3
    lines = [
        "## render: digest HTML + text + MIME per subscriber",
        "",
        "Per message: render the HTML and text parts and assemble the MIME message. Naive: render,",
        "`premailer.transform` on every message, `EmailMessage` + `as_bytes`. Fast: the template's",
        "CSS inlined once per renderer, per-paper values memoized, hand-assembled quoted-printable",
        f"MIME. {n_fast} distinct subscribers per fast batch (fresh renderer: caches start cold),",
        f"{n_naive} per naive batch, median of {repeat} batches.",
        "",
        "| digest | naive per message | fast per message | speed-up |",
        "|---|---|---|---|",
        *rows,
        "",
        "Where the time goes (20 papers, per message):",
        "",
        "| step | naive | fast | speed-up |",
        "|---|---|---|---|",
        f"| render HTML + text | {main_r['render_naive'] * 1e3:.2f} ms | "
        f"{main_r['render_fast'] * 1e3:.3f} ms | {main_r['render_naive'] / main_r['render_fast']:.0f}x |",
        f"| MIME assembly | {main_r['mime_naive'] * 1e3:.2f} ms | {main_r['mime_fast'] * 1e3:.3f} ms | "
        f"{main_r['mime_naive'] / main_r['mime_fast']:.0f}x |",
        f"| once per run: build the renderer (premailer on the template) | | "
        f"{main_r['setup'] * 1e3:.0f} ms | |",
        "",
        f"Targets (20 papers): at least 30x: **{'met' if ok_ratio else 'NOT met'}** "
        f"({main_r['naive'] / main_r['fast']:.0f}x); at most 1.5 ms per message: "
        f"**{'met' if ok_time else 'NOT met'}** ({main_r['fast'] * 1e3:.3f} ms).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(main())
