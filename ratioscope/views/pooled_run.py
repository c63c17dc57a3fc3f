"""The pooled report of a run's steps so far, and its verdict after each step, with the
step cache's help (:class:`PooledRun`, part of :class:`~ratioscope.views.timeline.RunFold`).

The verdict after a step judges the pooled report of every step so far: merging each
step's state and building that report costs more than reading the step from the cache.
So the cache keeps, under the *chain* of the steps so far (the thresholds, then each
step's cache key and paths, hashed in order):

- the verdict of the pooled report after each step (``kind="pooled verdict"``);
- the pooled report itself, state and all, after the last step of each fold
  (``kind="pooled report"``): where a run was folded before.

A run folded again then merges nothing up to the latest step whose pooled report the
cache holds (with every verdict before it): it reads their verdicts, and starts merging
from that report if more steps follow. An entry that does not read back there is
:class:`ChainBroken`: the caller folds the run again without these entries.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ratioscope.analysis.cache import StepCache
    from ratioscope.judgement.verdict import Thresholds, Verdict
    from ratioscope.report.model import Report
    from ratioscope.views.step_analysis import StepResult

#: the kinds of the cache entries of a chain
VERDICT_KIND = "pooled verdict"
REPORT_KIND = "pooled report"


class ChainBroken(Exception):
    """A cache entry of the steps so far did not read back after the fold relied on it:
    the run is to be folded again without the chain."""


def chain_seed(thresholds: Thresholds | None, view_sections: Sequence[str] | None) -> str:
    """The start of a chain: what a pooled verdict depends on besides the steps."""
    from ratioscope.views.step_analysis import thresholds_key

    sections = None if view_sections is None else sorted(view_sections)
    text = thresholds_key(thresholds) + repr(sections)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chained(chain: str | None, key: str | None, paths: Sequence[str | Path]) -> str | None:
    """The chain with one more step (its cache key and its files' paths: a pooled
    report names its files, so a run moved elsewhere has chains of its own)."""
    if chain is None or key is None:
        return None
    named = "\0".join(str(p) for p in paths)
    return hashlib.sha256(f"{chain}:{key}:{named}".encode()).hexdigest()


def _report_key(chain: str) -> str:
    return hashlib.sha256(f"{chain}:pooled report".encode()).hexdigest()


class PooledRun:
    """The pooled report of the steps so far and its verdict after each step.

    Args:
        thresholds: the verdict's.
        view_sections: the sections of the pooled report computed after each step, as
            the verdict reads them (None: all of them, whole, as ``watch`` shows them).
        cache: the step cache, which keeps the chain's entries (None: none kept).
    """

    def __init__(
        self,
        thresholds: Thresholds | None,
        view_sections: Sequence[str] | None,
        cache: StepCache | None,
    ) -> None:
        from ratioscope.analysis.pipeline import ReportMerge

        self.thresholds = thresholds
        self.view_sections = view_sections
        self.cache = cache
        self.merge = ReportMerge()
        #: the chain of the steps so far (None: no cache, or a step without a key)
        self.chain: str | None = chain_seed(thresholds, view_sections) if cache else None
        self.count = 0
        #: the steps 1..skip_through are not merged: the cache holds their verdicts, and
        #: the pooled report after the last of them
        self.skip_through = 0
        #: the chain whose cached pooled report stands for the steps merged so far
        self.base: str | None = None
        #: the pooled report after the latest step, where it was made or read (None
        #: where a cached verdict stood for it)
        self.pooled: Report | None = None
        #: whether :attr:`pooled` is whole, with its state (else brief, for the verdict)
        self.whole = False

    @property
    def skipping(self) -> bool:
        """Whether the next step is one the cache stands for (not merged)."""
        return self.count < self.skip_through

    def plan(self, upcoming: Sequence[tuple[str | None, Sequence[str | Path]]]) -> None:
        """The steps about to be folded (cache key and paths of each, in order), before
        the first: the latest of them whose pooled report the cache holds, with the
        verdict after every step before it, is merged from that report."""
        if self.cache is None or self.chain is None or self.count:
            return
        chains: list[str | None] = []
        chain: str | None = self.chain
        for key, paths in upcoming:
            chain = chained(chain, key, paths)
            chains.append(chain)
        for index in range(len(chains) - 1, -1, -1):
            found = chains[index]
            if found is not None and self.cache.has(_report_key(found)):
                # the first step's verdict is its own: none is kept for it
                if all(c is not None and self.cache.has(c) for c in chains[1 : index + 1]):
                    self.skip_through = index + 1
                return

    def add(
        self, step: int, paths: Sequence[str | Path], result: StepResult, last: bool = False
    ) -> Verdict | None:
        """Fold one step in; the verdict of the pooled report after it (None after the
        first step: the step's own stands for it). ``last``: the pooled report is made
        whole, with its state (and kept in the cache).

        Raises:
            MergeError: the step does not join the run (the fold is left as it was);
            ChainBroken: see the module.
        """
        skipping = self.count + 1 <= self.skip_through
        if not skipping:
            if self.base is not None:
                self._start_from(self.base)
            self.merge.add(result.report, f"step {step}", result.totals)
        self.count += 1
        self.chain = chained(self.chain, result.key, paths)
        first = self.count == 1
        cached = None if first else self._cached_verdict()
        self.whole = False
        if skipping:
            if not first and cached is None:
                raise ChainBroken(f"step {step}: no pooled verdict")
            self.pooled = None
            if self.count == self.skip_through:
                self.base = self.chain
                if last:
                    if self.chain is None:
                        raise ChainBroken(f"step {step}: no chain")
                    self.pooled, self.whole = self._cached_report(self.chain), True
            return cached
        if last:
            self.pooled, self.whole = self.merge.result(), True
        elif first or cached is None:
            # with the verdict's sections only, the report is judged, never shown: brief
            brief = self.view_sections is not None
            self.pooled = self.merge.result(state=False, sections=self.view_sections, brief=brief)
        else:  # the cache's verdict stands for the pooled report: it is not made
            self.pooled = None
        if not first and cached is None:
            cached = self._judged()
        if last and self.cache is not None and self.chain is not None:
            assert self.pooled is not None
            self.cache.put(
                _report_key(self.chain), {"report": self.pooled.to_dict()}, kind=REPORT_KIND
            )
        return cached

    def result(self, state: bool = True) -> Report:
        """The pooled report of every step so far, with its state (none: the merge's
        error); ``state`` False: without the sections' state where it is made now (a
        report to write, not to merge: about a third cheaper)."""
        if self.pooled is not None and self.whole:
            return self.pooled
        if self.base is not None:
            self._start_from(self.base)
        return self.merge.result(state=state)

    def outline(self, sections: Sequence[str]) -> Report:
        """The pooled report of every step so far with only ``sections`` computed, and
        every section's warnings, without state (:meth:`ReportMerge.outline`); the whole
        report where it was made after the last step."""
        if self.pooled is not None and self.whole:
            return self.pooled
        if self.base is not None:
            self._start_from(self.base)
        return self.merge.outline(sections)

    def whole_report(self, state: bool = True) -> Report:
        """:meth:`result`, kept as :attr:`pooled` until the next step where it has its
        state (a fold whose last step was not folded as the last, e.g. a watch's look,
        makes it when asked)."""
        report = self.result(state)
        if state:
            self.pooled, self.whole = report, True
        return report

    def _cached_verdict(self) -> Verdict | None:
        if self.cache is None or self.chain is None:
            return None
        from ratioscope.judgement.verdict import Verdict

        entry = self.cache.get(self.chain, kind=VERDICT_KIND)
        if entry is None:
            return None
        try:
            return Verdict.from_dict(entry["verdict"])
        except (ValueError, TypeError, KeyError, AttributeError):
            self.cache.refuse()
            return None

    def _judged(self) -> Verdict:
        """The verdict of the pooled report made now (kept in the cache)."""
        from ratioscope.judgement.verdict import verdict

        assert self.pooled is not None
        judged = verdict(self.pooled, self.thresholds)
        if self.cache is not None and self.chain is not None:
            self.cache.put(self.chain, {"verdict": judged.to_dict()}, kind=VERDICT_KIND)
        return judged

    def _cached_report(self, chain: str) -> Report:
        """The pooled report the cache holds after the steps of ``chain``."""
        from ratioscope.errors import RatioscopeError
        from ratioscope.report.model import Report

        assert self.cache is not None
        entry = self.cache.get(_report_key(chain), kind=REPORT_KIND)
        try:
            if entry is None:
                raise ValueError("gone")
            report = Report.from_dict(entry["report"])
            if not report.state or len(report.inputs) == 0:
                raise ValueError("no state")
        except (RatioscopeError, ValueError, TypeError, KeyError) as error:
            if entry is not None:
                self.cache.refuse()
            raise ChainBroken(f"the pooled report of the steps so far: {error}") from None
        return report

    def _start_from(self, chain: str) -> None:
        """Merge from the cached pooled report of the steps of ``chain``."""
        from ratioscope.analysis.pipeline import ReportMerge
        from ratioscope.errors import MergeError

        report = self.pooled if self.pooled is not None else self._cached_report(chain)
        merge = ReportMerge()
        try:
            merge.add(report, "the steps so far")
        except MergeError as error:
            raise ChainBroken(str(error)) from None
        self.merge, self.base = merge, None
