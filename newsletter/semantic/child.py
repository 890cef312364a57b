"""``python -m newsletter.semantic.child CONFIG``: embed the texts on standard input and store them.

A send that meets texts without a stored vector (papers stored by something other than
``newsletter fetch``) hands them, as a JSON list, to this process: it loads the model, embeds
and stores the vectors in the config's database under the same model name, and exits; the send
reads them back. The model's memory (about 100 MB with its runtime) is this process's, not the
send's. Exit 0 when every text has its vector, 3 when the model cannot run (its reason on
standard error).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from newsletter.clock import utcnow
from newsletter.config import load_config
from newsletter.semantic.vectors import VectorSource
from newsletter.store import Store


def main(argv: list[str]) -> int:
    """Embed and store the JSON list of texts on standard input (see the module docstring)."""
    config = load_config(Path(argv[0]))
    texts = json.loads(sys.stdin.buffer.read())
    store = Store(config.database_url)
    try:
        source = VectorSource(config, store, utcnow)
        if source.vectors([str(t) for t in texts]) is None:
            print(source.problem or "the model cannot run", file=sys.stderr)
            return 3
        return 0
    finally:
        store.close()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
