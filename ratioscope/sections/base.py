"""The accumulator protocol every report section follows.

An accumulator is told of each file once (:meth:`Accumulator.begin_file`, where it
declines files that lack its inputs and notes per-file facts), then fed
:class:`~ratioscope.sections.context.Context` objects (the file's chunks of rows; the
whole file for sections that need complete groups; or, for such a section that declares
``passes``, the file's chunks several times over, :meth:`Accumulator.update_pass`), and
finally produces its typed section. Its mergeable state
(:mod:`ratioscope.sections.summaries` values, counts, file lists) is declared once with
:func:`~ratioscope.sections.state.mergeable`, from which ``merge``, ``state()`` and
``from_state`` (for ``ratioscope merge``) follow.
A section whose inputs are missing in every file is ``None`` in the report with a
warning naming the missing tensor.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from torch import Tensor

from ratioscope.data.batch import TokenBatch
from ratioscope.data.params import AnalysisParams
from ratioscope.errors import DumpKeyError
from ratioscope.sections.context import Context
from ratioscope.sections.state import Declared, mergeable


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


class Accumulator(Declared, ABC):
    """Base class of report-section accumulators.

    A subclass declares its state with :func:`~ratioscope.sections.state.mergeable` and
    implements :meth:`update` and :meth:`result`; ``merge``, ``state`` and
    ``from_state`` work from the declarations.
    """

    #: key of the section in the report
    name: ClassVar[str]
    #: True when the section needs whole files (complete groups), not row chunks
    per_file: ClassVar[bool] = False
    #: True for a ``per_file`` section that works on per-sequence values of whole groups
    #: only: it is fed once per training step, with the groups of every file of the
    #: step joined by group id (:mod:`ratioscope.sections.group_join`), a [N, 1] mask standing
    #: in for the tokens
    joins_groups: ClassVar[bool] = False
    #: True for a section whose token-level work stays per file but whose group-level
    #: numbers take the same joined groups of each step (:meth:`update_groups`)
    takes_groups: ClassVar[bool] = False
    #: True for a section with ``passes`` whose per-group statistics need whole groups:
    #: its result of a file that does not hold its groups whole is replaced by passes
    #: over the step's files joined by group id (:mod:`ratioscope.sections.scope_join`)
    centres_on_groups: ClassVar[bool] = False
    #: canonical tensors the section cannot do without
    requires: ClassVar[tuple[str, ...]] = ()
    #: for a ``per_file`` section: the passes it makes over a file's chunks instead of
    #: one :meth:`update` with the whole file (0: it needs the whole file at once), so
    #: that its memory is bounded by a chunk, not by the file
    passes: ClassVar[int] = 0
    #: canonical tensors the passes after the first read (None: every tensor); a file
    #: read again for them may skip the others
    pass_inputs: ClassVar[tuple[str, ...] | None] = None

    fed = mergeable(int, "sum", optional=True)  # files that fed this section
    #: files that lacked an input, with the reason
    skipped: list[str] = mergeable(list, "extend", optional=True)

    def __init__(self, params: AnalysisParams) -> None:
        self.params = params
        self.init_state()

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

    def begin_passes(self, in_memory: bool) -> None:
        """Before the first pass over a file given to :meth:`begin_file`: ``in_memory``
        says its chunks are in memory already (a file read whole), so that keeping what
        a pass computed for the next costs no more than the file itself."""

    def update_pass(self, index: int, ctx: Context) -> dict[str, Tensor]:
        """Consume a chunk in pass ``index`` (0 <= index < ``passes``) over a file given
        to :meth:`begin_file`: every chunk of the file goes through pass 0 in order, then
        :meth:`end_pass` (0), then every chunk through pass 1, and so on. Per-sequence
        columns ([rows] tensors) come from the last pass; earlier passes return ``{}``.
        """
        raise NotImplementedError(f"{self.name} makes no passes over chunks")

    def end_pass(self, index: int) -> None:
        """Every chunk of the file went through pass ``index``."""

    def update_groups(self, groups: Any) -> None:
        """A ``takes_groups`` section: the whole groups of one step, joined across its
        files (:class:`ratioscope.sections.group_join.JoinedGroups`, [N] per-sequence values)."""

    def record_join(self, counts: Any) -> None:
        """A ``joins_groups`` section: what the join of the run's steps did
        (:class:`ratioscope.sections.group_join.JoinCounts`), for its state and notes."""

    def merge(self, other: Accumulator) -> None:
        """Fold another accumulator of the same class and parameters into this one."""
        self.merge_state(other)

    def state(self) -> dict[str, Any]:
        """JSON-able state from which :meth:`from_state` restores this accumulator."""
        return self.dump_state()

    @classmethod
    def from_state(cls, params: AnalysisParams, state: dict[str, Any]) -> Accumulator:
        """The accumulator whose :meth:`state` was ``state``.

        Raises:
            KeyError, TypeError, ValueError: ``state`` is not such a block.
        """
        acc = cls(params)
        acc.load_state(state)
        return acc

    @abstractmethod
    def result(self) -> Any:
        """The typed section, or None when nothing fed it."""

    def brief_result(self) -> Any:
        """The section as the verdict reads it, for a report that is judged, never shown
        or written (a timeline's pooled report after each step): :meth:`result`, but
        where a section's display tables cost more than its findings, which leaves them
        empty."""
        return self.result()

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
