"""The config's ``subscribers:`` list put into the database (:func:`seed_subscribers`)."""

from __future__ import annotations

from collections.abc import Callable

from newsletter.config import Config
from newsletter.models import SubscriberStatus
from newsletter.services import Services
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from newsletter.subscriber_lists.from_config import seed_subscribers
from tests.conftest import base_config

SEEDS = [
    {"email": "ada@example.org", "name": "Ada", "topics": ["gpu-kernels"]},
    {"email": "bob@example.org", "topics": ["rendering"], "timezone": "Asia/Tokyo"},
]


def _config(make_config: Callable[..., Config], store: Store) -> Config:
    url = store.engine.url.render_as_string(hide_password=False)
    return make_config(base_config(url, subscribers=SEEDS, schedule={"timezone": "Europe/Berlin"}))


def test_adds_the_listed_subscribers_once_with_their_consent(
    make_config: Callable[..., Config], store: Store
) -> None:
    config = _config(make_config, store)
    assert seed_subscribers(config, store) == 2
    ada = store.get_subscriber("ada@example.org")
    bob = store.get_subscriber("bob@example.org")
    assert ada is not None and bob is not None
    assert (ada.name, ada.topics, ada.status) == ("Ada", ("gpu-kernels",), SubscriberStatus.ACTIVE)
    assert ada.timezone == "Europe/Berlin"  # schedule.timezone when the seed names none
    assert bob.timezone == "Asia/Tokyo"
    consent = store.consent_record(ada.id) or {}
    assert consent["how"] == "config" and consent["where"] == str(config.path)

    assert seed_subscribers(config, store) == 0  # present already: nothing added, nothing changed
    assert store.get_subscriber("ada@example.org") == ada


def test_an_erased_address_is_not_added_back_and_the_report_says_why(
    make_config: Callable[..., Config], store: Store
) -> None:
    config = _config(make_config, store)
    seed_subscribers(config, store)
    assert Subscriptions(Services(config, store)).forget("bob@example.org")
    notes: list[str] = []
    assert seed_subscribers(config, store, notes.append) == 0
    assert store.get_subscriber("bob@example.org") is None
    assert len(notes) == 1
    assert notes[0].startswith(f"{config.path}: subscribers[1]: bob@example.org: erased (--forget)")
