"""Issue 16, items 1 and 2: nothing but a fresh confirmation from the address makes an address
that unsubscribed, was suppressed or erased a subscriber again: not an import of an export,
not ``subscribers add``, not the config's ``subscribers:`` list, not a replayed confirmation
link. Real app, real SMTP server, SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import hmac
import io
import re
from pathlib import Path

import yaml
from fastapi.testclient import TestClient
from sqlalchemy import inspect, text

from newsletter.addresses import address_key, normalize_address
from newsletter.clock import utcnow
from newsletter.config import Config, load_config
from newsletter.models import SubscriberStatus
from newsletter.store import Store
from newsletter.subscribe import Subscriptions, forgotten_key
from tests.conftest import NOW, SmtpServer, write_config
from tests.security.helpers import last_link, newsletter, subscribe
from tests.store.test_edition_papers import _downgrade
from tests.web.conftest import Clock, link_to

UNSUBSCRIBED = SubscriberStatus.UNSUBSCRIBED
NAIVE = NOW.replace(tzinfo=None)


def confirmed(client: TestClient, smtp: SmtpServer, email: str) -> None:
    assert subscribe(client, email) == 200
    r = client.post(last_link(smtp, email, "confirm"))
    assert r.status_code == 200 and "You are subscribed" in r.text


def status(store: Store, email: str) -> SubscriberStatus | None:
    sub = store.get_subscriber(email)
    return None if sub is None else sub.status


def test_import_of_an_export_keeps_everyone_who_said_no_out(
    client: TestClient,
    smtp_server: SmtpServer,
    web_config: Config,
    web_store: Store,
    service: Subscriptions,
    clock: Clock,
    tmp_path: Path,
) -> None:
    for who in ("ada", "bob", "cyd"):
        confirmed(client, smtp_server, f"{who}@example.org")
    clock.advance(minutes=5)
    bob = web_store.get_subscriber("bob@example.org")
    assert bob is not None and web_store.unsubscribe_id(bob.id, clock())
    web_store.set_status("cyd@example.org", SubscriberStatus.SUPPRESSED, clock())

    export = newsletter(web_config, "subscribers", "export")
    assert export.exit_code == 0
    rows = list(csv.DictReader(io.StringIO(export.output)))
    assert {r["email"]: r["status"] for r in rows} == {
        "ada@example.org": "active",
        "bob@example.org": "unsubscribed",
        "cyd@example.org": "suppressed",
    }
    extra = [
        "dee@example.org,Dee,complained,rendering,UTC,,daily,,",
        "eve@example.org,Eve,pending,rendering,UTC,,daily,,",
        "fay@example.org,Fay,bogus,rendering,UTC,,daily,,",
    ]
    people = tmp_path / "export.csv"
    people.write_text(export.output + "\n".join(extra) + "\n", encoding="utf-8")
    for who in ("ada", "bob", "cyd"):  # a fresh database: the file is all it knows
        assert web_store.remove_subscriber(f"{who}@example.org")

    result = newsletter(web_config, "subscribers", "import", str(people))
    assert result.exit_code == 1, result.output  # two rows refused, by line, saying why
    assert "export.csv:6: status 'pending'" in result.output
    assert "export.csv:7: status 'bogus'" in result.output
    assert "added 4 (3 of them kept unsubscribed/suppressed)" in result.output
    assert status(web_store, "ada@example.org") is SubscriberStatus.ACTIVE
    assert status(web_store, "bob@example.org") is UNSUBSCRIBED
    assert status(web_store, "cyd@example.org") is SubscriberStatus.SUPPRESSED
    assert status(web_store, "dee@example.org") is SubscriberStatus.SUPPRESSED
    assert status(web_store, "eve@example.org") is None
    assert status(web_store, "fay@example.org") is None

    # The same people in a file that says "active": still no.
    again = tmp_path / "again.csv"
    again.write_text(
        "email,topics\nbob@example.org,rendering\nCyd@Example.org,rendering\n", encoding="utf-8"
    )
    result = newsletter(web_config, "subscribers", "import", str(again))
    assert result.exit_code == 1
    assert re.search(
        r"again\.csv:2: bob@example\.org: unsubscribed on \d{4}-\d\d-\d\d; stays unsubscribed",
        result.output,
    )
    assert "until they confirm by email" in result.output
    assert "again.csv:3: cyd@example.org: suppressed" in result.output  # whatever the case
    assert status(web_store, "bob@example.org") is UNSUBSCRIBED
    assert status(web_store, "Cyd@example.org") is None
    assert [s.email for s in web_store.said_no("CYD@example.org")] == ["cyd@example.org"]


def test_add_and_the_config_list_never_reactivate_or_bring_back_the_erased(
    client: TestClient,
    smtp_server: SmtpServer,
    web_config: Config,
    web_store: Store,
    service: Subscriptions,
    clock: Clock,
    tmp_path: Path,
) -> None:
    clock.t = utcnow()  # the CLI signs its invitation on the real clock
    confirmed(client, smtp_server, "bob@example.org")
    confirmed(client, smtp_server, "dan@example.org")
    bob = web_store.get_subscriber("bob@example.org")
    assert bob is not None and web_store.unsubscribe_id(bob.id, clock())
    assert service.forget("dan@example.org")  # erased: the row is gone, a keyed hash stays
    assert web_store.get_subscriber("dan@example.org") is None and web_store.any_forgotten()

    for email in ("bob@example.org", "BOB@example.org"):
        result = newsletter(web_config, "subscribers", "add", email, "--topic", "rendering")
        assert result.exit_code == 1
        assert f"bob@example.org: unsubscribed on {clock():%Y-%m-%d}; stays unsubscribed" in (
            result.output
        )
        assert "newsletter subscribers invite" in result.output
    assert status(web_store, "bob@example.org") is UNSUBSCRIBED
    assert web_store.said_no("BOB@example.org") == [web_store.get_subscriber("bob@example.org")]
    result = newsletter(web_config, "subscribers", "add", "dan@example.org", "--topic", "rendering")
    assert result.exit_code == 1 and "dan@example.org: erased (--forget) on" in result.output
    assert web_store.get_subscriber("dan@example.org") is None

    # The config's subscribers: list adds new people only.
    data = yaml.safe_load(web_config.path.read_text())
    data["subscribers"] = [
        {"email": "dan@example.org", "topics": ["rendering"]},
        {"email": "bob@example.org", "topics": ["rendering"]},
        {"email": "eve@example.org", "topics": ["rendering"]},
    ]
    seeded = load_config(write_config(tmp_path, data, "seeded.yaml"))
    result = newsletter(seeded, "db", "upgrade")
    assert result.exit_code == 0, result.output
    assert "Added 1 subscriber from" in result.output
    assert "subscribers[0]: dan@example.org: erased (--forget)" in result.output
    assert status(web_store, "eve@example.org") is SubscriberStatus.ACTIVE
    assert status(web_store, "bob@example.org") is UNSUBSCRIBED
    assert web_store.get_subscriber("dan@example.org") is None
    assert newsletter(seeded, "send", "--dry-run").exit_code in (0, 1)  # seeding again: same
    assert web_store.get_subscriber("dan@example.org") is None

    # The way back: the address confirms by email; then the hash goes too.
    invite = newsletter(
        web_config, "subscribers", "invite", "dan@example.org", "--topic", "rendering"
    )
    assert invite.exit_code == 0 and "Mailed a confirmation link" in invite.output
    mail = smtp_server.messages_to("dan@example.org")[-1]
    assert mail["Subject"] == "Confirm your subscription"
    clock.t = utcnow()
    assert client.post(link_to(mail, "confirm")).status_code == 200
    assert status(web_store, "dan@example.org") is SubscriberStatus.ACTIVE
    assert not web_store.any_forgotten()


def test_a_confirmation_link_confirms_once_and_never_after_unsubscribing(
    client: TestClient,
    smtp_server: SmtpServer,
    web_store: Store,
    service: Subscriptions,
    clock: Clock,
) -> None:
    assert subscribe(client, "ada@example.org") == 200
    first = last_link(smtp_server, "ada@example.org", "confirm")
    assert subscribe(client, "ada@example.org") == 200  # a second link, never used
    second = last_link(smtp_server, "ada@example.org", "confirm")
    assert first != second
    done = client.post(first)
    assert done.status_code == 200 and "/manage/" in done.text

    again = client.post(first)  # a double click: harmless, and hands out nothing
    assert again.status_code == 200 and "already subscribed" in again.text
    assert "/manage/" not in again.text and "/unsubscribe/" not in again.text

    ada = web_store.get_subscriber("ada@example.org")
    assert ada is not None
    unsubscribe = service.links(ada).unsubscribe.removeprefix("https://papers.example.org")
    clock.advance(minutes=1)
    assert client.post(unsubscribe).status_code == 200  # one-click, from a digest
    assert status(web_store, "ada@example.org") is UNSUBSCRIBED

    for link in (first, second):  # the replay of the issue; and a link from before
        page = client.get(link)
        assert "Confirm subscription" not in page.text
        r = client.post(link)
        assert r.status_code == 400 and "can no longer be used" in r.text
        assert "/manage/" not in r.text
        token = link.rsplit("/", 1)[1]
        api = client.post("/api/confirm", json={"token": token})
        assert api.status_code == 409 and api.json()["field"] == "token"
        assert status(web_store, "ada@example.org") is UNSUBSCRIBED

    # Subscribing again is a new request and a new link: that one works (once).
    assert subscribe(client, "ada@example.org") == 200
    fresh = last_link(smtp_server, "ada@example.org", "confirm")
    assert client.post(fresh).status_code == 200
    assert status(web_store, "ada@example.org") is SubscriberStatus.ACTIVE
    record = web_store.consent_record(ada.id)
    assert record is not None and len(record["history"]) == 2


def test_a_confirmation_link_never_brings_back_an_erased_address(
    client: TestClient,
    smtp_server: SmtpServer,
    web_store: Store,
    service: Subscriptions,
    clock: Clock,
) -> None:
    assert subscribe(client, "ada@example.org") == 200
    link = last_link(smtp_server, "ada@example.org", "confirm")
    assert client.post(link).status_code == 200
    clock.advance(minutes=1)
    assert service.forget("ada@example.org")
    clock.advance(minutes=1)
    r = client.post(link)
    assert r.status_code == 400 and "/manage/" not in r.text
    assert web_store.get_subscriber("ada@example.org") is None


# --- issue 27, item 6: letter case beyond ASCII ----------------------------------------------------


def test_add_refuses_an_address_that_said_no_in_other_non_ascii_letter_case(
    web_config: Config, web_store: Store, clock: Clock
) -> None:
    """SQLite's lower() folds ASCII letters only: ``émile@`` was a stranger to ``Émile@``."""
    added = newsletter(
        web_config, "subscribers", "add", "Émile@example.org", "--topic", "rendering"
    )
    assert added.exit_code == 0, added.output
    emile = web_store.get_subscriber("Émile@example.org")
    assert emile is not None and web_store.unsubscribe_id(emile.id, utcnow())

    for spelling in ("émile@example.org", "ÉMILE@EXAMPLE.ORG", "émile@Example.Org"):
        result = newsletter(web_config, "subscribers", "add", spelling, "--topic", "rendering")
        assert result.exit_code == 1, result.output
        assert "Émile@example.org: unsubscribed on" in result.output
        assert web_store.get_subscriber(spelling) is None
    assert [s.email for s in web_store.said_no("émile@example.org")] == ["Émile@example.org"]
    assert web_store.count_subscribers(SubscriberStatus.ACTIVE) == 0


