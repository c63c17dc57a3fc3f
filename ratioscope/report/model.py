"""The typed, versioned analysis report (docs/formats.md).

:class:`Report` is what :func:`ratioscope.analyze` returns. JSON comes from one writer
(:mod:`ratioscope.io.documents`); the per-sequence table (``--parquet``) is streamed to
disk while the analysis runs and copied to its destination atomically. The ``state``
block holds the mergeable sums behind every section so that reports of shards can be
merged exactly (``ratioscope merge``).

Sections are the typed results of the accumulators (``ratios`` a dict of
:class:`~ratioscope.sections.ratios.VariantStats`, ``mismatch`` a
:class:`~ratioscope.sections.mismatch.MismatchSection`, ...); :meth:`Report.from_dict`
rebuilds them exactly from a report JSON of any readable schema version, so renderers,
``merge`` and ``check`` work on the same objects whether a report is fresh or stored.
The section types are imported when a report is read, not with this module: they
import torch, and ``ratioscope --help`` must not.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_type_hints

from ratioscope.errors import OutputError, ReportError
from ratioscope.io.atomic import PENDING, atomic_path, output_problem
from ratioscope.io.documents import (
    SCHEMA_VERSION,
    JSONShapeError,
    check_schema_version,
    document_kind,
    from_jsonable,
    read_json_report,
    to_jsonable,
    upgrade_pooled_proportion,
    write_json,
)

if TYPE_CHECKING:
    from ratioscope.judgement.verdict import Thresholds, Verdict
    from ratioscope.sections.covariance import CovarianceSection
    from ratioscope.sections.future_policy import FuturePolicySection
    from ratioscope.sections.mismatch import MismatchSection
    from ratioscope.sections.policy_lag import PolicyLagSection
    from ratioscope.sections.ratios import VariantStats
    from ratioscope.sections.sampling import SamplingSection
    from ratioscope.sections.staleness import StalenessSection
    from ratioscope.sections.tepo import TepoSection
    from ratioscope.sections.trust_region import TrustRegionSection
    from ratioscope.sections.vitals import VitalsSection

#: the sections every report has, null when not computed
SECTION_KEYS = ("ratios", "mismatch", "covariance", "future_policy", "tepo", "trust_region")
#: sections added since, written after those only when computed: a report without one
#: (older, or of dumps that cannot feed it) reads and writes back unchanged
OPTIONAL_SECTION_KEYS = ("staleness", "policy_lag", "sampling", "vitals")


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
    #: what z compares (a key of ratioscope.data.batch.RATIO_PAIRS)
    ratio_pair: str = "current/old"


@dataclass
class Report:
    """Result of :func:`ratioscope.analyze`; sections are None when not computable."""

    tool: dict[str, Any]
    inputs: list[InputInfo]
    params: dict[str, Any]
    ratios: dict[str, VariantStats] | None = None
    mismatch: MismatchSection | None = None
    covariance: CovarianceSection | None = None
    future_policy: FuturePolicySection | None = None
    tepo: TepoSection | None = None
    trust_region: TrustRegionSection | None = None
    staleness: StalenessSection | None = None
    policy_lag: PolicyLagSection | None = None
    sampling: SamplingSection | None = None
    vitals: VitalsSection | None = None
    warnings: list[str] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    sequences: SequenceTable | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document: docs/formats.md keys in order, then the mergeable ``state``."""
        document: dict[str, Any] = {
            "schema_version": self.schema_version,
            "tool": self.tool,
            "inputs": self.inputs,
            "params": self.params,
        }
        for key in SECTION_KEYS:
            document[key] = getattr(self, key)
        for key in OPTIONAL_SECTION_KEYS:
            if getattr(self, key) is not None:
                document[key] = getattr(self, key)
        document["warnings"] = self.warnings
        document["state"] = self.state
        return to_jsonable(document)

    @classmethod
    def from_dict(
        cls, document: Mapping[str, Any], source: str | Path | None = None, sections: bool = True
    ) -> Report:
        """The report a JSON document (``to_dict()``, a report file) holds, sections typed
        (``sections=False``: left out, for a report that is only merged, from its
        ``state``: the merge recomputes every section from the merged sums).

        Reads schema versions 1 and 2 (the same layout); the report is of the current
        version (written back, it says so). A field that an older report lacks takes
        its default; a ``proportion`` pooled over tokens (reports older than
        ``proportion_pooled``) moves there
        (:func:`~ratioscope.io.documents.upgrade_pooled_proportion`).
        ``state`` stays the JSON dict that ``Accumulator.from_state`` reads.

        Raises:
            ReportError: a missing or unreadable schema version, or a document that does
                not have the layout of an analyze report (naming ``source`` and where).
        """
        check_schema_version(document, source)
        kind = document_kind(document)
        if kind != "an analyze report" and kind != document_kind(None):
            raise ReportError(source, f"{kind}, not an analyze report")
        document = upgrade_pooled_proportion(document)
        values: dict[str, Any] = {}
        hints = _report_hints()
        known = {f.name for f in fields(cls)} - {"schema_version", "sequences"}
        for key, value in document.items():
            if key == "schema_version":
                continue
            if key not in known:
                raise ReportError(source, f"not an analyze report (unknown key '{key}')")
            if not sections and key in _SECTIONS:
                continue
            try:
                values[key] = from_jsonable(hints[key], value, key)
            except JSONShapeError as error:
                raise ReportError(source, f"malformed analyze report: {error}") from None
        missing = [key for key in ("tool", "inputs", "params") if key not in values]
        if missing:
            raise ReportError(source, f"not an analyze report (no '{missing[0]}' key)")
        return cls(**values)

    @classmethod
    def read_json(cls, path: str | Path) -> Report:
        """Read a report JSON file (schema version 1 or 2); see :meth:`from_dict`."""
        return cls.from_dict(read_json_report(path), source=path)

    def write_json(self, path: str | Path) -> None:
        """Write the report atomically (a temporary file beside ``path``, then a rename)."""
        write_json(self.to_dict(), path)

    def write_parquet(self, path: str | Path) -> None:
        """Write the per-sequence table (one row per sequence) atomically."""
        if self.sequences is None:
            raise ValueError("this report was made without the per-sequence table")
        self.sequences.write(path)

    def verdict(
        self, thresholds: Thresholds | None = None, baseline: Report | None = None
    ) -> Verdict:
        """The health verdict of this report (:func:`ratioscope.judgement.verdict.verdict`): its
        headline numbers graded against ``thresholds`` (default: docs/health.md), and
        against a healthy ``baseline`` report where one is given."""
        from ratioscope.judgement.verdict import verdict

        return verdict(self, thresholds, baseline)


