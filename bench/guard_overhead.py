"""What the Store's error guard (newsletter/store/guard.py) costs a send, per digest.

    python -m bench.guard_overhead [--subscribers 2000]

1. Counts the guarded Store calls a real ``run_send`` makes per digest (SQLite, messages to a
   local sink that accepts and discards).
2. Times one guarded call against the same call unwrapped (``__wrapped__``): a method that does
   nothing (the guard alone), and the sender's hot ledger write (``apply_ledger`` of a group
   commit of begins and ``sent`` marks on SQLite), interleaved, best of several rounds.

Prints the guard's cost per call and per digest (calls per digest x cost per call). Not part of
``python -m bench``: a one-off measurement for the guard (issue 18).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.bench_deliver import NOW, ROOT, seed, write_config


def _best(fn: Callable[[], None], rounds: int, loops: int) -> float:
    """Seconds per call: the best of ``rounds`` timings of ``loops`` calls."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(loops):
            fn()
        best = min(best, (time.perf_counter() - started) / loops)
    return best


def guard_alone() -> tuple[float, float]:
    """A method that does nothing: (guarded, plain) seconds per call."""
    from newsletter.store.guard import guard_errors

    @guard_errors
    class Nothing:
        _db_errors = (OSError,)

        def nothing(self, a: int, *, b: int = 0) -> int:
            return a

    plain = Nothing.nothing.__wrapped__  # type: ignore[attr-defined]
    obj = Nothing()
    guarded = _best(lambda: obj.nothing(1, b=2), 7, 200_000)
    unguarded = _best(lambda: plain(obj, 1, b=2), 7, 200_000)
    return guarded, unguarded


def count_calls(work: Path, port: int, n: int) -> Counter[str]:
    """The guarded Store calls one ``run_send`` of ``n`` digests makes, by method."""
    from newsletter.config import load_config
    from newsletter.edition import run_send
    from newsletter.store import Store
    from newsletter.store.guard import guarded_names

    cfg = write_config(work, port, work / "newsletter.db")
    seed(cfg, n)
    calls: Counter[str] = Counter()
    originals = {name: getattr(Store, name) for name in guarded_names(Store)}

    def counting(name: str, fn: Any) -> Any:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fn(self, *args, **kwargs)

        return call

    for name, fn in originals.items():
        setattr(Store, name, counting(name, fn))
    try:
        config = load_config(cfg)
        store = Store(config.database_url)
        report = run_send(config, store, NOW)
        store.close()
    finally:
        for name, fn in originals.items():
            setattr(Store, name, fn)
    assert report.sent == n, report
    return calls


def ledger_write(work: Path, batch: int) -> tuple[float, float]:
    """A ledger session's group commit of ``batch`` begins and ``batch`` sent marks (20 papers
    each) on SQLite, against the same on a held connection without the error mapping:
    (guarded, plain) seconds per call. Each call re-applies the same (idempotent) writes."""
    from newsletter.models import EditionStatus, LedgerOp
    from newsletter.store import Store

    store = Store(f"sqlite:///{work / 'send' / 'newsletter.db'}")  # the send's: it has papers
    with store.engine.connect() as c:
        papers = tuple(r[0] for r in c.exec_driver_sql("SELECT id FROM papers LIMIT 20"))
    day = NOW.date() + timedelta(days=1)
    wanted = [(s, day, f"<{s}@x>") for s in range(1, 2 * batch + 1)]
    claims = store.claim_editions(wanted, NOW, owner="o")
    assert all(claims) and len(papers) == 20
    # begins of one half (``sending`` again: still theirs, applied every time) and sent marks of
    # the other (the same row each time), as a sender's group commit
    begins = [LedgerOp("begin", c.id, c.subscriber_id, owner="o") for c in claims[:batch] if c]
    marks = [
        LedgerOp("mark", c.id, c.subscriber_id, status=EditionStatus.SENT, paper_ids=papers)
        for c in claims[batch:]
        if c
    ]
    store.apply_ledger([*begins, *marks], NOW)
    conn = store.engine.connect()
    session = store.ledger_session()  # what the sender's writer applies its batches through
    ops = [*begins, *marks]
    later = NOW + timedelta(seconds=1)
    g = p = float("inf")
    for _ in range(8):  # guarded, plain, plain, guarded: each sees the same load on average
        g = min(g, _best(lambda: session.apply(ops, later), 1, 100))
        p = min(p, _best(lambda: store._apply_held(ops, later, conn), 2, 100))
        g = min(g, _best(lambda: session.apply(ops, later), 1, 100))
    session.close()
    conn.close()
    store.close()
    return g, p


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--subscribers", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        port_file = work / "port"
        sink = subprocess.Popen(
            [sys.executable, "-m", "bench.bench_deliver", "sink", str(port_file)], cwd=ROOT
        )
        try:
            for _ in range(200):
                if port_file.exists() and port_file.read_text():
                    break
                time.sleep(0.05)
            port = int(port_file.read_text())
            (work / "send").mkdir()
            calls = count_calls(work / "send", port, args.subscribers)
        finally:
            sink.terminate()
            sink.wait()
        alone_g, alone_p = guard_alone()
        led_g, led_p = ledger_write(work, 8)
    total = sum(calls.values())
    per_digest = total / args.subscribers
    per_call = alone_g - alone_p
    print(f"guarded Store calls in one send of {args.subscribers} digests: {total}")
    print("  " + ", ".join(f"{k} {v}" for k, v in calls.most_common()))
    print(f"  {per_digest:.3f} guarded calls per digest")
    print(f"guard alone: {alone_g * 1e9:.0f} ns guarded vs {alone_p * 1e9:.0f} ns plain per call")
    print(f"  -> {per_call * 1e9:.0f} ns per call, {per_call * per_digest * 1e9:.0f} ns per digest")
    print(
        f"apply_ledger (8 begins + 8 sent marks, SQLite): {led_g * 1e6:.1f} us guarded vs "
        f"{led_p * 1e6:.1f} us plain, best of 16 x 100 calls each; the guard itself is "
        f"{per_call / led_p * 100:.2f} % of one call"
    )


if __name__ == "__main__":
    main()
