"""Runs: when editions are due, what starts a run, and the record each run leaves.

- :mod:`.due_dates`: when editions are due (pure: a reader's preferences and ``now``);
- :mod:`.scheduler`: the APScheduler jobs (fetch times, the tick that sends what is due);
- :mod:`.fetch`: the recorded fetch (:func:`~newsletter.runs.fetch.fetch_step`);
- :mod:`.leases`: a recorded run's lease and heartbeat, a killed run settled;
- :mod:`.alerts`: the operator's alerts (a failed run, a weekday fetch with no papers).

May import: core, config, store, sources, rank, deliver, services.
"""
