"""The evaluation report: EvalReport and its parts, one object for JSON and Parquet.

Built by :mod:`ratioscope.evaluation.evaluate`; rendered by ``render/eval_tables.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratioscope.io.samples import SampleFile

if TYPE_CHECKING:
    import polars as pl

#: ``schema_version`` of the eval report: its own, as its layout changes apart from the
#: analyze report's (``report_io.SCHEMA_VERSION``); ``read_json_report`` reads both
EVAL_SCHEMA_VERSION = 1

NO_DATASET = "(none)"
"""``by_dataset`` key of problems without a dataset when other problems have one.

Datasets are listed in sorted order, then this key."""

DIVERSITY_METRICS: tuple[str, ...] = ("tfidf_cosine", "rouge_l", "jaccard", "edit_similarity")


@dataclass(frozen=True)
class Pass1SE:
    """Pass@1 ± SE over sample positions (FPA App. B.3)."""

    mean: float
    se: float
    samples_per_problem: int


@dataclass(frozen=True)
class ProblemClusters:
    """Correct-response clusters of one problem."""

    problem: int | str
    dataset: str | None
    samples: int
    correct: int
    clusters: int
    sizes: list[int]


@dataclass(frozen=True)
class ClusterSummary:
    """Clusters of correct responses: mean count per problem, and per problem (top level).

    ``unique_correct_ratio`` is the mean over problems of clusters / n, the "unique
    correct ratio" of QUATRO App. C.7.
    """

    mean: float
    unique_correct_ratio: float
    per_problem: list[ProblemClusters] | None


@dataclass(frozen=True)
class DiversitySummary:
    """Mean over problems (with at least two correct responses) of the pairwise means."""

    tfidf_cosine: float | None
    rouge_l: float | None
    jaccard: float | None
    edit_similarity: float | None
    problems: int
    pairs: int


@dataclass(frozen=True)
class MetricBlock:
    """Metrics averaged over a set of problems (all of a method's, or one dataset's)."""

    problems: int
    samples: int
    samples_per_problem: dict[str, int]
    pass_at_k: dict[str, float]
    avg: float
    pass1_se: Pass1SE | None
    ucc_at_k: dict[str, float] | None
    clusters: ClusterSummary | None
    diversity: DiversitySummary | None


@dataclass(frozen=True)
class MethodResult(MetricBlock):
    """A method's metrics over all its problems, and per dataset when datasets are given."""

    by_dataset: dict[str, MetricBlock] | None


@dataclass(frozen=True)
class FlipBucket:
    """One difficulty bucket of the flip-rate analysis (QUATRO App. C.7, docs/evaluation.md).

    ``base_fraction`` = [lo, hi): the bucket holds prompts with lo <= c_base / n_base < hi
    (hi = 1 includes 1). ``flip_at_k`` is None for an empty bucket.
    """

    name: str
    base_fraction: list[float]
    prompts: int
    flip_at_k: dict[str, float | None]
    unsolved_to_solved: int


@dataclass(frozen=True)
class FlipRate:
    """Flip rate of one trained method against the base method."""

    problems: int
    buckets: list[FlipBucket]


@dataclass(frozen=True)
class FlipReport:
    base: str
    by_method: dict[str, FlipRate]


@dataclass(frozen=True)
class EvalParams:
    command: str
    k: list[int]
    threshold: float | None = None
    linkage: str | None = None
    max_pairs: int | None = None
    seed: int | None = None
    token_pattern: str | None = None
    base_method: str | None = None
    #: how numeric correctness values were read, e.g. "score >= 0.5"; None when every
    #: input held true/false or 0/1 and no threshold was given
    correct_rule: str | None = None
    correct_threshold: float | None = None


@dataclass(frozen=True)
class ProblemRow:
    """One row of the per-problem table (Parquet)."""

    method: str
    problem: str
    dataset: str | None
    samples: int
    correct: int
    pass_at_k: dict[str, float]
    clusters: int | None = None
    ucc_at_k: dict[str, float] | None = None
    diversity: dict[str, float] | None = None
    pairs: int | None = None


@dataclass
class EvalReport:
    """The result of ``eval-passk`` / ``eval-ucc``; JSON and Parquet come from this object."""

    schema_version: int
    tool: dict[str, Any]
    inputs: list[SampleFile]
    params: EvalParams
    by_method: dict[str, MethodResult]
    flip_rate: FlipReport | None
    warnings: list[str]
    per_problem: list[ProblemRow] = field(default_factory=list, repr=False)

    def to_document(self) -> dict[str, Any]:
        """The JSON document (the per-problem table is not part of it)."""
        from ratioscope.io.documents import to_jsonable

        return {
            "schema_version": self.schema_version,
            "tool": self.tool,
            "inputs": to_jsonable(self.inputs),
            "params": to_jsonable(self.params),
            "by_method": to_jsonable(self.by_method),
            "flip_rate": to_jsonable(self.flip_rate),
            "warnings": list(self.warnings),
        }

    def write_json(self, path: str | Path) -> None:
        from ratioscope.io.documents import write_json

        write_json(self.to_document(), path)

    def per_problem_frame(self) -> pl.DataFrame:
        """The per-problem table as a polars DataFrame, one row per (method, problem)."""
        import polars as pl

        columns: dict[str, list[Any]] = {}
        for row in self.per_problem:
            flat: dict[str, Any] = {
                "method": row.method,
                "problem": row.problem,
                "dataset": row.dataset,
                "samples": row.samples,
                "correct": row.correct,
            }
            flat.update({f"pass_at_{k}": v for k, v in row.pass_at_k.items()})
            if row.ucc_at_k is not None:
                flat["clusters"] = row.clusters
                flat.update({f"ucc_at_{k}": v for k, v in row.ucc_at_k.items()})
            if row.diversity is not None:
                # NaN marks "no pair"; Parquet readers understand null better.
                flat.update({k: None if v != v else v for k, v in row.diversity.items()})
                flat["pairs"] = row.pairs
            for key, value in flat.items():
                columns.setdefault(key, []).append(value)
        schema = {key: _polars_type(key) for key in columns}
        return pl.DataFrame(columns, schema=schema)

    def write_parquet(self, path: str | Path) -> None:
        from ratioscope.io.atomic import atomic_path

        frame = self.per_problem_frame()
        with atomic_path(path) as tmp:
            frame.write_parquet(tmp)


def _polars_type(column: str) -> type[pl.DataType]:
    import polars as pl

    if column in ("method", "problem", "dataset"):
        return pl.String
    if column in ("samples", "correct", "clusters", "pairs"):
        return pl.Int64
    return pl.Float64