#: the report's sections (what ``from_dict(sections=False)`` leaves out)
_SECTIONS = frozenset((*SECTION_KEYS, *OPTIONAL_SECTION_KEYS))


def _report_hints() -> dict[str, Any]:
    """Report's field types, the section types imported now (they import torch)."""
    from ratioscope.sections.covariance import CovarianceSection
    from ratioscope.sections.future_policy import FuturePolicySection
    from ratioscope.sections.mismatch import MismatchSection
    from ratioscope.sections.policy_lag import PolicyLagSection
    from ratioscope.sections.ratios import VariantStats
    from ratioscope.sections.sampling import SamplingSection
    from ratioscope.sections.staleness import StalenessSection
    from ratioscope.sections.tepo import TepoSection
    from ratioscope.sections.trust_region import TrustRegionSection
    from ratioscope.sections.vitals import VitalsSection

    names = {
        "VariantStats": VariantStats,
        "MismatchSection": MismatchSection,
        "CovarianceSection": CovarianceSection,
        "FuturePolicySection": FuturePolicySection,
        "TepoSection": TepoSection,
        "TrustRegionSection": TrustRegionSection,
        "StalenessSection": StalenessSection,
        "PolicyLagSection": PolicyLagSection,
        "SamplingSection": SamplingSection,
        "VitalsSection": VitalsSection,
    }
    return get_type_hints(Report, localns=names)


class SequenceTable:
    """Per-sequence rows streamed to temporary Parquet parts (memory stays bounded)."""

    def __init__(self) -> None:
        self._directory = tempfile.TemporaryDirectory(prefix="ratioscope-")
        PENDING.add(Path(self._directory.name))  # removed on SIGTERM too
        self._parts: list[Path] = []

    def append(self, frame: Any) -> None:
        """Add a polars DataFrame of rows."""
        path = Path(self._directory.name) / f"part-{len(self._parts):06d}.parquet"
        try:
            frame.write_parquet(path)
        except Exception as error:
            problem = output_problem(error, path)
            if problem is None:
                raise
            raise OutputError(
                path.parent, f"cannot write the per-sequence table's temporary parts: {problem}"
            ) from None
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