def test_import_refuses_an_address_that_said_no_in_other_non_ascii_letter_case(
    web_config: Config, web_store: Store, tmp_path: Path
) -> None:
    added = newsletter(web_config, "subscribers", "add", "Ōta@example.org", "--topic", "rendering")
    assert added.exit_code == 0, added.output
    ota = web_store.get_subscriber("Ōta@example.org")
    assert ota is not None and web_store.unsubscribe_id(ota.id, utcnow())

    people = tmp_path / "people.csv"
    people.write_text(
        "email,name,status,topics\n"
        "ōta@example.org,Ōta,active,rendering\n"
        "ÉVA@example.org,Éva,unsubscribed,rendering\n"
        "éva@example.org,Éva,active,rendering\n"  # said no earlier in the same file
        "zoë@example.org,Zoë,active,rendering\n",
        encoding="utf-8",
    )
    result = newsletter(web_config, "subscribers", "import", str(people))
    assert result.exit_code == 1, result.output
    assert "people.csv:2: Ōta@example.org: unsubscribed on" in result.output
    assert "people.csv:4: ÉVA@example.org: unsubscribed" in result.output
    assert web_store.get_subscriber("ōta@example.org") is None
    assert web_store.get_subscriber("éva@example.org") is None
    assert status(web_store, "ÉVA@example.org") is UNSUBSCRIBED
    assert status(web_store, "zoë@example.org") is SubscriberStatus.ACTIVE


