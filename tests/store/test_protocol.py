"""The concrete Store satisfies the Store protocols (newsletter/store/protocol.py): each method
a protocol names exists on Store with the same signature, and each public method of Store is
named by ``StoreProtocol``. (mypy checks the same statically: protocol.py assigns a Store to a
``StoreProtocol`` and to a ``SendStore`` under ``TYPE_CHECKING``.)"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from newsletter.store import Store
from newsletter.store import protocol as p
from newsletter.store.memory import MemoryStore

PROTOCOLS = [
    p.PaperReads,
    p.Papers,
    p.SubscriberReads,
    p.Subscribers,
    p.Consent,
    p.Ledger,
    p.LedgerState,
    p.Operations,
    p.Runs,
    p.Sources,
    p.Bounces,
    p.Schema,
    p.SendStore,
    p.StoreProtocol,
]

ATTRIBUTES: set[str] = set()
"""Protocol members that are data, not methods (none: the raw engine is not part of it)."""


def _members(protocol: type) -> set[str]:
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls is object or cls.__name__ in ("Protocol", "Generic"):
            continue
        names |= {n for n in vars(cls) if not n.startswith("_")}
        names |= set(getattr(cls, "__annotations__", {}))
    return names


def _public_methods(cls: type) -> set[str]:
    return {
        n
        for n in dir(cls)
        if not n.startswith("_")
        and (inspect.isfunction(getattr(cls, n)) or isinstance(getattr(cls, n), property))
    }


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda c: c.__name__)
def test_store_has_every_protocol_method_with_its_signature(protocol: type) -> None:
    members = _members(protocol)
    assert members, protocol
    for name in sorted(members):
        if name in ATTRIBUTES:
            assert name in vars(Store("sqlite://")), name
            continue
        assert hasattr(Store, name), f"{protocol.__name__}.{name} is not on Store"
        wanted, have = getattr(protocol, name), getattr(Store, name)
        if isinstance(wanted, property):
            assert isinstance(have, property), name
            continue
        assert inspect.signature(wanted) == inspect.signature(have), (
            f"{protocol.__name__}.{name}{inspect.signature(wanted)} "
            f"!= Store.{name}{inspect.signature(have)}"
        )


@pytest.mark.parametrize("protocol", [p.SendStore, p.LedgerSession], ids=lambda c: c.__name__)
def test_the_memory_store_has_every_send_store_method_with_its_signature(protocol: type) -> None:
    """The in-memory store is a whole ``SendStore`` (its session a ``LedgerSession``), with the
    SQL store's signatures: a caller cannot tell them apart."""
    have_cls = MemoryStore if protocol is p.SendStore else type(MemoryStore().ledger_session())
    for name in sorted(_members(protocol)):
        wanted, have = getattr(protocol, name), getattr(have_cls, name, None)
        assert have is not None, f"{protocol.__name__}.{name} is not on {have_cls.__name__}"
        assert inspect.signature(wanted) == inspect.signature(have), name


def test_store_protocol_names_every_public_method_of_store() -> None:
    assert _public_methods(Store) - _members(p.StoreProtocol) == set()


def test_the_send_store_is_the_part_of_the_store_the_send_path_reads_and_writes() -> None:
    send = _members(p.SendStore)
    assert {
        "claim_editions",
        "force_edition",
        "mark_edition",
        "release_edition",
        "apply_ledger",
        "sent_paper_ids",
        "votes_for",
        "last_sent",
        "iter_subscribers",
        "count_subscribers",
        "start_run",
        "finish_run",
    } <= send
    # and not the operators' or the subscription pages' parts
    assert not send & {"settle_unknown", "confirm_subscriber", "record_complaint", "upgrade"}


@pytest.mark.slow
def test_store_satisfies_the_protocols_for_mypy(tmp_path: Path) -> None:
    """mypy (strict, the project's settings) accepts a Store where a ``StoreProtocol`` or a
    ``SendStore`` is wanted, and a MemoryStore where a ``SendStore`` is: in the send path's
    ``Services[SendStore]`` too (``send``, ``send_editions``, the builder). It refuses
    something that lacks their methods, and a MemoryStore's services where a plain
    ``Services`` (a ``Store``'s) is wanted."""
    mypy = pytest.importorskip("mypy.api")
    good = tmp_path / "good.py"
    good.write_text(
        "from datetime import datetime\n\n"
        "from newsletter.config import Config\n"
        "from newsletter.edition import EditionBuilder, SendRequest, Services, send\n"
        "from newsletter.edition import send_editions\n"
        "from newsletter.store import Store\n"
        "from newsletter.store.memory import MemoryStore\n"
        "from newsletter.store.protocol import SendStore, StoreProtocol\n\n"
        "a: StoreProtocol = Store('sqlite://')\n"
        "b: SendStore = Store('sqlite://')\n"
        "c: SendStore = MemoryStore()\n\n\n"
        "def in_memory(config: Config, now: datetime) -> None:\n"
        "    services = Services(config, MemoryStore())\n"
        "    send(services, SendRequest())\n"
        "    send_editions(services, now, SendRequest())\n"
        "    EditionBuilder(services, now)\n"
        "    send(Services(config, Store('sqlite://')), SendRequest())\n"
    )
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from newsletter.config import Config\n"
        "from newsletter.services import Services\n"
        "from newsletter.store.memory import MemoryStore\n"
        "from newsletter.store.protocol import SendStore\n\n\n"
        "class Fake:\n"
        "    def count_subscribers(self) -> int:\n"
        "        return 0\n\n\n"
        "c: SendStore = Fake()\n\n\n"
        "def web(config: Config) -> Services:\n"
        "    return Services(config, MemoryStore())\n"
    )
    root = str(Path(__file__).resolve().parent.parent.parent)
    out, err, status = mypy.run(["--strict", "--config-file", f"{root}/pyproject.toml", str(good)])
    assert status == 0, out + err
    out, _, status = mypy.run(["--strict", "--config-file", f"{root}/pyproject.toml", str(bad)])
    assert status == 1 and '"Fake", variable has type "SendStore"' in out, out
    assert 'Argument 2 to "Services" has incompatible type "MemoryStore"' in out, out
