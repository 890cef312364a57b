"""Addresses and display names: refused with a clear message when subscribing, or encoded right."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email import message_from_bytes, policy
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import assume, given
from hypothesis import strategies as st

from newsletter.addresses import (
    _ENCODED_WORD,
    MAX_NAME,
    InvalidAddress,
    address_key,
    normalize_address,
    normalize_name,
)
from newsletter.cli import cli
from newsletter.config import load_config
from newsletter.errors import ConfigError
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from newsletter.subscribe import mailbox
from tests.conftest import SmtpServer, base_config, write_config
from tests.sends import run_send

NOW = datetime(2026, 11, 17, 12, 0, tzinfo=UTC)
INJECTION = "a@b.c\r\nBcc: x@y.z"


def run(config: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--config", str(config), *args], catch_exceptions=False)


@pytest.fixture
def config_path(tmp_path: Path, db_url: str, smtp_server: SmtpServer) -> Path:
    path = write_config(
        tmp_path,
        base_config(db_url, smtp_server, web={"secret_key": "addresses-test-secret-0123456789ab"}),
    )
    assert run(path, "db", "upgrade").exit_code == 0
    return path


@pytest.mark.parametrize(
    "bad",
    [INJECTION, "a@b.c\nBcc: x@y.z", "no-at-sign.example.org", "two@@example.org", "a@b"],
)
def test_bad_addresses_are_refused_naming_the_address(bad: str) -> None:
    with pytest.raises(InvalidAddress) as info:
        normalize_address(bad)
    assert repr(bad) in str(info.value)


def test_names_with_line_breaks_or_too_long_are_refused() -> None:
    with pytest.raises(InvalidAddress, match="line breaks"):
        normalize_name("Eve\r\nBcc: x@y.z")
    with pytest.raises(InvalidAddress, match=f"at most {MAX_NAME} characters"):
        normalize_name("x" * (MAX_NAME + 1))
    assert normalize_name('  Zoë   \t O\'Brien, "PhD" ') == 'Zoë O\'Brien, "PhD"'


def test_cli_add_refuses_injection_and_stores_nothing(config_path: Path) -> None:
    r = run(config_path, "subscribers", "add", INJECTION, "--topic", "gpu-kernels")
    assert r.exit_code != 0
    assert "line breaks" in r.output and "Bcc" in r.output
    r = run(
        config_path,
        "subscribers",
        "add",
        "eve@example.org",
        "--topic",
        "gpu-kernels",
        "--name",
        "Eve\r\nBcc: x@y.z",
    )
    assert r.exit_code != 0 and "display name cannot contain line breaks" in r.output
    listed = run(config_path, "subscribers", "list", "--json")
    assert "eve@example.org" not in listed.output and "a@b.c" not in listed.output


def test_import_reports_bad_rows_by_line_and_keeps_the_rest(
    config_path: Path, tmp_path: Path
) -> None:
    csv = tmp_path / "people.csv"
    long_name = "Ñ" * (MAX_NAME + 5)
    csv.write_text(
        "email,name,topics\n"
        "ada@example.org,Ada Lovelace,gpu-kernels\n"
        '"a@b.c\r\nBcc: x@y.z",Mallory,gpu-kernels\n'
        f"long@example.org,{long_name},gpu-kernels\n"
        "reader@bücher.example,Bücherwurm,rendering\n",
        encoding="utf-8",
    )
    r = run(config_path, "subscribers", "import", str(csv))
    out = " ".join(r.output.split())
    assert "added 2" in out and "refused 2" in out
    assert "people.csv:3: email:" in out and "line breaks" in out  # the row's first line
    assert "people.csv:5:" in out and f"at most {MAX_NAME}" in out
    listed = {
        s["email"]: s for s in json.loads(run(config_path, "subscribers", "list", "--json").output)
    }
    assert sorted(listed) == ["ada@example.org", "reader@bücher.example"]
    assert listed["reader@bücher.example"]["name"] == "Bücherwurm"


def test_config_seed_with_injected_name_is_a_config_error(tmp_path: Path) -> None:
    data = base_config(
        f"sqlite:///{tmp_path / 'n.db'}",
        subscribers=[{"email": "ada@example.org", "name": "Ada\nBcc: x@y.z", "topics": []}],
    )
    with pytest.raises(
        ConfigError, match=r"newsletter.yaml:\d+: subscribers\[0\]\.name: .*line breaks"
    ):
        load_config(write_config(tmp_path, data))


def test_idn_domain_and_long_unicode_name_are_delivered_and_decode_back(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer
) -> None:
    config = load_config(
        write_config(
            tmp_path,
            base_config(
                db_url, smtp_server, web={"secret_key": "addresses-test-secret-0123456789ab"}
            ),
        )
    )
    store = Store(config.database_url)
    store.upgrade()
    name = ('Zoë "Zed" Ärger-Øster, Ph.D. (Universität Zürich) ' * 3).strip()
    assert len(name) < MAX_NAME
    store.add_subscriber(
        normalize_address("reader@bücher.example"),
        name=normalize_name(name),
        topics=["gpu-kernels"],
        now=NOW,
    )
    store.add_subscriber("plain@example.org", topics=["gpu-kernels"], now=NOW)
    run_fetch(config, store, NOW - timedelta(hours=1))
    report = run_send(config, store, NOW)
    store.close()
    assert report.sent == 2, report.errors
    (received,) = [r for r in smtp_server.received if "plain@example.org" not in r.rcpt_tos]
    # The envelope uses the ASCII (IDNA) form, which every relay accepts.
    assert received.rcpt_tos == ["reader@xn--bcher-kva.example"]
    msg = message_from_bytes(received.data, policy=policy.default)
    (to,) = msg["To"].addresses
    assert to.display_name == name
    assert to.domain == "xn--bcher-kva.example"
    assert not msg["To"].defects
    head = received.data.split(b"\r\n\r\n", 1)[0].replace(b"\r\n ", b" ")  # unfolded
    raw_to = head.split(b"\r\nTo: ", 1)[1].split(b"\r\n")[0]
    assert raw_to.endswith(b"<reader@xn--bcher-kva.example>")  # no encoded-word in the address
    for line in received.data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        assert len(line) <= 998
        line.decode("ascii")  # headers are 7-bit: names are RFC 2047 encoded-words


_LOCAL_CHARS = "aZ09.!#$%&'*+/=?^_`{|}~-\"@ é"
_DOMAINS = [
    "example.org",
    "Example.ORG",
    "bücher.example",
    "xn--bcher-kva.example",
    "localhost",
    "a..b.org",
    "-bad.org",
    "exa_mple.org",
    "x" * 250 + ".org",
    "",
    "sub.domain.co.uk",
]


@given(
    local=st.text(alphabet=_LOCAL_CHARS, max_size=70),
    domain=st.sampled_from(_DOMAINS),
)
def test_the_fast_path_agrees_with_email_validator(local: str, domain: str) -> None:
    """Plain local parts skip email-validator's per-address work (the domain is checked once):
    the result, or the refusal, is what email-validator itself gives."""
    from email_validator import EmailNotValidError, validate_email

    value = f"{local}@{domain}"
    assume(not _ENCODED_WORD.search(value))  # refused before either check runs
    try:
        expected: str | None = str(
            validate_email(value.strip(), check_deliverability=False).normalized
        )
    except EmailNotValidError:
        expected = None
    try:
        got: str | None = normalize_address(value)
    except InvalidAddress:
        got = None
    assert got == expected


@pytest.mark.parametrize(
    ("spellings", "key"),
    [
        (
            ["Émile@example.org", "émile@EXAMPLE.ORG", "E\u0301MILE@example.org"],
            "émile@example.org",
        ),
        (
            ["Ōta@bücher.example", "ōta@xn--bcher-kva.example", "ŌTA@BÜCHER.example"],
            "ōta@bücher.example",
        ),
        (["Ada@Example.org", " ada@example.org "], "ada@example.org"),
        (["not an address"], "not an address"),
        (["x@bad..domain"], "x@bad..domain"),  # never raises: a bounce can name anything
    ],
)
def test_address_key_folds_every_letter_case_and_the_domain_form(
    spellings: list[str], key: str
) -> None:
    assert {address_key(s) for s in spellings} == {key}


@given(st.emails())
def test_address_key_of_a_normalized_address_is_its_casefold(email: str) -> None:
    """Erased-address hashes made before ``address_key`` (of ``casefold()``) stay readable."""
    try:
        address = normalize_address(email)
    except InvalidAddress:
        assume(False)
        return
    assert address_key(address) == address.casefold()


def test_mailbox_drops_tags_and_gmail_dots() -> None:
    assert mailbox("V.Ictim+news@GoogleMail.com") == "victim@gmail.com"
    assert mailbox("v.ictim@gmail.com") == mailbox("victim@gmail.com") == "victim@gmail.com"
    assert mailbox("v.ictim@example.org") == "v.ictim@example.org"  # elsewhere a dot counts
    assert mailbox("Bomb+2@Example.org") == "bomb@example.org"
    assert mailbox("+x@example.org") == "+x@example.org"