OLD_ROWS = ("Émile@example.org", "ŌTA@bücher.example", "Bob@example.org", "zoë@example.org")


def test_migration_0012_gives_every_existing_subscriber_its_address_key(db_url: str) -> None:
    """Rows written before 0012 get their key, in Python (both backends), and are found by it;
    the downgrade drops the column and keeps SQLite's AUTOINCREMENT."""
    store = Store(db_url)
    try:
        store.upgrade("0011")
        with store.engine.begin() as conn:
            for i, email in enumerate(OLD_ROWS):
                conn.execute(
                    text(
                        "INSERT INTO subscribers (email, name, status, timezone, created, "
                        "status_changed, frequency, permanent_failures) VALUES (:e, '', :s, "
                        "'UTC', :now, :now, 'daily', 0)"
                    ),
                    {"e": email, "s": "unsubscribed" if i % 2 == 0 else "active", "now": NAIVE},
                )
        store.upgrade()
        with store.engine.connect() as conn:
            keys = dict(conn.execute(text("SELECT email, email_key FROM subscribers")).all())
        assert keys == {email: address_key(email) for email in OLD_ROWS}
        assert keys["ŌTA@bücher.example"] == "ōta@bücher.example"
        assert [s.email for s in store.said_no("émile@EXAMPLE.org")] == ["Émile@example.org"]
        assert [s.email for s in store.said_no("ōta@xn--bcher-kva.example")] == []  # active
        found = store.subscriber_for_address("ōta@xn--bcher-kva.example")
        assert found is not None and found.email == "ŌTA@bücher.example"

        _downgrade(store, "0011")
        with store.engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("subscribers")}
            assert "email_key" not in columns
            assert not inspect(conn).has_table("webhook_tokens")
            if store.dialect == "sqlite":
                sql = conn.execute(
                    text("SELECT sql FROM sqlite_master WHERE name = 'subscribers'")
                ).scalar_one()
                assert "AUTOINCREMENT" in sql
        store.upgrade()
        assert store.said_no("ÉMILE@example.org") != []
    finally:
        store.close()


def test_erased_address_hashes_made_before_0012_still_match() -> None:
    """``forgotten_key`` hashes the address key, which for a normalized address is the
    ``casefold()`` the stored hashes were made of: they stay readable."""
    secret = "a-test-secret-that-signs-links-0123456789"
    for raw in ("Ada@Example.org", "Émile@example.org", "ōta@straße.de", "Zoë@ΣΊΣΥΦΟΣ.gr"):
        address = normalize_address(raw)
        old = hmac.new(
            secret.encode(), b"forgotten:" + address.casefold().encode(), "sha256"
        ).hexdigest()
        assert forgotten_key(secret, address) == old
        assert forgotten_key(secret, address.upper()) == old
