"""Every outcome is counted in one place: :meth:`SendReport.count`."""

from __future__ import annotations

import pytest

from newsletter.digest.render import RenderedDigest
from newsletter.edition.report import SendReport
from newsletter.models import Outcome


def test_every_outcome_has_a_count_or_is_kept() -> None:
    for outcome in Outcome:
        report = SendReport()
        report.count(outcome, address="a@x.org", error="why")
        counted = {k: v for k, v in report.as_dict().items() if isinstance(v, int) and v}
        if outcome is Outcome.DRY_RUN:
            assert counted == {}
        else:
            assert counted, outcome


@pytest.mark.parametrize(
    ("outcome", "counts", "errors"),
    [
        (Outcome.SENT, {"sent": 1}, []),
        (Outcome.FAILED, {"failed": 1}, ["a@x.org: 550 no"]),
        (Outcome.SUPPRESSED, {"failed": 1, "suppressed": 1}, ["a@x.org: 550 no"]),
        (Outcome.UNKNOWN, {"unknown": 1}, ["a@x.org: 550 no"]),
        (Outcome.RESEND_REFUSED, {"resend_refused": 1}, ["a@x.org: 550 no"]),
        (Outcome.ALREADY, {"already": 1}, []),
        (Outcome.RETRIED, {"retried": 1}, []),
        (Outcome.RELEASED, {"released": 1}, []),
    ],
)
def test_what_each_outcome_counts(
    outcome: Outcome, counts: dict[str, int], errors: list[str]
) -> None:
    report = SendReport()
    report.count(outcome, address="a@x.org", error="a@x.org: 550 no")
    assert {k: v for k, v in report.as_dict().items() if isinstance(v, int) and v} == counts
    assert report.errors == errors


def test_rendered_digests_are_kept_up_to_the_limit_and_every_one_in_a_dry_run() -> None:
    digest = RenderedDigest("subject", "preheader", "<p>html</p>", "text")
    report = SendReport()
    for i in range(3):
        report.count(Outcome.SENT, address=f"{i}@x.org", rendered=digest, keep=2)
    assert [a for a, _ in report.rendered] == ["0@x.org", "1@x.org"]
    dry = SendReport(dry_run=True)
    for i in range(3):
        dry.count(Outcome.DRY_RUN, address=f"{i}@x.org", rendered=digest)
    assert len(dry.rendered) == 3 and dry.sent == 0
