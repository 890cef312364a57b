"""``newsletter bounces poll`` against a real IMAP server: Dovecot on loopback over IMAPS, with
a certificate made for the test. Skipped, saying why, where Dovecot is not installed
(.ci/system-deps installs dovecot-imapd)."""

from __future__ import annotations

import imaplib
import os
import pwd
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from newsletter.bounces.poll import KEYWORD, recipients_of
from newsletter.bounces.verp import Verp
from newsletter.cli import cli
from newsletter.config import load_config
from newsletter.models import SubscriberStatus
from newsletter.operations.smtp_sink import free_port
from newsletter.store import Store
from tests.bounces.helpers import fixture
from tests.conftest import base_config, write_config

READER = "reader@example.net"
OTHER = "other@example.net"
PASSWORD = "imap pass from the environment"
SECRET = "a-test-secret-that-signs-links-0123456789"


@dataclass
class ImapServer:
    port: int
    ca_file: Path

    def connect(self) -> imaplib.IMAP4_SSL:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        conn = imaplib.IMAP4_SSL("127.0.0.1", self.port, ssl_context=context)
        conn.login("bounces", PASSWORD)
        return conn


def _dovecot_missing() -> str | None:
    if shutil.which("dovecot") is None and not Path("/usr/sbin/dovecot").exists():
        return "dovecot is not installed (.ci/system-deps installs dovecot-imapd)"
    if shutil.which("openssl") is None:
        return "openssl is not installed"
    if os.geteuid() != 0:
        return "the test Dovecot runs as root (it drops to its own users, as installed)"
    try:
        pwd.getpwnam("dovecot")
        pwd.getpwnam("dovenull")
    except KeyError:
        return "the dovecot and dovenull users are missing (install dovecot-core)"
    return None


@pytest.fixture
def imap_server() -> Iterator[ImapServer]:
    """A real Dovecot, IMAPS only, on a free loopback port, with one user ``bounces``."""
    reason = _dovecot_missing()
    if reason:
        pytest.skip(reason)
    root = Path(tempfile.mkdtemp(prefix="newsletter-imap-"))
    root.chmod(0o755)  # Dovecot's own users read the password file and the mail home
    port = free_port()
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(root / "key.pem"), "-out", str(root / "crt.pem"),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    (root / "passwd").write_text(f"bounces:{{PLAIN}}{PASSWORD}\n")
    (root / "passwd").chmod(0o644)
    home = root / "home"
    home.mkdir()
    shutil.chown(home, "dovecot", "dovecot")
    conf = root / "dovecot.conf"
    conf.write_text(
        f"""base_dir = {root}/run
state_dir = {root}/state
log_path = {root}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = required
ssl_cert = <{root}/crt.pem
ssl_key = <{root}/key.pem
auth_mechanisms = plain login
first_valid_uid = 1
default_internal_user = dovecot
default_internal_group = dovecot
default_login_user = dovenull
service imap-login {{
  inet_listener imap {{
    port = 0
  }}
  inet_listener imaps {{
    port = {port}
    ssl = yes
  }}
}}
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {root}/passwd
}}
userdb {{
  driver = static
  args = uid=dovecot gid=dovecot home={home}/%u
}}
mail_location = maildir:~/Maildir
"""
    )
    dovecot = shutil.which("dovecot") or "/usr/sbin/dovecot"
    proc = subprocess.Popen([dovecot, "-F", "-c", str(conf)], stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise AssertionError((root / "dovecot.log").read_text(errors="replace"))
        yield ImapServer(port, root / "crt.pem")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)


