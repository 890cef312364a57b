"""``newsletter subscribers add``, ``set``, ``invite`` and ``remove``: one subscriber changed.

The consent rules (who may be added, who must confirm by email) and the preference checks are
:mod:`newsletter.subscribe`'s, the same as the web pages'; here they become options and
one-line errors. Listing, showing, exporting and importing are in
:mod:`newsletter.cli.subscriber_lists`.
"""

from __future__ import annotations

import shlex

import click
from rich.markup import escape

from newsletter.cli import output
from newsletter.cli.app import Context, checked_address, cli, errors, known_subscriber
from newsletter.cli.output import fail, shown
from newsletter.models import SubscriberStatus
from newsletter.text import counted, strip_controls


@cli.group()
def subscribers() -> None:
    """Add, import, export, list, show and remove subscribers."""


@subscribers.command("add")
@click.argument("email")
@click.option(
    "--topic", "topics", multiple=True, metavar="NAME", help="A topic to follow (repeatable)."
)
@click.option("--name", default="", help="Display name.")
@click.option("--timezone", "tz", default=None, help="IANA timezone (default: schedule.timezone).")
@click.pass_obj
def subscribers_add(
    obj: Context, email: str, topics: tuple[str, ...], name: str, tz: str | None
) -> None:
    """Add an active subscriber (an operator adding someone who has agreed).

    An address that unsubscribed, was suppressed or erased is not made active again: it
    stays so until it confirms by email (see 'newsletter subscribers invite').
    """
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from newsletter.addresses import InvalidAddress, normalize_name
    from newsletter.config.time_zones import not_a_zone
    from newsletter.subscribe import LIVE, consent_block

    with errors():
        config = obj.config
        address = checked_address(email)
        try:
            name = normalize_name(name)
        except InvalidAddress as e:
            fail(str(e))
        names = [t.name for t in config.settings.topics]
        if not topics:
            fail(
                f"name at least one --topic (available: {', '.join(names) or 'none; add topics to the config'})"
            )
        bad = [t for t in topics if t not in names]
        if bad:
            fail(f"unknown topic {', '.join(bad)} (available: {', '.join(names)})")
        timezone = tz or config.settings.schedule.timezone
        if why := not_a_zone(timezone):
            fail(why)
        try:
            ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            fail(f"unknown timezone {timezone!r}")
        services = obj.services()
        store, now = services.store, services.clock()
        existing = store.get_subscriber(address)
        if existing is None or existing.status not in LIVE:
            blocked = consent_block(config, store, address)
            if blocked is not None:
                fail(escape(blocked))
        sub, created = store.add_subscriber(
            address,
            name=name,
            topics=topics,
            timezone=timezone,
            now=now,
            consent={"how": "cli", "when": now.isoformat(), "where": "newsletter subscribers add"},
        )
    if created:
        output.console.print(
            f"Added {shown(sub.email)} ({shown(', '.join(sub.topics))}).", highlight=False
        )
    else:
        wanted = [
            *(f"--topic {t}" for t in topics if set(topics) != set(sub.topics)),
            *([f"--name {shlex.quote(name)}"] if name and name != sub.name else []),
            *([f"--timezone {tz}"] if tz and tz != sub.timezone else []),
        ]
        line = (
            f"{sub.email} is already a subscriber ({sub.status.value}; topics "
            f"{', '.join(sub.topics)}; timezone {sub.timezone})"
        )
        if wanted:
            line += (
                "; nothing changed: 'subscribers add' only adds. To change them: "
                f"newsletter subscribers set {sub.email} {' '.join(wanted)}"
            )
        output.console.print(escape(strip_controls(line + ".")), highlight=False, soft_wrap=True)


@subscribers.command("remove")
@click.argument("email")
@click.option(
    "--forget",
    is_flag=True,
    help="Delete the subscriber and their history instead of marking them unsubscribed.",
)
@click.pass_obj
def subscribers_remove(obj: Context, email: str, forget: bool) -> None:
    """Unsubscribe an address (no more digests), or erase it with --forget."""
    with errors():
        address = checked_address(email)
        services = obj.services()
        if forget:
            from newsletter.subscribe import Subscriptions

            ok = Subscriptions(services).forget(address)
        else:
            ok = services.store.set_status(address, SubscriberStatus.UNSUBSCRIBED, services.clock())
    if not ok:
        fail(f"{address} is not a subscriber")
    output.console.print(
        f"{'Erased' if forget else 'Unsubscribed'} {shown(address)}.", highlight=False
    )


_OPTION_OF_FIELD = {
    "topics": "--topic",
    "timezone": "--timezone",
    "send_hour": "--hour",
    "frequency": "--frequency",
    "name": "--name",
}


