"""The ``vitals`` section: token entropy, response length, reward, advantages (docs/health.md).

The numbers a trainer's tracker shows beside the loss, computed from the dump (the
formulas are :mod:`ratioscope.functional.vitals`): entropy level and its change within
the step, response lengths and the share at the length limit, reward, correct share,
advantage magnitudes and the groups whose rewards are all equal. Every part needs only
the tensors it reads, so a dump without entropies still gets its lengths.

Fed whole files in one pass over their chunks (memory of a chunk, plus a few numbers per
row): token sums stream chunk by chunk, while the short/long split of the advantages
(at the file's median length) needs the file's rows, kept per row and folded in when the
pass ends. The equal-reward groups are counted on the whole groups of each training
step, joined by group id across the step's files (``takes_groups``,
:mod:`ratioscope.sections.group_join`), as trust_region's are.

The length limit is, in order: the ``max_length`` analysis parameter (``--max-length``;
source "option"), else the padded width of each file (source "padded width", with a
note saying the limit was assumed from it). A reader that records the trainer's own
setting can hand it over as the source "trainer settings" (:func:`length_limit`). A
layout whose rows hold the prompt before the response (prime-rl, NeMo-RL: the padded
width counts the prompt) has no limit to assume (source "unknown"): the share at the
limit is not judged, and the note names the longest response and how many reach it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ratioscope.data.batch import REWARD_FUNCTION_PREFIX, TokenBatch
from ratioscope.data.params import AnalysisParams
from ratioscope.functional.vitals import (
    AdvantageVitalSums,
    CoMoments,
    GroupCounts,
    TokenSums,
    advantage_vital_sums,
    at_limit,
    entropy_by_correctness,
    entropy_change_sums,
    equal_reward_groups,
    masked_sums,
    mechanics_pairs,
    row_mean_abs,
)
from ratioscope.functional.vitals_rows import VitalsRows, vitals_rows
from ratioscope.functional.vitals_rows import usable as vitals_rows_usable
from ratioscope.sections.base import Accumulator, listed
from ratioscope.sections.context import Context
from ratioscope.sections.distribution import Distribution, distribution_of
from ratioscope.sections.state import Codec, StateError, mergeable
from ratioscope.sections.summaries import Counter, Histogram, Moments

#: where the length limit came from (``LengthVitals.limit_source``)
LIMIT_SOURCES = ("option", "trainer settings", "padded width", "unknown")
#: inputs whose absence in some files (but not all) earns a warning
_PARTS = ("entropy", "advantages", "rewards")


@dataclass(frozen=True)
class EntropyVitals:
    """Token entropy of the policy's next-token distributions, over valid tokens.

    Attributes:
        tokens: valid tokens with an ``entropy``.
        mean: their token mean (None without ``entropy``); ``distribution`` its spread.
        correct_mean, incorrect_mean: the token mean over the rows that are correct /
            incorrect (None where there is no such row or no ``correct``).
        old_mean: the token mean of ``old_entropy`` (the behaviour policy's).
        change_mean: the token mean of ``entropy - old_entropy``, the change within the
            step (None unless a file has both), over ``change_tokens`` tokens.
    """

    tokens: int
    mean: float | None
    distribution: Distribution | None
    correct_mean: float | None
    incorrect_mean: float | None
    old_mean: float | None
    change_mean: float | None
    change_tokens: int


@dataclass(frozen=True)
class LengthVitals:
    """Response lengths (valid tokens per row) and the share at the length limit.

    Attributes:
        mean: mean length; distribution: its spread (quantiles within 1.16 %).
        limit: the length limit (the largest one where files differ, see ``limits``;
            None where no file had one: source "unknown" alone).
        limit_source: "option", "trainer settings", "padded width" or "unknown"
            (several joined by ", " where files differ).
        limits: every limit a file was measured against, in increasing order.
        at_limit: responses whose length reached their limit; at_limit_share: their
            share of the responses measured against a limit (None: none was).
        note: how the limit was chosen where that is an assumption, or why there is
            none (None otherwise).
    """

    mean: float
    distribution: Distribution
    limit: int | None
    limit_source: str
    limits: list[int]
    at_limit: int | None
    at_limit_share: float | None
    note: str | None


@dataclass(frozen=True)
class RewardFunctionVitals:
    """One reward function's values over the sequences it scored.

    Attributes:
        sequences: sequences with a value (NaN, the function's "no value", left out).
        mean, std: over them (population std, ddof 0; NaN without a sequence).
        minimum, maximum: the smallest and the largest value it gave (None without a
            sequence); a function that climbs to its maximum pays every response alike.
    """

    sequences: int
    mean: float
    std: float
    minimum: float | None = None
    maximum: float | None = None


@dataclass(frozen=True)
class RewardVitals:
    """Sequence rewards (finite ones).

    Attributes:
        sequences: sequences with a finite reward; mean, std: over them (population std).
        per_function: reward function name -> its values, where the input keeps each
            function's values (``reward:NAME`` keys, ``TokenBatch.reward_functions``:
            TRL captures); None otherwise.
    """

    sequences: int
    mean: float
    std: float
    per_function: dict[str, RewardFunctionVitals] | None = None


@dataclass(frozen=True)
class AdvantageVitals:
    """Advantage magnitudes over valid tokens.

    Attributes:
        tokens: valid tokens with an advantage.
        mean_abs: token mean of |A|.
        zero_share: share of those tokens with A == 0 exactly (no gradient from them).
        short_mean_abs, long_mean_abs: mean over sequences no longer / longer than their
            batch's median length of each sequence's token mean |A| (None: no such row).
    """

    tokens: int
    mean_abs: float
    zero_share: float
    short_mean_abs: float | None
    long_mean_abs: float | None


@dataclass(frozen=True)
class EqualRewardGroups:
    """Groups whose rewards are all equal: GRPO gives each of their rollouts A = 0.

    Attributes:
        groups: groups (prompts) counted; equal: those with all rewards equal;
        share: equal / groups.
        solved, failed: equal-reward groups whose rollouts are all correct / all
            incorrect.
        text: the same in plain words.
    """

    groups: int
    equal: int
    share: float
    solved: int
    failed: int
    text: str


@dataclass(frozen=True)
class EntropyMechanics:
    """The entropy change the step's advantages predict (Cui et al. 2025, Theorems 1-2).

    Under natural policy gradient with step size eta, the entropy of a tabular softmax
    policy changes by about ``-eta Cov_{a ~ pi_k}(log pi_k(a|s), A(s, a))`` (Theorem 2);
    under vanilla policy gradient the covariance is with ``pi_k(a|s) A(s, a)``
    (Theorem 1; both Section 3.2 of arXiv 2505.22617v1, first order in eta). Here the
    expectation over actions at one state is replaced by the sampled tokens of the
    batch, centred over each file (one training batch), as Clip-Cov and KL-Cov centre
    it (their Eq. 10).

    Attributes:
        tokens: valid tokens with a log-probability and an advantage.
        log_prob: which log-probability is log pi_k: "old_log_probs" (the behaviour
            policy), else "rollout_log_probs", else "log_probs" (several: joined by ", ").
        covariance: token covariance of log pi_k and A (population, pooled within files).
        pg_covariance: token covariance of log pi_k and pi_k * A.
        predicted_change_per_eta: ``-covariance``, the predicted entropy change for a step
            size of 1 (nats per token): its sign is the prediction; eta is unknown
            (a timeline fits one over the run).
    """

    tokens: int
    log_prob: str
    covariance: float
    pg_covariance: float
    predicted_change_per_eta: float


#: the log-probability taken as log pi_k, in order of preference
MECHANICS_LOG_PROBS = ("old_log_probs", "rollout_log_probs", "log_probs")


@dataclass(frozen=True)
class VitalsSection:
    """The ``vitals`` report section (fields in docs/health.md "Vital signs").

    Attributes:
        sequences, tokens: rows and valid tokens counted.
        entropy: None when no file has ``entropy`` or ``old_entropy``.
        length: always present.
        reward: None without ``rewards``.
        correct_share: share of sequences that are correct (None without ``correct``).
        advantages: None without ``advantages``.
        equal_reward_groups: None without ``rewards`` and ``group``.
        entropy_mechanics: None without ``advantages`` (reports made before it: None).
    """

    sequences: int
    tokens: int
    entropy: EntropyVitals | None
    length: LengthVitals
    reward: RewardVitals | None
    correct_share: float | None
    advantages: AdvantageVitals | None
    equal_reward_groups: EqualRewardGroups | None
    entropy_mechanics: EntropyMechanics | None = None


def length_limit(params: AnalysisParams, batch: TokenBatch) -> tuple[int | None, str]:
    """The length limit of ``batch``'s responses and where it came from.

    The ``max_length`` parameter when set (source ``max_length_source``, default
    ``"option"``; ``"trainer settings"`` where a reader took it from the trainer's
    recorded settings), else the padded width of the
    batch (``"padded width"``): a trainer pads its responses to its generation limit,
    so a response of that width is one the limit cut (an assumption, said in the note).
    None (``"unknown"``) for a layout whose rows hold the prompt too: their width is
    prompt and response, no response limit.
    """
    if params.max_length is not None:
        return params.max_length, params.max_length_source or "option"
    if prompt_in_rows(batch.profile):
        return None, "unknown"
    return batch.max_length, "padded width"


def prompt_in_rows(profile: str) -> bool:
    """Whether the rows of layout ``profile`` hold the prompt before the response."""
    from ratioscope.io.profiles import PROFILES

    known = PROFILES.get(profile)
    return known is not None and known.prompt_in_rows


def plain_equal_groups(counts: GroupCounts) -> str:
    """The equal-reward groups in words.

    >>> print(plain_equal_groups(GroupCounts(groups=16, equal=3, solved=2, failed=1))[:80])
    3 of 16 groups (19 %) gave every response the same reward (2 solved by all, 1 fa
    """
    if counts.equal == 0:
        return f"none of {counts.groups} groups gave every response the same reward"
    share = round(100 * counts.equal / counts.groups)
    parts = []
    if counts.solved:
        parts.append(f"{counts.solved} solved by all")
    if counts.failed:
        parts.append(f"{counts.failed} failed by all")
    detail = f" ({', '.join(parts)})" if parts else ""
    noun = "group" if counts.groups == 1 else "groups"
    return (
        f"{counts.equal} of {counts.groups} {noun} ({share} %) gave every response the same "
        f"reward{detail}: their advantages are 0, so they give no gradient"
    )


def _merge_functions(mine: dict[str, Moments], theirs: dict[str, Moments]) -> dict[str, Moments]:
    merged = {name: Moments(**vars(m)) for name, m in mine.items()}
    for name, moments in theirs.items():
        merged.setdefault(name, Moments()).merge(moments)
    return dict(sorted(merged.items()))


_FUNCTIONS_CODEC = Codec(
    dump=lambda value: {name: m.state() for name, m in value.items()},
    load=lambda block: {name: Moments.from_state(m) for name, m in block.items()},
)


class VitalsAccumulator(Accumulator):
    """Vital signs, one file at a time in a single pass over its chunks."""

    name = "vitals"
    per_file = True
    passes = 1
    pass_inputs = ()
    takes_groups = True

    sequences = mergeable(int, "sum")
    tokens = mergeable(int, "sum")
    #: token entropy (quantiles and exact moments)
    entropy = mergeable(Histogram, "merge")
    entropy_correct = mergeable(TokenSums, "merge")
    entropy_incorrect = mergeable(TokenSums, "merge")
    old_entropy = mergeable(TokenSums, "merge")
    entropy_change = mergeable(TokenSums, "merge")
    lengths = mergeable(Histogram, "merge")
    #: limit -> responses measured against it
    limits = mergeable(Counter, "merge")
    at_limit = mergeable(int, "sum")
    #: files without a limit (source "unknown"): each chunk's longest response -> the
    #: rows that reach it; the entry of the largest key counts every row at the longest
    #: response of them all, whatever the chunks and the order of the merge
    longest = mergeable(Counter, "merge", optional=True)
    limit_sources: list[str] = mergeable(list, "union")
    rewards = mergeable(Moments, "merge")
    reward_functions: dict[str, Moments] = mergeable(dict, _merge_functions, codec=_FUNCTIONS_CODEC)
    correct = mergeable(int, "sum")
    correct_rows = mergeable(int, "sum")
    advantages = mergeable(AdvantageVitalSums, "merge")
    groups = mergeable(GroupCounts, "merge")
    #: input -> files that had it; and "input: file" for files that lacked it
    files_with: dict[str, int] = mergeable(dict, "sum")
    lacking: list[str] = mergeable(list, "extend")
    #: entropy mechanics: tokens, and the co-moments of (log pi_k, A) and (log pi_k, pi A),
    #: each centred within its file, summed over files
    mechanics_tokens = mergeable(int, "sum", optional=True)
    mechanics_comoment = mergeable(float, "sum", optional=True)
    mechanics_pg_comoment = mergeable(float, "sum", optional=True)
    mechanics_log_probs: list[str] = mergeable(list, "union", optional=True)

    def load_state(self, block: dict[str, Any]) -> None:
        """The state block, each field checked by its declaration, then the counts
        against each other: a shard edited by hand (1,000 correct of 128 rows) gave a
        correct share of 7.8 when merged."""
        super().load_state(block)
        bounds = (
            ("correct", self.correct, "correct_rows", self.correct_rows),
            ("correct_rows", self.correct_rows, "sequences", self.sequences),
            ("at_limit", self.at_limit, "sequences", self.sequences),
        )
        for key, value, total_key, total in bounds:
            if value > total:
                raise StateError([key], f"is {value:,}, more than '{total_key}' ({total:,})")

    def begin_file(self, batch: TokenBatch) -> bool:
        if not super().begin_file(batch):
            return False
        for part in _PARTS:
            if batch.has(part):
                self.files_with[part] = self.files_with.get(part, 0) + 1
            else:
                self.lacking.append(f"{part}: {batch.source}")
        for name in batch.reward_functions:
            key = f"{REWARD_FUNCTION_PREFIX}{name}"
            self.files_with[key] = self.files_with.get(key, 0) + 1
        return True

    def begin_passes(self, in_memory: bool) -> None:
        # the file's rows: what the short/long split and the groups need at its end
        self._rows: list[dict[str, Tensor | None]] = []
        self._zero_advantages = 0
        self._npg, self._pg = CoMoments(), CoMoments()

    def update(self, ctx: Context) -> dict[str, Tensor]:
        """A whole file at once (a caller that feeds the section directly; its groups
        are taken as whole)."""
        from ratioscope.sections.group_join import FileSequences, StepGroupJoin

        self.begin_passes(True)
        self.update_pass(0, ctx)
        self.end_pass(0)
        batch = ctx.batch
        join = StepGroupJoin(own_ids=True)
        join.add(
            None, FileSequences(0, batch.source, batch.rewards, batch.correct, batch.group, None)
        )
        for groups in join.finish():
            self.update_groups(groups)
        return {}

    def update_pass(self, index: int, ctx: Context) -> dict[str, Tensor]:
        batch, mask = ctx.batch, ctx.mask
        self.sequences += batch.num_sequences
        limit, source = length_limit(self.params, batch)
        if limit is not None:
            self.limits.add_tensor(torch.tensor([limit]), torch.tensor([batch.num_sequences]))
        if source not in self.limit_sources:
            self.limit_sources.append(source)
        row: dict[str, Tensor | None] = {}
        # the [B]-sized columns are summed on the host, read with the chunk's other numbers
        columns = {"lengths": ctx.lengths, "rewards": batch.rewards, "correct": batch.correct}
        for name, values in batch.reward_functions.items():
            columns[REWARD_FUNCTION_PREFIX + name] = values
        given = {name: values for name, values in columns.items() if values is not None}
        ctx.host.later(
            lambda *read: self._add_rows(limit, row, dict(zip(given, read, strict=True))),
            *given.values(),
        )
        # the log-probs of the entropy mechanics: the behaviour policy's where present
        mechanics = next((n for n in MECHANICS_LOG_PROBS if batch.has(n)), None)
        log_probs = None if mechanics is None else getattr(batch, mechanics)
        tensors = (batch.entropy, batch.old_entropy, batch.advantages, log_probs)
        if vitals_rows_usable(*tensors, mask=mask):
            # entropy, advantages and mechanics in one compiled pass over the rows
            self._add_compiled(vitals_rows(*tensors, mask, batch.correct), row)
        else:
            self._add_entropy(batch, mask)
            if batch.advantages is not None:
                row_abs, row_tokens = row_mean_abs(batch.advantages, mask)
                row["abs"], row["tokens"] = row_abs.cpu(), row_tokens.cpu()
                self._zero_advantages += int(((batch.advantages == 0) & mask).sum())
                if log_probs is not None:
                    x, a, pa = mechanics_pairs(log_probs, batch.advantages, mask)
                    self._npg.add(x, a)
                    self._pg.add(x, pa)
        fed = batch.advantages is not None
        if mechanics is not None and fed and mechanics not in self.mechanics_log_probs:
            self.mechanics_log_probs.append(mechanics)
        if batch.correct is not None:
            self.correct_rows += batch.num_sequences
        self._rows.append(row)
        return {}

    def _add_rows(
        self, limit: int | None, row: dict[str, Tensor | None], columns: dict[str, Tensor]
    ) -> None:
        """Fold a chunk's [B]-sized ``columns`` in, read back: ``lengths``, and where the
        batch has them ``rewards``, ``correct`` and each reward function's values (by
        its column name); ``row`` keeps the lengths for the row table."""
        lengths = columns["lengths"]
        self.tokens += int(lengths.sum())
        self.lengths.add(lengths.double())
        if limit is not None:
            self.at_limit += at_limit(lengths, limit)
        elif lengths.numel():
            top = int(lengths.max())
            self.longest.add_tensor(torch.tensor([top]), (lengths == top).sum().reshape(1))
        row["lengths"] = lengths
        rewards, correct = columns.get("rewards"), columns.get("correct")
        if rewards is not None:
            self.rewards.add(rewards[torch.isfinite(rewards)].double())
        for key, values in columns.items():
            if not key.startswith(REWARD_FUNCTION_PREFIX):
                continue
            # NaN: the function gave this sequence no value (TRL's None), left out as
            # TRL's own rewards/NAME/mean leaves it out
            kept = values[torch.isfinite(values)].double()
            name = key.removeprefix(REWARD_FUNCTION_PREFIX)
            self.reward_functions.setdefault(name, Moments()).add(kept)
        if correct is not None:
            self.correct += int(correct.sum())

    def _add_compiled(self, rows: VitalsRows, row: dict) -> None:
        """What :meth:`_add_entropy`, the advantage sums and the mechanics' co-moments
        add, from one compiled pass (:func:`~ratioscope.functional.vitals_rows.vitals_rows`)."""
        if rows.counts is not None and rows.moments is not None:
            self.entropy.counts += rows.counts
            self.entropy.moments.merge(Moments(*rows.moments))
        if rows.right is not None and rows.wrong is not None:
            self.entropy_correct.merge(rows.right)
            self.entropy_incorrect.merge(rows.wrong)
        if rows.old is not None:
            self.old_entropy.merge(rows.old)
        if rows.change is not None:
            self.entropy_change.merge(rows.change)
        if rows.row_abs is not None:
            row["abs"], row["tokens"] = rows.row_abs, rows.row_tokens
            self._zero_advantages += rows.zero
        if rows.pairs_a is not None and rows.pairs_pa is not None:
            self._npg.merge(rows.pairs_a)
            self._pg.merge(rows.pairs_pa)

    def _add_entropy(self, batch: TokenBatch, mask: Tensor) -> None:
        entropy, old = batch.entropy, batch.old_entropy
        if entropy is not None:
            self.entropy.add(entropy[mask].double())
            if batch.correct is not None:
                right, wrong = entropy_by_correctness(entropy, mask, batch.correct)
                self.entropy_correct.merge(right)
                self.entropy_incorrect.merge(wrong)
        if old is not None:
            self.old_entropy.merge(masked_sums(old, mask))
        if entropy is not None and old is not None:
            self.entropy_change.merge(entropy_change_sums(entropy, old, mask))

    def end_pass(self, index: int) -> None:
        # the file's centred co-moments join the run's sums (one batch, one centring)
        self.mechanics_tokens += self._npg.count
        self.mechanics_comoment += self._npg.comoment
        self.mechanics_pg_comoment += self._pg.comoment
        self._npg, self._pg = CoMoments(), CoMoments()
        rows, self._rows = self._rows, []
        if not rows:
            return
        lengths = torch.cat([r["lengths"] for r in rows if r["lengths"] is not None])
        if all(r.get("abs") is not None for r in rows):
            self.advantages.merge(
                advantage_vital_sums(
                    torch.cat([r["abs"] for r in rows]),  # type: ignore[misc]
                    torch.cat([r["tokens"] for r in rows]),  # type: ignore[misc]
                    self._zero_advantages,
                    lengths,
                )
            )

    def update_groups(self, groups: Any) -> None:
        """The equal-reward groups of one step's whole groups, joined across its files
        (a prompt's samples may sit in several rank files: counted per file, one group
        of 4 split 2 + 2 would count as two)."""
        keep = torch.isfinite(groups.rewards)
        self.groups.merge(
            equal_reward_groups(groups.rewards[keep], groups.group[keep], groups.correct[keep])
        )

    def result(self) -> VitalsSection | None:
        if self.sequences == 0:
            return None
        return VitalsSection(
            sequences=self.sequences,
            tokens=self.tokens,
            entropy=self._entropy(),
            length=self._length(),
            reward=self._reward(),
            correct_share=self.correct / self.correct_rows if self.correct_rows else None,
            advantages=self._advantages(),
            equal_reward_groups=self._groups(),
            entropy_mechanics=self._mechanics(),
        )

    def _mechanics(self) -> EntropyMechanics | None:
        n = self.mechanics_tokens
        if n == 0:
            return None
        covariance = self.mechanics_comoment / n
        return EntropyMechanics(
            tokens=n,
            log_prob=", ".join(self.mechanics_log_probs),
            covariance=covariance,
            pg_covariance=self.mechanics_pg_comoment / n,
            predicted_change_per_eta=0.0 - covariance,
        )

    def _entropy(self) -> EntropyVitals | None:
        tokens = self.entropy.count
        if tokens == 0 and self.old_entropy.count == 0:
            return None
        return EntropyVitals(
            tokens=tokens,
            mean=self.entropy.moments.mean if tokens else None,
            distribution=distribution_of(self.entropy, self.params.quantiles) if tokens else None,
            correct_mean=self.entropy_correct.mean(),
            incorrect_mean=self.entropy_incorrect.mean(),
            old_mean=self.old_entropy.mean(),
            change_mean=self.entropy_change.mean(),
            change_tokens=self.entropy_change.count,
        )

    def _length(self) -> LengthVitals:
        limits = sorted(self.limits.counts)
        measured = sum(self.limits.counts.values())
        notes = []
        if "padded width" in self.limit_sources:
            widths = "/".join(str(n) for n in limits)
            notes.append(
                f"length limit assumed to be the padded width ({widths} tokens); "
                "set it with --max-length if the trainer's limit differs"
            )
        if self.longest.counts:
            notes.append(self._unknown_limit_note(measured))
        return LengthVitals(
            mean=self.lengths.moments.mean,
            distribution=distribution_of(self.lengths, self.params.quantiles),
            limit=limits[-1] if limits else None,
            limit_source=", ".join(self.limit_sources),
            limits=limits,
            at_limit=self.at_limit if measured else None,
            at_limit_share=self.at_limit / measured if measured else None,
            note="; ".join(notes) or None,
        )

    def _unknown_limit_note(self, measured: int) -> str:
        """Why responses were not measured against a limit, with the longest response
        and its count: many responses of one longest length are the mark of a cut."""
        unmeasured = self.sequences - measured
        top = max(self.longest.counts)
        reach = self.longest.counts[top]
        which = "the responses" if not measured else f"{unmeasured:,} responses"
        return (
            f"length limit unknown for {which}: the rows hold the prompt before the "
            f"response, so their padded width is no response limit; the longest response, "
            f"{top:,} tokens, is reached by {reach:,} of {unmeasured:,} "
            f"({100 * reach / unmeasured:.1f} %): if that is the trainer's limit, give "
            f"--max-length {top}"
        )

    def _reward(self) -> RewardVitals | None:
        if self.rewards.count == 0:
            return None
        functions = {
            name: RewardFunctionVitals(
                m.count,
                m.mean if m.count else float("nan"),
                m.std,
                m.minimum if m.count else None,
                m.maximum if m.count else None,
            )
            for name, m in self.reward_functions.items()
        }
        return RewardVitals(
            sequences=self.rewards.count,
            mean=self.rewards.mean,
            std=self.rewards.std,
            per_function=functions or None,
        )

    def _advantages(self) -> AdvantageVitals | None:
        sums = self.advantages
        if sums.tokens == 0:
            return None
        return AdvantageVitals(
            tokens=sums.tokens,
            mean_abs=sums.abs_sum / sums.tokens,
            zero_share=sums.zero / sums.tokens,
            short_mean_abs=sums.short_sum / sums.short_rows if sums.short_rows else None,
            long_mean_abs=sums.long_sum / sums.long_rows if sums.long_rows else None,
        )

    def _groups(self) -> EqualRewardGroups | None:
        counts = self.groups
        if counts.groups == 0:
            return None
        return EqualRewardGroups(
            groups=counts.groups,
            equal=counts.equal,
            share=counts.equal / counts.groups,
            solved=counts.solved,
            failed=counts.failed,
            text=plain_equal_groups(counts),
        )

    def warnings(self) -> list[str]:
        messages = super().warnings()
        for part in _PARTS:
            missing = [
                entry.split(": ", 1)[1] for entry in self.lacking if entry.startswith(f"{part}: ")
            ]
            if self.files_with.get(part) and missing:
                messages.append(f"vitals: {part} computed without {listed(missing)}")
        # every file counts under "entropy", with it or without it
        files = self.files_with.get("entropy", 0) + sum(
            1 for entry in self.lacking if entry.startswith("entropy: ")
        )
        for key, count in self.files_with.items():
            if key.startswith(REWARD_FUNCTION_PREFIX) and count < files:
                messages.append(
                    f"vitals: reward function {key[len(REWARD_FUNCTION_PREFIX) :]} is in "
                    f"{count} of {files} files; its numbers are those files' sequences"
                )
        if self.reward_functions and self.rewards.count == 0:
            messages.append(
                f"vitals: the reward functions ({', '.join(self.reward_functions)}) are not "
                "reported: no file holds the total reward ('rewards') they belong to"
            )
        return messages
