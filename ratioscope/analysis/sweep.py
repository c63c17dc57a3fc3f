"""Kalman Q/V sweep (KPO Fig. 4 / Table 2): the token-state table per noise ratio.

One streaming pass over the dumps feeds a token/sequence accumulator and one Kalman
accumulator per Q/V value, so each file is read once whatever the number of values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ratioscope import defaults
from ratioscope.analysis.pipeline import run_accumulators
from ratioscope.data.batch import TokenBatch
from ratioscope.data.params import AnalysisParams
from ratioscope.errors import ParameterError
from ratioscope.io.documents import SCHEMA_VERSION, to_jsonable, tool_info, write_json
from ratioscope.io.loaders import LoadOptions, load_params
from ratioscope.progress import ProgressCallback
from ratioscope.report.model import InputInfo
from ratioscope.sections.base import Accumulator
from ratioscope.sections.ratios import RatiosAccumulator, VariantStats

DEFAULT_QV = defaults.QVS


@dataclass
class SweepReport:
    """Table 2 rows: token, sequence, and the Kalman variant at each Q/V."""

    tool: dict[str, Any]
    inputs: list[InputInfo]
    params: dict[str, Any]
    qv: list[float]
    token: VariantStats | None
    sequence: VariantStats | None
    kalman: dict[str, VariantStats | None]
    warnings: list[str] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(
            {
                "schema_version": self.schema_version,
                "tool": self.tool,
                "inputs": self.inputs,
                "params": self.params,
                "sweep": {
                    "qv": self.qv,
                    "token": self.token,
                    "sequence": self.sequence,
                    "kalman": self.kalman,
                },
                "warnings": self.warnings,
            }
        )

    def write_json(self, path: str | Path) -> None:
        write_json(self.to_dict(), path)


def qv_key(qv: float) -> str:
    """Report key of a Q/V value: 1e-06 -> "1e-06"."""
    return f"{qv:g}"


def sweep(
    batch_or_paths: TokenBatch | str | Path | Sequence[str | Path],
    qvs: Sequence[float] = DEFAULT_QV,
    *,
    params: AnalysisParams | None = None,
    load_options: LoadOptions | None = None,
    device: str = defaults.DEVICE,
    chunk_elements: int | None = None,
    progress: ProgressCallback | None = None,
) -> SweepReport:
    """Run the KPO statistics for each Q/V (Q = Q/V x ``params.kalman_v``).

    Raises:
        ParameterError: an empty or non-positive Q/V list (``qvs``).
    """
    params = params or AnalysisParams()
    load_options = load_options or LoadOptions()
    qvs = list(dict.fromkeys(float(x) for x in qvs))  # a repeated value is one row
    if not qvs or not all(0 < x < math.inf for x in qvs):  # NaN fails both
        raise ParameterError("qvs", f"needs finite positive values, got {qvs}")
    per_qv = [replace(params, kalman_q=qv * params.kalman_v) for qv in qvs]

    def make() -> list[Accumulator]:
        return [
            RatiosAccumulator(params, ("token", "sequence")),
            *(RatiosAccumulator(p, ("kalman",)) for p in per_qv),
        ]

    run = run_accumulators(
        batch_or_paths,
        make,
        params=params,
        load_options=load_options,
        device=device,
        chunk_elements=chunk_elements,
        progress=progress,
    )
    base, *kalman = run.totals
    base_result = base.result() or {}
    warnings = list(dict.fromkeys(run.warnings))
    for acc in run.totals:
        warnings.extend(w for w in acc.warnings() if w not in warnings)
    return SweepReport(
        tool=tool_info(),
        inputs=run.inputs,
        params={
            "analysis": params.to_dict(),
            "load": load_params(load_options),
            "qv": qvs,
        },
        qv=qvs,
        token=base_result.get("token"),
        sequence=base_result.get("sequence"),
        kalman={
            qv_key(qv): (acc.result() or {}).get("kalman")
            for qv, acc in zip(qvs, kalman, strict=True)
        },
        warnings=warnings,
    )
