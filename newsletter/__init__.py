"""newsletter: a self-hosted daily digest of trending research papers, per subscriber topic."""

import time

__version__ = "0.1.0"

STARTED = time.monotonic()
"""When this process imported newsletter: its start-up, for "Took" lines that match the clock."""
