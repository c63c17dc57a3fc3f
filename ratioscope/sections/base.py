"""The accumulator protocol every report section follows.

An accumulator is told of each file once (:meth:`Accumulator.begin_file`, where it
declines files that lack its inputs and notes per-file facts), then fed
:class:`~ratioscope.sections.context.Context` objects (the file's chunks of rows, or the
whole file for sections that need complete groups), keeps mergeable state
(:mod:`ratioscope.stats`), serialises it for ``ratioscope merge`` and finally produces
its typed section. A section whose inputs are missing in every file is ``None`` in the
report with a warning naming the missing tensor.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from torch import Tensor

from ratioscope.batch import TokenBatch
from ratioscope.errors import DumpKeyError
from ratioscope.params import AnalysisParams
from ratioscope.sections.context import Context


def listed(items: list[str], shown: int = 3) -> str:
    """``a; b; c and 4 more``: file lists in warnings stay one readable line."""
    text = "; ".join(items[:shown])
    return text + (f" and {len(items) - shown} more" if len(items) > shown else "")


def required(batch: TokenBatch, name: str) -> Tensor:
    """The tensor ``name`` of ``batch``, one the section cannot do without.

    The orchestrator feeds a section only files that :meth:`Accumulator.begin_file`
    accepted, so this fails only for a caller that feeds a section directly.

    Raises:
        DumpKeyError: ``batch`` has no ``name``.
    """
    value = getattr(batch, name)
    if not isinstance(value, Tensor):
        raise DumpKeyError(batch.source, missing=name, found=batch.available())
    return value


class Accumulator(ABC):
    """Base class of report-section accumulators."""

    #: key of the section in the report
    name: ClassVar[str]
    #: True when the section needs whole files (complete groups), not row chunks
    per_file: ClassVar[bool] = False
    #: canonical tensors the section cannot do without
    requires: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: AnalysisParams) -> None:
        self.params = params
        self.fed = 0  # files that fed this section
        self.skipped: list[str] = []  # files that lacked an input, with the reason

    def missing(self, batch: TokenBatch) -> list[str]:
        """Canonical names this section needs but ``batch`` lacks."""
        return [name for name in self.requires if not batch.has(name)]

    def skip(self, batch: TokenBatch, missing: list[str]) -> None:
        self.skipped.append(f"{batch.source} (no {', '.join(missing)})")

    def begin_file(self, batch: TokenBatch) -> bool:
        """Take note of a file before its chunks are fed; called once per file.

        A section that keeps per-file facts (which files lack an optional input, ...)
        extends this; chunks carry no sign of where a file starts.

        Returns:
            False when the file lacks an input the section needs (recorded for the
            warning), and the section is then not fed the file's chunks.
        """
        missing = self.missing(batch)
        if missing:
            self.skip(batch, missing)
            return False
        self.fed += 1
        return True

    @abstractmethod
    def update(self, ctx: Context) -> dict[str, Tensor]:
        """Consume a chunk of a file given to :meth:`begin_file`; return per-sequence
        columns ([rows] tensors) for Parquet."""

    @abstractmethod
    def merge(self, other: Accumulator) -> None:
        """Fold another accumulator of the same parameters into this one."""

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """JSON-able state from which :meth:`from_state` restores this accumulator."""

    @classmethod
    @abstractmethod
    def from_state(cls, params: AnalysisParams, state: dict[str, Any]) -> Accumulator: ...

    @abstractmethod
    def result(self) -> Any:
        """The typed section, or None when nothing fed it."""

    def warnings(self) -> list[str]:
        """Messages for the report's ``warnings`` list."""
        if not self.skipped:
            return []
        needed = " and ".join(f"'{n}'" for n in self.requires) or "its inputs"
        if self.fed == 0:
            return [f"{self.name}: not computed; it needs {needed}, missing in {self._where()}"]
        return [f"{self.name}: computed without {self._where()}"]

    def _where(self) -> str:
        return listed(self.skipped)

    def base_state(self) -> dict[str, Any]:
        return {"fed": self.fed, "skipped": list(self.skipped)}

    def restore_base(self, state: dict[str, Any]) -> None:
        self.fed = int(state.get("fed", 0))
        self.skipped = list(state.get("skipped", []))

    def merge_base(self, other: Accumulator) -> None:
        self.fed += other.fed
        self.skipped.extend(other.skipped)