@subscribers.command("set")
@click.argument("email")
@click.option(
    "--topic",
    "topics",
    multiple=True,
    metavar="NAME",
    help="Follow exactly these topics (repeatable; replaces the current ones).",
)
@click.option("--timezone", "tz", metavar="ZONE", help="IANA timezone, e.g. Europe/Berlin.")
@click.option(
    "--hour",
    metavar="H",
    help="Preferred local hour of the digest, 0-23; 'default' for schedule.send_hour.",
)
@click.option("--frequency", type=click.Choice(["daily", "weekly"]), help="How often.")
@click.option("--name", default=None, help="Display name ('' clears it).")
@click.option(
    "--pause/--resume", "pause", default=None, help="Stop the digest for now, or start it again."
)
@click.pass_obj
def subscribers_set(
    obj: Context,
    email: str,
    topics: tuple[str, ...],
    tz: str | None,
    hour: str | None,
    frequency: str | None,
    name: str | None,
    pause: bool | None,
) -> None:
    """Change a subscriber's preferences (what the manage page changes); only the options
    given change.

    \b
    newsletter subscribers set ada@example.org --topic llm-serving --topic gpu-kernels
    newsletter subscribers set ada@example.org --timezone Asia/Tokyo --hour 8 --frequency weekly
    newsletter subscribers set ada@example.org --pause

    Only an active or paused subscriber can be changed: someone who unsubscribed becomes a
    subscriber again by confirming by email (newsletter subscribers invite).
    """
    from newsletter.addresses import InvalidAddress, normalize_name
    from newsletter.subscribe import LIVE, InvalidRequest, Subscriptions

    if not (topics or tz or hour or frequency or name is not None or pause is not None):
        fail(
            "nothing to change: give --topic, --timezone, --hour, --frequency, --name, "
            "--pause or --resume (see newsletter subscribers set --help)"
        )
    with errors():
        _, sub = known_subscriber(obj, email, seed=False)
        address = sub.email
        if sub.status not in LIVE:
            fail(
                f"{address} is {sub.status.value}; only an active or paused subscriber's "
                "preferences change (they subscribe again by confirming by email: "
                f"newsletter subscribers invite {address} --topic NAME)"
            )
        service = Subscriptions(obj.services())
        try:
            if hour is None:
                send_hour = sub.send_hour
            elif hour.strip().lower() == "default":
                send_hour = None
            elif hour.strip().isdigit():
                send_hour = int(hour)
            else:
                raise InvalidRequest("send_hour", f"{hour!r}: an hour from 0 to 23, or 'default'")
            choices = service.choices(
                topics or sub.topics, tz or sub.timezone, send_hour, frequency or sub.frequency
            )
            if name is not None:
                try:
                    name = normalize_name(name)
                except InvalidAddress as e:
                    raise InvalidRequest("name", str(e)) from e
        except InvalidRequest as e:
            fail(escape(f"{_OPTION_OF_FIELD.get(e.field, e.field)}: {e.reason}"))
        paused = sub.status is SubscriberStatus.PAUSED if pause is None else pause
        got = service.update(sub, choices, paused=paused, name=name)
    hour_text = "default" if got.send_hour is None else f"{got.send_hour:02d}:00"
    output.console.print(
        escape(
            f"{got.email}: {got.status.value}; topics {', '.join(got.topics)}; "
            f"timezone {got.timezone}; hour {hour_text}; {got.frequency.value}"
            + (f"; name {got.name}" if got.name else "")
        ),
        highlight=False,
        soft_wrap=True,
    )


@subscribers.command("invite")
@click.argument("email")
@click.option(
    "--topic", "topics", multiple=True, metavar="NAME", help="A topic to offer (repeatable)."
)
@click.option(
    "--timezone", "tz", metavar="ZONE", help="IANA timezone (default: schedule.timezone)."
)
@click.pass_obj
def subscribers_invite(obj: Context, email: str, topics: tuple[str, ...], tz: str | None) -> None:
    """Mail EMAIL a confirmation link: they become a subscriber only if they follow it.

    The way back for an address that unsubscribed, was suppressed or erased, when its owner
    asks you. Someone subscribed already gets a mail with their manage link instead. Counts
    against web.rate_limit.per_address like a request on the subscribe page.
    """
    from newsletter.subscribe import InvalidRequest, Outcome, Subscriptions

    with errors():
        address = checked_address(email)
        service = Subscriptions(obj.services())
        try:
            choices = service.choices(topics, tz)
        except InvalidRequest as e:
            fail(escape(f"{_OPTION_OF_FIELD.get(e.field, e.field)}: {e.reason}"))
        outcome = service.request(
            address, choices, via="operator invite", origin="newsletter subscribers invite"
        )
    if outcome is Outcome.LIMITED:
        rl = obj.config.settings.web.rate_limit
        fail(
            f"{address} was sent {counted(rl.per_address, 'mail')} in the last "
            f"{rl.per_address_window // 3600} h (web.rate_limit.per_address); nothing sent, "
            "try again later"
        )
    what = "a confirmation link" if outcome is Outcome.CONFIRM_SENT else "their manage link"
    output.console.print(escape(f"Mailed {what} to {address}."), highlight=False, soft_wrap=True)
