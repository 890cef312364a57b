"""The model cache: ONNX files made from a model's weights, kept by what the weights hold.

A model given as weights (``model.safetensors`` + ``config.json``) is turned into an ONNX file
once (:mod:`newsletter.semantic.export`) and kept in the cache folder (``ranking.model_cache``,
by default ``$XDG_CACHE_HOME/newsletter/models``, else ``~/.cache/newsletter/models``)::

    onnx-<key>/model.onnx    one per distinct weights: <key> is a SHA-256 over the weights,
                             config.json and the export's format (EXPORT_FORMAT)
    hashes.json              each weights file's SHA-256 by path, size, mtime and ctime

Keyed by content, the same weights installed in several virtual environments (each with its
own copy, its own path and mtime) share one entry; weights that change get a new one. Hashing
the default model's 87 MB takes 0.06 s (0.16 s when the file is not in the page cache, on 2
cores), so each file's hash is remembered in ``hashes.json`` by the file's path, size, mtime
and ctime (a write changes the ctime, which no tool can set back) and read back in well under
a millisecond; a change to any of them hashes the file again.

Entries made before the cache was keyed by content are named ``<model>-<12 hex digits>`` (they
were keyed by the weights' path and mtime, so every new virtual environment added one):
:func:`usage` counts them as ``old`` and :func:`clean` (``newsletter cache clean``) removes
them with the rest. :func:`clean` removes only what the cache writes (entry folders holding
``model.onnx``, ``hashes.json``), never other files a mistaken ``ranking.model_cache`` points
at.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from newsletter.config import Config

log = logging.getLogger(__name__)

EXPORT_FORMAT = 1
"""The ONNX graph :func:`~newsletter.semantic.export.bert_to_onnx` writes, as a number that is
part of every entry's key: raise it when that graph changes, so that no entry written by an
older exporter is used again."""
HASHES = "hashes.json"
"""The cache's file of remembered weights hashes."""
ENTRY_FILES = re.compile(r"model\.onnx(\.[0-9]+)?(\.tmp)?")
"""What an entry folder holds (``model.onnx.PID.tmp``: an export under way or interrupted)."""
_NEW_ENTRY = re.compile(r"onnx-[0-9a-f]{16}")
_OLD_ENTRY = re.compile(r".+-[0-9a-f]{12}")


