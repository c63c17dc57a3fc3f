"""How often the health verdict catches a known fault, and how often it cries wolf.

Every real step of the bundled sample data (``sample_data/verl_steps/``: 16 steps of one
GRPO run; ``sample_data/verl/``: 4 steps of another, one with logits; the TRL and prime-rl
exports of a step) is loaded, and a copy of it in memory gets one pathology at a time:

=================  ============================================================================
fault              what is done to the copy (valid tokens only)
=================  ============================================================================
noise 0.01/0.05    trainer noise: the current log-probs + N(0, sigma^2), seeded
disagreement       train/inference disagreement: the engine's log-probs + N(0, 1) on 2 % of
                   the tokens
drift x10/x30      policy drift: the current policy's log-ratio to the behaviour policy x F
entropy x0.02      entropy collapse: token entropy (and the old policy's) x 0.02
length limit       every response runs to the length limit: each row is filled to the padded
                   width by repeating its own tokens (a generation that loops)
equal rewards      every group's rewards equal (its first member's), advantages 0
stale              stale behaviour policy: the behaviour log-probs of the previous step of the
                   same run (a buffer not recomputed); the first step of a run has none
overflow           ratio overflow (prime-rl #2972): one token whose engine log-prob is 89 nats
                   below the trainer's, so exp(log-ratio) is inf in float32
=================  ============================================================================

Each copy, and each real step as it is (the healthy control), is analysed and judged by
:func:`ratioscope.judgement.verdict.verdict` with the default thresholds: a step is *flagged* when
any finding is yellow or red (notes do not count). The table gives, per fault and
dump set, the share of steps flagged (a fault a dump cannot carry, e.g. entropy collapse
in a dump without entropy, is ``n/a``) and the findings that fired most. A faulty copy
counts as flagged when one of its findings is worse than in its own healthy step's
verdict (the real step 32 of ``verl/`` already has a yellow line: half its groups have
equal rewards). Each step is judged alone, and, in a run of several steps, against the
healthy report of the run's first step (its second for the first step itself), as
``analyze --baseline`` does. ``trl_capture`` (in no total): the TRL export's on-policy
first mini-batch with the settings a TRL capture of an on-policy run records, for the
verdict's whole-step rule (none of the bundled dumps records settings).

    python benchmarks/verdict_faults.py                # the table of docs/health.md
    python benchmarks/verdict_faults.py --steps 3 --faults noise,drift_x30
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from ratioscope.data.batch import TokenBatch
    from ratioscope.judgement.verdict import Verdict
    from ratioscope.report.model import Report

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data"

#: ratio overflow: exp(89) > float32 max (3.4e38 = exp(88.72)); the issue's own example
OVERFLOW_LOG_RATIO = 89.0
DISAGREEMENT_SHARE = 0.02
ENTROPY_FACTOR = 0.02


@dataclass(frozen=True)
class Run:
    """The steps of one run in one layout, in step order.

    ``rows``: only the first rows of each step; ``settings``: the trainer settings a
    capture would have recorded with it (TRL's names), attached to every report of the
    run as ``analyze`` attaches those it reads from a part file; ``headline``: whether
    the run's steps count in the table's "all steps" columns.
    """

    name: str
    paths: tuple[Path, ...]
    group_size: int | None = None  # TRL: consecutive rows form the groups
    rows: int | None = None
    settings: dict[str, Any] | None = None
    headline: bool = True


#: TRL settings under which every optimizer step trains on completions of the policy
#: before it (gradient_accumulation_steps a multiple of steps_per_generation x
#: num_iterations, TRL's own condition for old_per_token_logps = None)
TRL_ON_POLICY = {"num_iterations": 1, "steps_per_generation": 1, "gradient_accumulation_steps": 1}


def runs(sample: Path = SAMPLE) -> tuple[Run, ...]:
    """The bundled runs: two verl runs, the TRL and the prime-rl export of a step; then,
    apart from the headline, the TRL export's on-policy mini-batch as a TRL capture of
    an on-policy run would record it (its first 32 rows, mini-batch 0 of the step, whose
    log-ratio is exactly 0, with :data:`TRL_ON_POLICY` as the recorded settings)."""
    trl = sample / "trl" / "step_0032.pt"
    return (
        Run("verl_steps", tuple(sorted((sample / "verl_steps").glob("*.pt")))),
        Run("verl", tuple(sorted((sample / "verl").glob("*.pt")))),
        Run("trl", (trl,)),
        Run("prime_rl", tuple(sorted((sample / "prime_rl" / "token_exports").glob("step_*")))),
        Run("trl_capture", (trl,), rows=32, settings=TRL_ON_POLICY, headline=False),
    )


def load_step(path: Path, run: Run) -> TokenBatch:
    """One step of a run as a validated batch (a directory: its files concatenated)."""
    from ratioscope.io.loaders import LoadOptions, expand_paths, load_file

    files = expand_paths([path]) if path.is_dir() else [path]
    batches = [load_file(f, LoadOptions(group_size=run.group_size)) for f in files]
    from ratioscope.data.batch import TokenBatch

    batch = batches[0] if len(batches) == 1 else TokenBatch.concat(batches)
    return batch if run.rows is None else batch.select_rows(0, run.rows)


def analyse(batch: TokenBatch, run: Run) -> Report:
    """The report of ``batch``, with the run's recorded trainer settings in its
    ``params.trainer`` block (where ``analyze`` puts those a part file holds)."""
    from ratioscope.analysis.pipeline import analyze
    from ratioscope.data.trainer_settings import RECORDED, Applied, TrainerSettings

    report = analyze(batch, device="cpu")
    if run.settings is not None:
        settings = TrainerSettings("trl", dict(run.settings), source=f"{RECORDED} ({run.name})")
        report.params["trainer"] = Applied(settings).params_block()
    return report


# ------------------------------------------------------------------------------ faults

_COPIED = (
    "mask", "log_probs", "old_log_probs", "ref_log_probs", "rollout_log_probs", "advantages",
    "entropy", "old_entropy", "token_ids", "rewards", "correct", "group", "minibatch",
    "logits", "ref_logits",
)  # fmt: skip


def rebuild(batch: TokenBatch, **changes: Any) -> TokenBatch:
    """A validated copy of ``batch`` with some canonical tensors replaced; the log-ratio
    is derived again from the log-probs (``None`` drops a tensor)."""
    from ratioscope.data.batch import TokenBatch

    tensors = {name: getattr(batch, name) for name in _COPIED}
    tensors.update(changes)
    return TokenBatch.from_tensors(
        {k: v for k, v in tensors.items() if v is not None}, source=f"{batch.source} (faulty)"
    )


def _policy_keys(batch: TokenBatch) -> tuple[str, str] | None:
    """(numerator, denominator) of the policy ratio: the behaviour policy is the old one,
    or the engine where the dump has no old policy (prime-rl)."""
    return {
        "current/old": ("log_probs", "old_log_probs"),
        "current/engine": ("log_probs", "rollout_log_probs"),
    }.get(batch.ratio_pair)


def _generator(seed: int) -> torch.Generator:
    import torch

    return torch.Generator().manual_seed(seed)


def trainer_noise(sigma: float) -> Fault:
    def apply(batch: TokenBatch, context: Context) -> TokenBatch | None:
        import torch

        if batch.log_probs is None:
            return None
        values = batch.log_probs
        noise = sigma * torch.randn(values.shape, generator=_generator(context.seed))
        return rebuild(batch, log_probs=values + noise.to(values.dtype) * batch.mask)

    return apply


def disagreement(batch: TokenBatch, context: Context) -> TokenBatch | None:
    import torch

    if batch.rollout_log_probs is None:
        return None
    generator = _generator(context.seed)
    engine = batch.rollout_log_probs
    chosen = (torch.rand(engine.shape, generator=generator) < DISAGREEMENT_SHARE) & batch.mask
    shift = torch.randn(engine.shape, generator=generator).to(engine.dtype)
    return rebuild(batch, rollout_log_probs=engine + shift * chosen)


def policy_drift(factor: float) -> Fault:
    def apply(batch: TokenBatch, context: Context) -> TokenBatch | None:
        keys = _policy_keys(batch)
        if keys is None:
            return None
        current, behaviour = getattr(batch, keys[0]), getattr(batch, keys[1])
        if not bool(((current != behaviour) & batch.mask).any()):
            return None  # an exactly on-policy batch: no drift to multiply
        return rebuild(batch, log_probs=behaviour + factor * (current - behaviour))

    return apply


def entropy_collapse(batch: TokenBatch, context: Context) -> TokenBatch | None:
    if batch.entropy is None:
        return None
    old = None if batch.old_entropy is None else batch.old_entropy * ENTROPY_FACTOR
    return rebuild(batch, entropy=batch.entropy * ENTROPY_FACTOR, old_entropy=old)


def _fill_rows(values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """[B, T(, V)] -> the same with each row's first ``lengths[b]`` entries repeated over
    the whole width (a row of length 3: a b c a b c ...)."""
    import torch

    width = values.shape[1]
    position = torch.arange(width).unsqueeze(0)
    source = position % lengths.clamp(min=1).unsqueeze(1)  # [B, T]
    if values.dim() == 3:
        return torch.gather(values, 1, source.unsqueeze(-1).expand_as(values))
    return torch.gather(values, 1, source)


def length_limit(batch: TokenBatch, context: Context) -> TokenBatch | None:
    import torch

    lengths = batch.lengths
    changes: dict[str, Any] = {"mask": torch.ones_like(batch.mask)}
    for name in (
        "log_probs", "old_log_probs", "ref_log_probs", "rollout_log_probs", "advantages",
        "entropy", "old_entropy", "token_ids", "logits", "ref_logits",
    ):  # fmt: skip
        value = getattr(batch, name)
        if value is not None:
            changes[name] = _fill_rows(value, lengths)
    return rebuild(batch, **changes)


def equal_rewards(batch: TokenBatch, context: Context) -> TokenBatch | None:
    import torch

    if batch.group is None or batch.rewards is None:
        return None
    first = torch.full((int(batch.group.max()) + 1,), -1, dtype=torch.int64)
    for row in range(batch.num_sequences - 1, -1, -1):  # the first row of each group wins
        first[batch.group[row]] = row
    rewards = batch.rewards[first[batch.group]]
    correct = None if batch.correct is None else batch.correct[first[batch.group]]
    advantages = None if batch.advantages is None else torch.zeros_like(batch.advantages)
    return rebuild(batch, rewards=rewards, correct=correct, advantages=advantages)


def stale_behaviour(batch: TokenBatch, context: Context) -> TokenBatch | None:
    import torch

    keys = _policy_keys(batch)
    if keys is None or context.previous is None:
        return None
    earlier = getattr(context.previous, keys[1])
    if earlier is None:
        return None
    shape = getattr(batch, keys[1]).shape
    stale = torch.zeros(shape, dtype=earlier.dtype)
    rows, width = min(shape[0], earlier.shape[0]), min(shape[1], earlier.shape[1])
    stale[:rows, :width] = earlier[:rows, :width]
    return rebuild(batch, **{keys[1]: stale})


def ratio_overflow(batch: TokenBatch, context: Context) -> TokenBatch | None:
    """One token, the middle valid one of the first row: engine = trainer - 89."""
    if batch.rollout_log_probs is None:
        return None
    trainer = batch.old_log_probs if batch.old_log_probs is not None else batch.log_probs
    if trainer is None:
        return None
    engine = batch.rollout_log_probs.clone()
    column = int(batch.lengths[0]) // 2
    engine[0, column] = trainer[0, column] - OVERFLOW_LOG_RATIO
    return rebuild(batch, rollout_log_probs=engine)


@dataclass
class Context:
    """What a fault may use besides the batch: a seed, the run's previous step."""

    seed: int
    previous: TokenBatch | None = None


Fault = Callable[["TokenBatch", Context], "TokenBatch | None"]

FAULTS: dict[str, Fault] = {
    "noise_0.01": trainer_noise(0.01),
    "noise_0.05": trainer_noise(0.05),
    "disagreement": disagreement,
    "drift_x10": policy_drift(10.0),
    "drift_x30": policy_drift(30.0),
    "entropy_x0.02": entropy_collapse,
    "length_limit": length_limit,
    "equal_rewards": equal_rewards,
    "stale": stale_behaviour,
    "overflow": ratio_overflow,
}


# ------------------------------------------------------------------------------ judging


@dataclass
class Cell:
    """The steps of one dump set under one fault: how many were flagged, and by what."""

    steps: int = 0
    flagged: int = 0
    by: Counter[str] = field(default_factory=Counter)

    def rate(self) -> float | None:
        return None if self.steps == 0 else self.flagged / self.steps


def judge(report: Report, baseline: Report | None) -> Verdict:
    from ratioscope.judgement.verdict import verdict

    return verdict(report, baseline=baseline)


def levels(result: Verdict) -> dict[str, int]:
    """Finding key -> level index (0 green, 1 yellow, 2 red); the worst where a key
    repeats."""
    from ratioscope.judgement.verdict import LEVELS

    found: dict[str, int] = {}
    for finding in result.findings:
        found[finding.key] = max(found.get(finding.key, 0), LEVELS.index(finding.level))
    return found


def flagged_by(result: Verdict, healthy: Verdict | None = None) -> list[str]:
    """The keys of the non-green findings of ``result``; with ``healthy``, only those
    worse than in the healthy step's verdict (a fault is caught by what it changes, not
    by what the real step already had)."""
    before = {} if healthy is None else levels(healthy)
    return [key for key, level in levels(result).items() if level > before.get(key, 0)]


#: how a step is judged: alone, or against the healthy report of another step of its run
MODES = ("alone", "baseline")


def evaluate(
    selected: Sequence[Run], faults: Sequence[str], steps: int | None = None
) -> dict[str, dict[str, dict[str, Cell]]]:
    """mode -> fault (and ``healthy``) -> run name -> its cell.

    Each step (the first ``steps`` of each run) and each faulty copy of it is analysed
    once and judged twice: alone, and, in a run of several steps, against the healthy
    report of the run's first step (its second for the first step itself). A faulty copy
    is flagged when a finding is worse than in the healthy step's own verdict.
    """
    table = {mode: {name: {} for name in ("healthy", *faults)} for mode in MODES}
    for run in selected:
        paths = run.paths[:steps] if steps else run.paths
        batches = [load_step(path, run) for path in paths]
        healthy = [analyse(batch, run) for batch in batches]
        for index, (batch, report) in enumerate(zip(batches, healthy, strict=True)):
            baselines: dict[str, Report | None] = {"alone": None}
            if len(healthy) > 1:
                baselines["baseline"] = healthy[1 if index == 0 else 0]
            controls = {mode: judge(report, base) for mode, base in baselines.items()}
            for mode, control in controls.items():
                _count(table[mode]["healthy"].setdefault(run.name, Cell()), flagged_by(control))
            context = Context(seed=index, previous=batches[index - 1] if index else None)
            for name in faults:
                faulty = FAULTS[name](batch, context)
                result = None if faulty is None else analyse(faulty, run)
                for mode, base in baselines.items():
                    cell = table[mode][name].setdefault(run.name, Cell())
                    if result is not None:
                        _count(cell, flagged_by(judge(result, base), controls[mode]))
    return table


def _count(cell: Cell, keys: list[str]) -> None:
    cell.steps += 1
    if keys:
        cell.flagged += 1
        cell.by.update(set(keys))


def _total(cells: dict[str, Cell], names: Sequence[str]) -> Cell:
    total = Cell()
    for name in names:
        cell = cells.get(name, Cell())
        total.steps += cell.steps
        total.flagged += cell.flagged
        total.by.update(cell.by)
    return total


def _share(cell: Cell) -> str:
    rate = cell.rate()
    return "n/a" if rate is None else f"{100 * rate:.0f} %"


def render(
    table: dict[str, dict[str, dict[str, Cell]]],
    run_names: Sequence[str],
    apart: Sequence[str] = (),
) -> str:
    """A Markdown table: one row per fault; the steps flagged per run judged alone, in
    all, and judged against a baseline (runs of several steps); the findings that fired
    most often. The runs in ``apart`` get their own columns after "all steps" and count
    in no total."""
    headline = [n for n in run_names if n not in apart]
    extra = [n for n in run_names if n in apart]
    several = [n for n in headline if table["baseline"]["healthy"].get(n, Cell()).steps]
    header = [
        "fault", *headline, "all steps", *extra,
        *(f"{n} (baseline)" for n in several), "all (baseline)", "flagged by (most often)",
    ]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for fault in table["alone"]:
        row = [fault]
        for mode, names, others in (("alone", headline, extra), ("baseline", several, [])):
            cells = table[mode][fault]
            row += [_fraction(cells.get(name, Cell())) for name in names]
            row.append(_share(_total(cells, names)))
            row += [_fraction(cells.get(name, Cell())) for name in others]
        found = _total(table["alone"][fault], headline).by
        found.update(_total(table["baseline"][fault], several).by)
        # ties by name: the table reads the same on every run
        top = sorted(found.items(), key=lambda item: (-item[1], item[0]))[:2]
        row.append(", ".join(f"`{key}`" for key, _ in top) or "—")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _fraction(cell: Cell) -> str:
    return "n/a" if cell.rate() is None else f"{cell.flagged}/{cell.steps}"


def main(argv: Sequence[str] | None = None) -> int:
    import time

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", default=",".join(FAULTS), help="comma-separated")
    parser.add_argument("--steps", type=int, default=None, help="the first N steps a run")
    parser.add_argument("--runs", default=None, help="comma-separated run names")
    args = parser.parse_args(argv)
    faults = [f for f in args.faults.split(",") if f]
    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        parser.error(f"unknown fault(s) {', '.join(unknown)}; known: {', '.join(FAULTS)}")
    selected = [r for r in runs() if args.runs is None or r.name in args.runs.split(",")]
    start = time.perf_counter()
    table = evaluate(selected, faults, args.steps)
    apart = [r.name for r in selected if not r.headline]
    print(render(table, [r.name for r in selected], apart))
    print(f"\n{time.perf_counter() - start:.0f} s (analysis on the CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
