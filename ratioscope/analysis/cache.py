"""A cache of analysed steps: each step's report, with its mergeable state, kept on disk.

``timeline``, ``report`` and ``watch`` analyse a run step by step; a run that grows is
analysed again and again. :class:`StepCache` keeps each step's report (its sections and
the mergeable ``state`` that :class:`~ratioscope.analysis.pipeline.ReportMerge` folds
into the pooled report) under a key made of:

- the SHA-256 of every file of the step (the content, not the name or the time: a file
  changed in any way is analysed again), with the files' names;
- every parameter that changes a number: the analysis parameters, the load options that
  a report records, the trainer settings in force, the sections, the device kind, the
  chunk size, whether the step's objective summaries are wanted;
- the cache's format, ratioscope's version and a digest of its own source files (so that
  a checkout or install whose code changed without a new version number never reads the
  reports an older code wrote).

An entry is a JSON file, written atomically (a temporary file and a rename, so two
processes sharing the directory never see half an entry and the last write wins), and
read as untrusted input: one that does not parse, is not of this key, or whose report
does not validate (:meth:`~ratioscope.report.model.Report.from_dict`) is a miss, and the
step is analysed again and the entry rewritten. The directory's size is bounded: past
``max_bytes`` the entries used least recently (reading one touches it) are removed.

The default directory is ``$XDG_CACHE_HOME/ratioscope/steps`` (``~/.cache/ratioscope/
steps`` without the variable); the command line's ``--cache DIR`` and ``--no-cache``
choose another or none.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ratioscope import defaults

#: the layout of an entry; a change makes every older entry a miss
CACHE_FORMAT = 1
#: the default bound on the directory's size, bytes
DEFAULT_MAX_BYTES = defaults.CACHE_MAX_BYTES
#: the suffix of an entry
SUFFIX = ".json"


def default_directory() -> Path:
    """``$XDG_CACHE_HOME/ratioscope/steps``, else ``~/.cache/ratioscope/steps``."""
    home = os.environ.get("XDG_CACHE_HOME")
    base = Path(home) if home else Path.home() / ".cache"
    return base / "ratioscope" / "steps"


def file_digest(path: Path) -> str:
    """Hex SHA-256 of a file's bytes (read in 4 MiB blocks)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class CacheStats:
    """What a cache did in one process: entries read, written, refused (unreadable or
    invalid, analysed again) and removed to stay within the size bound."""

    hits: int = 0
    misses: int = 0
    refused: int = 0
    evicted: int = 0


@functools.cache
def code_digest() -> str:
    """SHA-256 of ratioscope's own ``.py`` files (relative names and contents), once per
    process: about 2 MB read, some milliseconds."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode("utf-8"))
        digest.update(b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


class StepCache:
    """Step reports on disk (see the module).

    Args:
        directory: where the entries are (created if missing).
        max_bytes: the bound on the entries' total size.
    """

    def __init__(self, directory: str | Path | None = None, max_bytes: int = DEFAULT_MAX_BYTES):
        from ratioscope.errors import ParameterError

        if max_bytes < 0:
            raise ParameterError("cache_max_bytes", f"must be >= 0, got {max_bytes}")
        self.directory = Path(directory) if directory is not None else default_directory()
        self.max_bytes = max_bytes
        self._sizes: dict[Path, int] | None = None
        self.hits = self.misses = self.refused = self.evicted = 0

    @property
    def stats(self) -> CacheStats:
        return CacheStats(self.hits, self.misses, self.refused, self.evicted)

    def key(self, paths: Sequence[str | Path], parameters: Mapping[str, Any]) -> str:
        """The key of a step: its files (names and SHA-256) and the parameters (any
        JSON-serialisable mapping of what changes a number)."""
        from ratioscope._version import __version__

        described = {
            "format": CACHE_FORMAT,
            "version": __version__,
            "code": code_digest(),
            "files": [[Path(p).name, file_digest(Path(p))] for p in paths],
            "parameters": parameters,
        }
        text = json.dumps(described, sort_keys=True, default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}{SUFFIX}"

    def get(self, key: str, kind: str = "step") -> dict[str, Any] | None:
        """The entry of ``key`` (of a step: ``{"report": document, ...}``), or None: none,
        or one that does not read back (counted as refused; the caller analyses the step
        again and :meth:`put` replaces it). ``kind``: what the entry holds, as put."""
        path = self._path(key)
        try:
            text = path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            self.misses += 1
            return None
        except OSError:
            self.refused += 1
            return None
        try:
            entry = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            self.refused += 1
            return None
        if (
            not isinstance(entry, dict)
            or entry.get("format") != CACHE_FORMAT
            or entry.get("key") != key
            or entry.get("kind") != kind
            or (kind == "step" and not isinstance(entry.get("report"), dict))
        ):
            self.refused += 1
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: the last to be evicted
        self.hits += 1
        return entry

    def has(self, key: str) -> bool:
        """Whether an entry of ``key`` is on disk (not whether it reads back)."""
        return self._path(key).is_file()

    def refuse(self) -> None:
        """Count an entry that read back but did not validate as a report."""
        self.hits -= 1
        self.refused += 1

    def put(self, key: str, entry: Mapping[str, Any], kind: str = "step") -> None:
        """Write the entry of ``key`` atomically, then evict past ``max_bytes``. An entry
        that cannot be written (a full disk, a read-only directory) is skipped: the
        cache only saves work."""
        from ratioscope.io.atomic import atomic_write_text

        path = self._path(key)
        described = {"format": CACHE_FORMAT, "key": key, "kind": kind, **entry}
        text = json.dumps(described, separators=(",", ":"))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, text)
        except OSError:
            return
        sizes = self._known_sizes()
        sizes[path] = len(text.encode("utf-8"))
        self._evict(sizes, keep=path)

    def _known_sizes(self) -> dict[Path, int]:
        """The entries' sizes: listed once per process, then kept up to date."""
        if self._sizes is None:
            self._sizes = {}
            if self.directory.is_dir():
                for path in self.directory.glob(f"*/*{SUFFIX}"):
                    try:
                        self._sizes[path] = path.stat().st_size
                    except OSError:
                        continue
        return self._sizes

    def _evict(self, sizes: dict[Path, int], keep: Path) -> None:
        total = sum(sizes.values())
        if total <= self.max_bytes:
            return
        ages = []
        for path in sizes:
            try:
                ages.append((path.stat().st_mtime_ns, path))
            except OSError:
                ages.append((0, path))  # gone already (another process): drop it
        for _, path in sorted(ages):
            if total <= self.max_bytes:
                break
            if path == keep:
                continue
            total -= sizes.pop(path)
            try:
                path.unlink()
                self.evicted += 1
            except OSError:
                pass