def run(config: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--config", str(config), *args], catch_exceptions=False)


def delivered(to: str, data: bytes) -> bytes:
    """A message as the bounce mailbox's MTA stores it (it adds the envelope recipient)."""
    return f"Delivered-To: {to}\r\n".encode() + data


@pytest.mark.parametrize("processed", [None, "Processed"])
def test_poll_counts_each_report_once_and_marks_what_it_read(
    imap_server: ImapServer,
    tmp_path: Path,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    processed: str | None,
) -> None:
    imap: dict[str, object] = {
        "host": "127.0.0.1",
        "port": imap_server.port,
        "username": "bounces",
        "ca_file": str(imap_server.ca_file),
    }
    if processed:
        imap["processed_mailbox"] = processed
    data = base_config(
        db_url,
        subscribers=[
            {"email": READER, "topics": ["gpu-kernels"]},
            {"email": OTHER, "topics": ["gpu-kernels"]},
        ],
        bounces={"enabled": True, "imap": imap},
        web={"secret_key": SECRET},
    )
    path = write_config(tmp_path, data)
    assert run(path, "db", "upgrade").exit_code == 0
    monkeypatch.setenv("NEWSLETTER_IMAP_PASSWORD", PASSWORD)
    config = load_config(path)
    store = Store(config.database_url)
    reader = store.get_subscriber(READER)
    other = store.get_subscriber(OTHER)
    assert reader is not None and other is not None
    verp = Verp(SECRET, "bounces@papers.example.org")
    day = date(2026, 11, 17)

    conn = imap_server.connect()
    if processed:
        conn.create(processed)
    for message in (
        delivered(verp.sender(reader.id, day), fixture("postfix-hard.eml")),
        delivered("bounces@papers.example.org", fixture("exim-hard.eml", address=OTHER)),
        fixture("arf-abuse.eml", address=OTHER).replace(
            b"Return-Path: <bounces@papers.example.org>\r\nReceived:",
            f"Return-Path: <{verp.sender(other.id, day)}>\r\nReceived:".encode(),
        ),
        fixture("malformed-dsn.eml"),
        fixture("autoreply.eml"),
    ):
        assert conn.append("INBOX", None, None, message)[0] == "OK"
    conn.logout()

    first = run(path, "bounces", "poll")
    assert first.exit_code == 0, first.output
    out = " ".join(first.output.split())
    assert "Read 5 new messages: 1 counted, 1 stopped, 1 unverified; 2 not taken" in out
    assert "1 counted" in out and "1 stopped" in out and "1 unverified" in out
    assert "2 not taken (see the log)" in out
    again = run(path, "bounces", "poll")
    assert again.exit_code == 0 and "Read 0 new messages." in again.output

    score = store.bounce_score(reader.id)
    assert score is not None and score.score == 1.0
    assert store.get_subscriber(OTHER).status is SubscriberStatus.SUPPRESSED  # type: ignore[union-attr]
    assert len(store.bounce_history(reader.id)) == 1
    store.close()

    conn = imap_server.connect()
    conn.select("INBOX")
    if processed:
        assert conn.uid("SEARCH", None, "ALL")[1] == [b""]  # type: ignore[arg-type]
        conn.select(processed)
        assert len(conn.uid("SEARCH", None, "ALL")[1][0].split()) == 5  # type: ignore[arg-type]
    flagged = conn.uid("SEARCH", None, f"KEYWORD {KEYWORD}")[1][0].split()  # type: ignore[arg-type]
    assert len(flagged) == 5
    conn.logout()


def test_a_wrong_password_is_one_clear_line(
    imap_server: ImapServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db_url = f"sqlite:///{tmp_path / 'newsletter.db'}"  # the mailbox is under test, not the DB
    imap = {
        "host": "127.0.0.1",
        "port": imap_server.port,
        "username": "bounces",
        "ca_file": str(imap_server.ca_file),
    }
    path = write_config(
        tmp_path,
        base_config(db_url, bounces={"enabled": True, "imap": imap}, web={"secret_key": SECRET}),
    )
    assert run(path, "db", "upgrade").exit_code == 0
    monkeypatch.setenv("NEWSLETTER_IMAP_PASSWORD", "wrong")
    result = run(path, "bounces", "poll")
    assert result.exit_code == 1
    assert f"IMAP 127.0.0.1:{imap_server.port}: login as bounces refused" in result.output
    assert "Traceback" not in result.output
    monkeypatch.delenv("NEWSLETTER_IMAP_PASSWORD")
    result = run(path, "bounces", "poll")
    assert result.exit_code == 1 and "no password: set $NEWSLETTER_IMAP_PASSWORD" in result.output


def test_an_untrusted_certificate_is_refused(
    imap_server: ImapServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db_url = f"sqlite:///{tmp_path / 'newsletter.db'}"  # the mailbox is under test, not the DB
    imap = {"host": "127.0.0.1", "port": imap_server.port, "username": "bounces"}
    path = write_config(
        tmp_path,
        base_config(db_url, bounces={"enabled": True, "imap": imap}, web={"secret_key": SECRET}),
    )
    assert run(path, "db", "upgrade").exit_code == 0
    monkeypatch.setenv("NEWSLETTER_IMAP_PASSWORD", PASSWORD)
    result = run(path, "bounces", "poll")
    assert result.exit_code == 1 and "cannot connect" in result.output
    assert "CERTIFICATE_VERIFY_FAILED" in result.output


def test_recipients_of_reads_the_delivery_headers() -> None:
    data = delivered("bounces+abc@papers.example.org", fixture("postfix-hard.eml"))
    assert recipients_of(data) == ["bounces+abc@papers.example.org", "bounces@papers.example.org"]
