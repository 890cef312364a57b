"""Stopping a send on SIGTERM or SIGINT: the first signal drains, a second stops at once.

``newsletter send --now`` installs :func:`stop_on_signals` around the run. The first SIGTERM
or SIGINT (Ctrl-C) sets the :class:`StopRequest`: no new message is started, the messages in
flight get their answer and are recorded, the queued ones are given back, the run is recorded
as ``stopped`` and the summary printed. A second signal also sets
:attr:`StopRequest.at_once`: the run stops without waiting for the relay's answers (those
editions stay ``sending`` and the next run resumes them at once, with the same Message-ID).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest(threading.Event):
    """Set when the run should stop after the messages in flight; ``at_once`` when it should
    stop without waiting for them; ``signal_name`` names the first signal received."""

    def __init__(self) -> None:
        super().__init__()
        self.at_once = threading.Event()
        self.signal_name: str | None = None


def at_once(stop: threading.Event | None) -> threading.Event:
    """The "stop at once" event of ``stop`` (a fresh, never-set one for a plain Event)."""
    return stop.at_once if isinstance(stop, StopRequest) else threading.Event()


@contextmanager
def stop_on_signals(
    stop: StopRequest, notice: Callable[[str, bool], None] | None = None
) -> Iterator[StopRequest]:
    """Turn SIGTERM and SIGINT into ``stop`` while the block runs (main thread only).

    ``notice(signal_name, at_once)`` is called on each signal, to tell the operator.
    """
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        second = stop.is_set()
        if second:
            stop.at_once.set()
        else:
            stop.signal_name = name
            stop.set()
        if notice is not None:
            notice(name, second)

    previous = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield stop
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
