"""A digest the relay took before a kill, whose re-send is then refused, counts as delivered.

The review's case: the ledger ended ``failed`` for a reader the relay had accepted a digest for
(the run was killed before the ``250`` came back; on resume, the re-send got a 550), so
``status`` reported a delivered reader as undelivered. Both outcomes are recorded now.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from click.testing import CliRunner

from newsletter.cli import cli
from newsletter.config import load_config
from newsletter.digest.render import Renderer
from newsletter.models import EditionStatus
from newsletter.web.archive import render_sent_edition
from tests.faults.sendrun import ledger, populate, start_send
from tests.smtpfaults import Fault, fault_server

FIRST = "reader000@example.org"


class Plan:
    """Takes the first reader's message and stalls (until the kill); once ``refuse``, answers
    that reader's RCPT with a 550."""

    refuse = False

    def __call__(self, stage: str, rcpt: str | None) -> Fault | None:
        if rcpt == FIRST and stage == "DATA" and not self.refuse:
            return Fault(keep=True, stall=60)
        if rcpt == FIRST and stage == "RCPT" and self.refuse:
            return Fault(reply="550 5.1.1 <reader000@example.org>: mailbox unavailable")
        return None


def test_a_refused_resend_of_a_digest_the_relay_took_counts_as_delivered(
    tmp_path: Path, db_url: str
) -> None:
    plan = Plan()
    with fault_server(plan) as relay:
        setup = populate(tmp_path, db_url, relay, 6, smtp={"pool_size": 1, "timeout": 60})
        log = tmp_path / "send.log"
        proc = start_send(setup, log)
        deadline = time.monotonic() + 60
        while FIRST not in relay.count_by_rcpt():  # the relay took it; the 250 never comes
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        store = setup.store()
        try:
            [row] = [r for r in ledger(store) if r.email == FIRST]
            assert row.status is EditionStatus.SENDING  # in flight when the process died

            plan.refuse = True
            runner = CliRunner()
            sent = runner.invoke(cli, ["--config", str(setup.path), "send", "--now"])
            assert sent.exit_code == 0, sent.output  # nothing failed
            assert "re-send refused" in sent.output

            [row] = [r for r in ledger(store) if r.email == FIRST]
            assert row.status is EditionStatus.RESEND_REFUSED
            assert "550 5.1.1" in (row.last_error or "")  # the refusal is kept too
            assert row.item_count > 0
            first = store.get_subscriber(FIRST)
            assert first is not None
            assert store.sent_paper_ids([first.id])[first.id], "its papers count as sent"

            shown = runner.invoke(cli, ["--config", str(setup.path), "status", "--json"])
            assert shown.exit_code == 0, shown.output
            today = json.loads(shown.output)["editions_today"]
            assert "failed" not in today, today
            assert today.get("resend_refused") == 1

            config = load_config(setup.path)  # "View in browser" shows it, as a sent one
            renderer = Renderer(config.settings, config.templates_dir())
            html = render_sent_edition(config, store, renderer, first.id, row.edition_date, None)
            assert html is not None and "<html" in html.lower()
        finally:
            store.close()
    assert relay.count_by_rcpt()[FIRST] == 1
