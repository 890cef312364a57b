"""``newsletter rank`` and ``newsletter feedback``: a reader's ranking and their votes.

``rank`` prints what :func:`newsletter.operations.preview.rank_preview` computes (scores, reasons, how
each score was made); ``feedback`` records or lists the "more/less like this" votes through
:class:`newsletter.subscribe.votes.Feedback`, as the digest's links do. Both show each title as the
digest does (LaTeX and flattened math as text: :func:`newsletter.digest.latex.to_text`).
"""

from __future__ import annotations

import click
from rich import box
from rich.markup import escape
from rich.table import Table

from newsletter.cli import output
from newsletter.cli.app import Context, cli, errors, known_subscriber
from newsletter.cli.output import shown
from newsletter.text import counted


@cli.command("rank")
@click.option(
    "--to", "to", required=True, metavar="EMAIL", help="The subscriber whose ranking to show."
)
@click.option("--explain", is_flag=True, help="Show how each score was made.")
@click.pass_obj
def rank_cmd(obj: Context, to: str, explain: bool) -> None:
    """Print what a subscriber would get today, with scores and reasons (sends nothing)."""
    from newsletter.digest.latex import to_text
    from newsletter.operations.preview import rank_preview

    with errors():
        settings = obj.config.settings
        _, sub = known_subscriber(obj, to)
        services = obj.services()
        ranking = rank_preview(services, sub, services.clock())
    output.console.print(
        f"{shown(sub.email)} ({sub.status.value}): topics {shown(', '.join(sub.topics)) or 'none'}; "
        f"{counted(ranking.papers, 'paper')} first seen here in the last "
        f"{counted(settings.digest.lookback_days, 'day')} (digest.lookback_days; the ages "
        f"below count from publication), {ranking.already_sent} already sent to them"
        + (f"; {ranking.votes} of their votes reorder their topics." if ranking.votes else "."),
        highlight=False,
    )
    if ranking.missing_topics:
        output.console.print(
            f"Topics no longer in the config (ignored): {shown(', '.join(ranking.missing_topics))}"
        )
    if ranking.matching:
        output.console.print(f"Matching: {ranking.matching}", highlight=False, markup=False)
    for section in ranking.sections:
        output.console.print(
            f"\n[bold]{shown(section.title)}[/] ({len(section.papers)})", highlight=False
        )
        already = [
            f"already sent today: {counted(section.sent_today, 'paper')}"
            if section.sent_today
            else "",
            f"already sent in earlier digests: {counted(section.sent_before, 'paper')}"
            if section.sent_before
            else "",
        ]
        if any(already):
            output.console.print("  " + "; ".join(a for a in already if a) + " (never sent twice)")
        elif not section.papers:
            output.console.print("  nothing strong in this topic today")
        left_out = section.left_out
        if left_out:
            output.console.print(
                f"  ({left_out} weaker {'match' if left_out == 1 else 'matches'} left out: a "
                "single passing mention, or far below the best; see docs/topics.md)",
                highlight=False,
            )
        for n, ranked in enumerate(section.papers, start=1):
            item = ranked.item
            output.console.print(
                f"{n:3}. {item.score:8.3f}  {shown(item.paper.key)}  "
                f"{shown(to_text(item.paper.title))}",
                highlight=False,
            )
            output.console.print(f"               {shown(item.reason)}", highlight=False)
            if explain:
                topic = "" if settings.digest.group_by_topic else f" (topic {shown(item.topic)})"
                for line in ranked.explanation.lines():
                    output.console.print(f"               {shown(line)}{topic}", highlight=False)
                    topic = ""


# ---------------------------------------------------------------------------- feedback


@cli.command()
@click.argument("email")
@click.option(
    "--more",
    "more",
    multiple=True,
    metavar="PAPER",
    help="Show more papers like this (repeatable).",
)
@click.option(
    "--less",
    "less",
    multiple=True,
    metavar="PAPER",
    help="Show fewer papers like this (repeatable).",
)
@click.option(
    "--clear", "clear", multiple=True, metavar="PAPER", help="Withdraw a vote (repeatable)."
)
@click.pass_obj
def feedback(
    obj: Context, email: str, more: tuple[str, ...], less: tuple[str, ...], clear: tuple[str, ...]
) -> None:
    """Vote "more like this" / "less like this" on papers for a subscriber, or list their votes.

    The same votes as the links under each paper of the digest: papers like a "more" paper rank
    higher for that reader, papers like a "less" one lower. A new vote on a paper replaces the
    old one. PAPER is a stored paper's arXiv id, with or without version, or its arXiv link.
    Every PAPER is checked first: if one is unknown, nothing is recorded. Without options, the
    subscriber's votes are listed.

    \b
    newsletter feedback ada@example.org --more 2611.00019 --more hep-th/9901001v2
    newsletter feedback ada@example.org --less https://arxiv.org/abs/2611.00042v1
    newsletter feedback ada@example.org --clear 2611.00019
    newsletter feedback ada@example.org
    """
    from newsletter.digest.latex import to_text
    from newsletter.subscribe.votes import Feedback

    with errors():
        store, sub = known_subscriber(obj, email)
        service = Feedback(store, None, obj.services().clock)
        if more or less or clear:
            done = service.apply(sub, more, less, clear)
            for what, paper in done:
                verb = {"more": "more like", "less": "less like", "clear": "no vote on"}[what]
                output.console.print(
                    f"{escape(sub.email)}: {verb} {escape(paper.key)} "
                    f"{escape(to_text(paper.title))}",
                    highlight=False,
                )
            return
        votes = service.votes(sub)
    if not votes:
        output.console.print(
            f"{escape(sub.email)} has no votes. Add one: newsletter feedback {escape(sub.email)} "
            "--more PAPER",
            highlight=False,
        )
        return
    table = Table(box=box.SIMPLE)
    for col in ("paper", "vote", "title", "topic", "when"):
        table.add_column(col, overflow="fold")
    for v in votes:
        table.add_row(
            escape(v.paper_key),
            "more" if v.more else "less",
            escape(to_text(v.title)),
            escape(v.topic or ""),
            v.created_at.date().isoformat(),
        )
    output.console.print(table)
