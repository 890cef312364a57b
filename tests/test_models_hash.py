"""Papers, digest items and sections hash once (they key the renderer's caches for every
reader); unpickled in another process, they must hash as that process's own copies do."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

from newsletter.models import DigestItem, TopicSection
from tests import digests as D

MAKE = """
import pickle, sys
from tests import digests as D
from newsletter.models import DigestItem, TopicSection
papers = D.papers()
item = DigestItem(papers[0], "gpu-kernels", 0.5, "title: *kernels*")
sys.stdout.buffer.write(pickle.dumps((papers[0], item, TopicSection("gpu-kernels", "GPU", (item,)))))
"""


def test_unpickled_in_another_process_they_hash_like_local_copies() -> None:
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", MAKE], capture_output=True, check=True, env=env, cwd=os.getcwd()
    ).stdout
    paper, item, section = pickle.loads(out)  # our own child's bytes
    papers = D.papers()
    mine = DigestItem(papers[0], "gpu-kernels", 0.5, "title: *kernels*")
    local = TopicSection("gpu-kernels", "GPU", (mine,))
    assert (paper, item, section) == (papers[0], mine, local)
    # Salted string hashes differ between the processes: a kept hash would miss here.
    cache = {papers[0]: "p", mine: "i", local: "s"}
    assert (cache.get(paper), cache.get(item), cache.get(section)) == ("p", "i", "s")


def test_an_item_changed_by_replace_hashes_anew() -> None:
    import dataclasses

    item = DigestItem(D.papers()[0], "t", 0.5, "why")
    other = dataclasses.replace(item, reason="another reason")
    assert other != item and hash(other) == hash(DigestItem(item.paper, "t", 0.5, "another reason"))
