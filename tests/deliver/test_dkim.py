"""DKIM signing: messages received by a real SMTP server verify against the published key."""

from __future__ import annotations

import base64
import shutil
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dkim
import pytest

from newsletter.config import Config, load_config
from newsletter.errors import ConfigError
from newsletter.services import Services
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from tests.conftest import SmtpServer, base_config, write_config
from tests.sends import run_send

NOW = datetime(2026, 11, 17, 12, 0, tzinfo=UTC)
SELECTOR = "news2026"

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="openssl (to make a test RSA key) is not installed"
)


@pytest.fixture(scope="module")
def key_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """A fresh 2048-bit RSA key and its DNS TXT record (as `dknewkey` would publish it)."""
    d = tmp_path_factory.mktemp("dkim")
    key = d / "news2026.key"
    subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
    der = subprocess.run(
        ["openssl", "rsa", "-in", str(key), "-pubout", "-outform", "DER"],
        check=True,
        capture_output=True,
    ).stdout
    return key, b"v=DKIM1; k=rsa; p=" + base64.b64encode(der)


def dns_for(record: bytes, domain: str = "papers.example.org") -> Callable[..., bytes | None]:
    def lookup(name: bytes, timeout: int = 5) -> bytes | None:
        return record if name == f"{SELECTOR}._domainkey.{domain}.".encode() else None

    return lookup


@pytest.fixture
def signed_setup(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer, key_pair: tuple[Path, bytes]
) -> Iterator[tuple[Config, Store]]:
    key, _ = key_pair
    shutil.copy(key, tmp_path / "dkim.key")
    data = base_config(
        db_url,
        smtp_server,
        dkim={"selector": SELECTOR, "private_key_file": "dkim.key"},
        web={"secret_key": "dkim-test-secret-0123456789abcdef"},
    )
    config = load_config(write_config(tmp_path, data))
    store = Store(config.database_url)
    store.upgrade()
    store.add_subscriber(
        "kernels@example.org", topics=["gpu-kernels"], now=NOW, name="Zoë Kernel-Ärger"
    )
    run_fetch(config, store, NOW - timedelta(hours=1))
    yield config, store
    store.close()


def test_a_sent_digest_verifies_and_a_tampered_one_does_not(
    signed_setup: tuple[Config, Store], smtp_server: SmtpServer, key_pair: tuple[Path, bytes]
) -> None:
    config, store = signed_setup
    report = run_send(config, store, NOW)
    assert report.sent == 1
    data = smtp_server.received[0].data
    assert data.startswith(b"DKIM-Signature:")
    signature = smtp_server.received[0].message["DKIM-Signature"]
    assert f"s={SELECTOR}" in signature and "d=papers.example.org" in signature
    for header in ("list-unsubscribe", "list-unsubscribe-post", "from", "subject"):
        assert header in signature.lower()
    dns = dns_for(key_pair[1])
    assert dkim.verify(data, dnsfunc=dns)
    # A relay that rewrites the body or a header breaks the signature: verification is real.
    assert not dkim.verify(data.replace(b"GPU", b"CPU", 1), dnsfunc=dns)
    assert not dkim.verify(data.replace(b"Subject: ", b"Subject: Re: ", 1), dnsfunc=dns)
    # The published key of another selector does not verify it either.
    assert not dkim.verify(data, dnsfunc=dns_for(b"v=DKIM1; k=rsa; p=" + b"A" * 392))


def test_confirmation_mails_are_signed_too(
    signed_setup: tuple[Config, Store], smtp_server: SmtpServer, key_pair: tuple[Path, bytes]
) -> None:
    config, store = signed_setup
    subs = Subscriptions(Services(config, store, clock=lambda: NOW))
    choices = subs.choices(["gpu-kernels"])
    subs.request("new-reader@example.org", choices, via="web", origin="127.0.0.1")
    (received,) = smtp_server.received
    assert received.rcpt_tos == ["new-reader@example.org"]
    assert dkim.verify(received.data, dnsfunc=dns_for(key_pair[1]))


def test_missing_key_is_a_config_error_naming_the_key(
    tmp_path: Path, smtp_server: SmtpServer
) -> None:
    data = base_config(
        f"sqlite:///{tmp_path / 'n.db'}",
        smtp_server,
        dkim={"selector": SELECTOR, "private_key_file": "keys/missing.key"},
        web={"secret_key": "dkim-test-secret-0123456789abcdef"},
    )
    config = load_config(write_config(tmp_path, data))
    store = Store(config.database_url)
    store.upgrade()
    with pytest.raises(ConfigError, match=r"dkim\.private_key_file: cannot read .*missing\.key"):
        run_send(config, store, NOW)
    assert smtp_server.received == []
    store.close()


def test_a_key_that_cannot_sign_is_reported(tmp_path: Path, smtp_server: SmtpServer) -> None:
    (tmp_path / "bad.key").write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n")
    data = base_config(
        f"sqlite:///{tmp_path / 'n.db'}",
        smtp_server,
        dkim={"selector": SELECTOR, "private_key_file": "bad.key"},
        web={"secret_key": "dkim-test-secret-0123456789abcdef"},
    )
    config = load_config(write_config(tmp_path, data))
    store = Store(config.database_url)
    store.upgrade()
    with pytest.raises(ConfigError, match=r"dkim: the private key cannot sign"):
        run_send(config, store, NOW)
    store.close()


def test_dkim_settings_are_checked_at_load(tmp_path: Path) -> None:
    data = base_config(
        f"sqlite:///{tmp_path / 'n.db'}",
        dkim={"selector": "bad selector!", "headers": ["Subject"]},
    )
    with pytest.raises(ConfigError) as info:
        load_config(write_config(tmp_path, data))
    text = str(info.value)
    assert "dkim.selector" in text and "dkim.headers" in text and "From" in text
