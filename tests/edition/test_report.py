"""The send report (:mod:`newsletter.edition.report`) as worker mode adds it up."""

from __future__ import annotations


def test_a_worker_chunk_carries_every_count_of_the_report() -> None:
    """Worker mode adds up its chunks' ``as_dict``: every count there must be in ``COUNTS``,
    or worker-mode reports read 0 for it (issue 19 item 7; ``resend_refused`` was missed)."""
    from newsletter.edition import SendReport

    part = SendReport()
    keys = [k for k, v in part.as_dict().items() if isinstance(v, int) and not isinstance(v, bool)]
    for n, key in enumerate(keys, start=1):
        setattr(part, key, n)
    total = SendReport()
    total.add_counts(part.as_dict())
    total.add_counts(part.as_dict())
    assert {k: getattr(total, k) for k in keys} == {k: 2 * n for n, k in enumerate(keys, 1)}
