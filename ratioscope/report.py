"""The typed, versioned analysis report (DESIGN section 4).

:class:`Report` is what :func:`ratioscope.analyze` returns. JSON comes from one writer
(:mod:`ratioscope.report_io`); the per-sequence table (``--parquet``) is streamed to
disk while the analysis runs and copied to its destination atomically. The ``state``
block holds the mergeable sums behind every section so that reports of shards can be
merged exactly (``ratioscope merge``).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ratioscope.io.atomic import atomic_path
from ratioscope.report_io import SCHEMA_VERSION, to_jsonable, write_json

SECTION_KEYS = ("ratios", "mismatch", "covariance", "future_policy", "tepo", "trust_region")


@dataclass(frozen=True)
class InputInfo:
    """One analysed file."""

    path: str
    format: str
    profile: str
    sha256: str
    sequences: int
    tokens: int
    padding: str
    #: what z compares (a key of ratioscope.batch.RATIO_PAIRS)
    ratio_pair: str = "current/old"


@dataclass
class Report:
    """Result of :func:`ratioscope.analyze`; sections are None when not computable."""

    tool: dict[str, Any]
    inputs: list[InputInfo]
    params: dict[str, Any]
    ratios: Any = None
    mismatch: Any = None
    covariance: Any = None
    future_policy: Any = None
    tepo: Any = None
    trust_region: Any = None
    warnings: list[str] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    sequences: SequenceTable | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document: DESIGN 4 keys in order, then the mergeable ``state``."""
        document: dict[str, Any] = {
            "schema_version": self.schema_version,
            "tool": self.tool,
            "inputs": self.inputs,
            "params": self.params,
        }
        for key in SECTION_KEYS:
            document[key] = getattr(self, key)
        document["warnings"] = self.warnings
        document["state"] = self.state
        return to_jsonable(document)

    def write_json(self, path: str | Path) -> None:
        """Write the report atomically (a temporary file beside ``path``, then a rename)."""
        write_json(self.to_dict(), path)

    def write_parquet(self, path: str | Path) -> None:
        """Write the per-sequence table (one row per sequence) atomically."""
        if self.sequences is None:
            raise ValueError("this report was made without the per-sequence table")
        self.sequences.write(path)


class SequenceTable:
    """Per-sequence rows streamed to temporary Parquet parts (memory stays bounded)."""

    def __init__(self) -> None:
        self._directory = tempfile.TemporaryDirectory(prefix="ratioscope-")
        self._parts: list[Path] = []

    def append(self, frame: Any) -> None:
        """Add a polars DataFrame of rows."""
        path = Path(self._directory.name) / f"part-{len(self._parts):06d}.parquet"
        frame.write_parquet(path)
        self._parts.append(path)

    def frame(self) -> Any:
        """All rows as one polars DataFrame (reads every part)."""
        import polars as pl

        if not self._parts:
            return pl.DataFrame()
        return pl.concat([pl.read_parquet(p) for p in self._parts], how="diagonal_relaxed")

    def write(self, target: str | Path) -> None:
        """Concatenate the parts into ``target`` without loading them all at once."""
        import polars as pl

        with atomic_path(target) as tmp:
            if not self._parts:
                pl.DataFrame().write_parquet(tmp)
                return
            scans = [pl.scan_parquet(p) for p in self._parts]
            pl.concat(scans, how="diagonal_relaxed").sink_parquet(tmp)
