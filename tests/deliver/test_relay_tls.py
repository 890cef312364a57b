"""STARTTLS, implicit TLS and AUTH against a real aiosmtpd relay with a certificate made for
the test (``openssl``); the password comes from the environment variable the config names."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from newsletter.config import load_config
from newsletter.operations.smtp_sink import free_port
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from tests.conftest import NOW, base_config, write_config
from tests.sends import run_send
from tests.smtpfaults import FaultHandler, FaultServer

READER = "reader@example.org"


@pytest.fixture
def cert(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (.ci/system-deps installs it)")
    key, crt = tmp_path / "relay.key", tmp_path / "relay.crt"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout", str(key), "-out", str(crt),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return crt, key


def _check_login(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
    ok = isinstance(data, LoginPassword) and (data.login, data.password) == (
        b"digest",
        b"s3cret from the environment",
    )
    return AuthResult(success=ok, handled=False)


@pytest.fixture
def relay(cert: tuple[Path, Path], request: pytest.FixtureRequest) -> Iterator[FaultServer]:
    """``starttls`` (STARTTLS and AUTH required) or ``tls`` (implicit TLS), by parametrization."""
    mode = request.param
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*cert)
    handler = FaultHandler()
    port = free_port()
    kw: dict[str, Any] = {"authenticator": _check_login, "auth_required": True}
    if mode == "starttls":
        kw |= {"tls_context": context, "require_starttls": True}
    else:
        kw |= {"ssl_context": context, "auth_require_tls": False}
    controller = Controller(handler, hostname="127.0.0.1", port=port, **kw)
    controller.start()
    try:
        yield FaultServer("127.0.0.1", port, handler)
    finally:
        controller.stop()
        asyncio.set_event_loop(None)


def _send(tmp_path: Path, relay: FaultServer, security: str) -> Any:
    data = base_config(
        f"sqlite:///{tmp_path / 'n.db'}",
        relay,  # type: ignore[arg-type]
        web={"secret_key": "tls-test-secret-0123456789abcdefgh"},
        digest={"empty": "send"},
    )
    data["smtp"].update(security=security, username="digest", timeout=10)
    config = load_config(write_config(tmp_path, data))
    store = Store(config.database_url)
    store.upgrade()
    try:
        store.add_subscriber(READER, topics=["gpu-kernels"], now=NOW)
        run_fetch(config, store, NOW - timedelta(hours=1))
        return run_send(config, store, NOW)
    finally:
        store.close()


# On implicit TLS aiosmtpd does not see that the line is encrypted and warns about AUTH on it.
@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
@pytest.mark.parametrize(
    ("relay", "security"), [("starttls", "starttls"), ("tls", "tls")], indirect=["relay"]
)
def test_tls_and_auth_with_the_password_from_the_environment(
    tmp_path: Path,
    relay: FaultServer,
    security: str,
    cert: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(cert[0]))  # trust the test's certificate
    monkeypatch.setenv("NEWSLETTER_SMTP_PASSWORD", "s3cret from the environment")
    report = _send(tmp_path, relay, security)
    assert report.relay_error is None and report.sent == 1
    assert relay.count_by_rcpt() == {READER: 1}


@pytest.mark.parametrize("relay", ["starttls"], indirect=True)
def test_a_wrong_password_is_one_relay_error(
    tmp_path: Path, relay: FaultServer, cert: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(cert[0]))
    monkeypatch.setenv("NEWSLETTER_SMTP_PASSWORD", "wrong")
    report = _send(tmp_path, relay, "starttls")
    assert (
        report.relay_error is not None
        and "refused the login for 'digest': 535" in report.relay_error
    )
    assert "$NEWSLETTER_SMTP_PASSWORD" in report.relay_error and report.sent == 0


@pytest.mark.parametrize("relay", ["starttls"], indirect=True)
def test_an_untrusted_certificate_is_a_tls_failure(
    tmp_path: Path, relay: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEWSLETTER_SMTP_PASSWORD", "s3cret from the environment")
    report = _send(tmp_path, relay, "starttls")
    assert report.relay_error is not None and "TLS with relay" in report.relay_error
    assert "certificate" in report.relay_error and report.sent == 0
    assert relay.received == []