def default_cache() -> Path:
    """Where ONNX files are kept by default: ``$XDG_CACHE_HOME/newsletter/models``, else
    ``~/.cache/newsletter/models``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "newsletter" / "models"


def model_cache(config: Config) -> Path:
    """The cache folder a config uses: ``ranking.model_cache`` (relative to the config's
    folder), else :func:`default_cache`."""
    setting = config.settings.ranking.model_cache
    return (config.base_dir / setting).resolve() if setting else default_cache()


def _stamp(path: Path) -> list[int]:
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]


def _read_hashes(cache: Path) -> dict[str, dict[str, object]]:
    try:
        data = json.loads((cache / HASHES).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none yet, or unreadable: files are hashed again
        return {}
    return data if isinstance(data, dict) else {}


def file_hash(path: Path, cache: Path) -> str:
    """The SHA-256 (hex) of the file at ``path``, remembered in ``cache``'s ``hashes.json`` by
    the file's path, size, mtime and ctime: the file is read again only when one changed."""
    path = path.resolve()
    stamp = _stamp(path)
    known = _read_hashes(cache)
    seen = known.get(str(path))
    if (
        isinstance(seen, dict)
        and seen.get("stamp") == stamp
        and isinstance(seen.get("sha256"), str)
    ):
        return str(seen["sha256"])
    with path.open("rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    # Forget files that are gone (a removed virtual environment's weights), then write the file
    # whole under another name and rename it: a reader never sees half of it, and two writers
    # at once each leave a whole file (one loses the other's entry, hashed again next time).
    kept = {p: v for p, v in known.items() if p != str(path) and Path(p).exists()}
    kept[str(path)] = {"stamp": stamp, "sha256": digest}
    tmp = cache / f"{HASHES}.{os.getpid()}.tmp"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(kept, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(cache / HASHES)
    except OSError as e:  # a read-only cache: the hash is computed each time instead
        log.debug("model cache: cannot remember the hash of %s in %s: %s", path, cache, e)
        with contextlib.suppress(OSError):
            tmp.unlink()
    return digest


def entry_for(directory: Path, cache: Path) -> Path:
    """The ONNX file the weights in ``directory`` (``model.safetensors``, ``config.json``) are
    kept as in ``cache``: the same for every copy of the same weights, wherever it is."""
    key = hashlib.sha256()
    key.update(f"newsletter-onnx-export:{EXPORT_FORMAT}\n".encode())
    key.update(file_hash(directory / "model.safetensors", cache).encode())
    key.update(hashlib.sha256((directory / "config.json").read_bytes()).hexdigest().encode())
    return cache / f"onnx-{key.hexdigest()[:16]}" / "model.onnx"


def _entries(cache: Path) -> list[Path]:
    """The entry folders in ``cache``: folders that hold only what an export writes."""
    try:
        children = list(cache.iterdir())
    except OSError:  # no cache yet, or not a folder
        return []
    found = []
    for child in children:
        if child.is_symlink() or not child.is_dir():
            continue
        try:
            names = {p.name for p in child.iterdir()}
        except OSError:
            continue
        if names and all(ENTRY_FILES.fullmatch(name) for name in names):
            found.append(child)
    return sorted(found)


def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(root) / name).lstat().st_size
    return total


@dataclass(frozen=True)
class CacheUsage:
    """What a model cache folder holds (or what :func:`clean` removed from it)."""

    path: Path
    bytes: int
    """Everything under the folder, in bytes (for :func:`clean`: what it removed)."""
    entries: int
    """ONNX files made from weights."""
    old: int = 0
    """Of :attr:`entries`, those made before the cache was keyed by content (never used
    again: the current code looks for ``onnx-<key>`` entries only)."""

    def line(self) -> str:
        """``/path, 87.3 MB in 1 model`` or ``/path, empty``: for ``status`` and ``cache``."""
        if not self.bytes and not self.entries:
            return f"{self.path}, empty"
        models = f"{self.entries} model{'' if self.entries == 1 else 's'}"
        old = f" ({self.old} of them old and never used again)" if self.old else ""
        return f"{self.path}, {megabytes(self.bytes)} in {models}{old}"

    def as_json(self) -> dict[str, object]:
        """For ``status --json``."""
        return {
            "path": str(self.path),
            "bytes": self.bytes,
            "entries": self.entries,
            "old_entries": self.old,
        }


def megabytes(size: int) -> str:
    """``87.3 MB`` (decimal megabytes, as ``du -h --si`` and file managers count)."""
    return f"{size / 1e6:.1f} MB"


def _is_old(entry: Path) -> bool:
    return _NEW_ENTRY.fullmatch(entry.name) is None and _OLD_ENTRY.fullmatch(entry.name) is not None


def usage(cache: Path) -> CacheUsage:
    """How much ``cache`` holds: every file under it, and its entries (old ones counted)."""
    entries = _entries(cache)
    total = _size(cache) if cache.is_dir() else 0
    return CacheUsage(cache, total, len(entries), sum(_is_old(e) for e in entries))


def clean(cache: Path) -> CacheUsage:
    """Remove every entry (old ones too) and ``hashes.json`` from ``cache``, and the folder
    itself when nothing else is left in it; returns what was removed. Files the cache did not
    write are left where they are."""
    entries = _entries(cache)
    removed = 0
    for entry in entries:
        removed += _size(entry)
        shutil.rmtree(entry)
    for extra in [cache / HASHES, *cache.glob(f"{HASHES}.*.tmp")] if cache.is_dir() else []:
        if extra.is_file():
            removed += extra.stat().st_size
            extra.unlink()
    with contextlib.suppress(OSError):  # not empty (files of someone else's), or not there
        cache.rmdir()
    return CacheUsage(cache, removed, len(entries), sum(_is_old(e) for e in entries))
