"""newsletter: a self-hosted daily digest of trending research papers, per subscriber topic.

The loose modules here are the domain core (models, errors, clock, text, identity, addresses,
logs): they import only each other. Every package says in its docstring what it may import.
"""

import os
import time

__version__ = "0.1.0"

STARTED = time.monotonic()
"""When this process imported newsletter: its start-up, for "Took" lines that match the clock."""

# numpy's OpenBLAS on one thread, unless the operator says otherwise. Its worker threads spin
# for a while after each matrix product waiting for the next one, and this service's products
# are small (the topics against the day's papers, a reader's votes against them): the spinning
# took about 0.1 s at numpy's import and again after each burst of products, on the core the
# send's own threads need (a 10,000-reader send: about 0.3 s of CPU less, docs/design.md).
# Set here, before anything imports numpy; OPENBLAS_NUM_THREADS in the environment wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
