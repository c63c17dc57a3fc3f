"""CI regression rules: hold a report's numbers against bounds and against a baseline.

A rules file (TOML) is a list of ``[[rule]]`` tables. Each rule names a dotted path into
a report's JSON document (an analyze :class:`~ratioscope.report.model.Report`, turned into
its document with ``to_dict()``, or an eval report's document; keys that contain dots
themselves, such as the quantile ``"0.99"``, are matched when the plain split finds
nothing) and one or more bounds:

- absolute: ``min`` and/or ``max``;
- against a baseline report: ``max_increase`` / ``max_decrease`` (absolute change) and
  ``max_increase_pct`` / ``max_decrease_pct`` (change in percent of ``|baseline|``).

Every bound is turned into a concrete threshold on the value, so a rule holds when the
value is on the right side of every threshold (inclusive, with a relative slack of 1e-9
for floating-point rounding). Outcomes:

- ``pass``: every bound holds;
- ``fail``: at least one bound is violated;
- ``error``: the value is null (or NaN/infinite), i.e. the metric could not be computed
  in this run. A gate cannot vouch for a number it does not have, so this fails the
  gate like a violated bound (exit 1), but is reported separately (a JUnit ``<error>``).

Problems with the rules or the reports themselves are raised as exceptions (exit 2)
before any verdict: a malformed rules file, a relative bound without a baseline, a path
that does not exist in the report (or, for a rule with a relative bound, in the
baseline), a path that points at an object, a list or a string rather than a number,
and a baseline value that is null where a relative bound needs it.

A percent bound against a baseline of 0 allows no change in its direction: the
threshold is ``0 +/- |0| * pct / 100 = 0``, so ``max_increase_pct`` fails on any value
above 0 and ``max_decrease_pct`` on any value below 0 (an infinite relative change).
Use ``max_increase`` / ``max_decrease`` where a baseline can be 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, cast, runtime_checkable

from ratioscope.errors import ReportError, RulesError
from ratioscope.io.documents import document_kind, lookup
from ratioscope.judgement.tomlfile import number, parse_toml, read_text, suggest, toml_module


@runtime_checkable
class HasDocument(Protocol):
    """A typed report that gives its JSON document (:class:`~ratioscope.report.model.
    Report`); the rules address the document."""

    def to_dict(self) -> dict[str, Any]: ...


#: what ``check`` reads: an analyze report, or the JSON document of any report (eval)
Checked = HasDocument | Mapping[str, Any]

ABSOLUTE_BOUNDS = ("min", "max")
RELATIVE_BOUNDS = ("max_increase", "max_decrease", "max_increase_pct", "max_decrease_pct")
BOUND_KEYS = ABSOLUTE_BOUNDS + RELATIVE_BOUNDS
#: bounds of timeline series only: a least-squares slope per step, and change flags
TREND_BOUNDS = ("slope_max", "slope_min", "no_flag_after")
_UPPER_BOUNDS = frozenset({"max", "max_increase", "max_increase_pct", "slope_max", "no_flag_after"})
#: what a timeline rule says besides its bounds: the series, the window, the aggregate
SERIES_KEYS = ("series", "last", "aggregate")
AGGREGATES = ("mean", "max", "min", "last")
RULE_KEYS = ("path", "name", "description", *BOUND_KEYS, *SERIES_KEYS, *TREND_BOUNDS)
#: what a rules file may hold: rules, and the verdict's thresholds (judgement.verdict)
TOP_LEVEL_KEYS = ("rule", "thresholds")

# Values exactly on a threshold hold even when computing the threshold rounds the wrong way
# (0.3 + 10% of 0.3 is 0.32999999999999996 in binary floating point).
_REL_SLACK = 1e-9

Verdict = Literal["pass", "fail", "error"]


@dataclass(frozen=True)
class Rule:
    """One ``[[rule]]`` table: a report path and the bounds its value must respect.

    ``index`` is the 1-based position of the rule in its file, ``source`` that file;
    both only serve error messages and output labels.
    """

    path: str
    min: float | None = None
    max: float | None = None
    max_increase: float | None = None
    max_decrease: float | None = None
    max_increase_pct: float | None = None
    max_decrease_pct: float | None = None
    name: str | None = None
    description: str | None = None
    index: int = 1
    source: str | None = None
    #: "report": ``path`` is a dotted key of a report; "timeline": a series of a timeline
    target: Literal["report", "timeline"] = "report"
    last: int | None = None
    aggregate: str = "last"
    slope_max: float | None = None
    slope_min: float | None = None
    no_flag_after: int | None = None

    @property
    def label(self) -> str:
        """The name shown in tables and JUnit: ``name`` when given, else the path (for a
        series, what is measured of it: ``mean of the last 8 steps``)."""
        if self.name or self.target == "report":
            return self.name or self.path
        window = "all steps" if self.last is None else f"the last {self.last} steps"
        if self.measure == "slope":
            return f"{self.path}: slope over {window}"
        if self.measure == "flags":
            return f"{self.path}: change flags after step {self.no_flag_after}"
        return f"{self.path}: {self.aggregate} of {window}"

    @property
    def measure(self) -> Literal["value", "aggregate", "slope", "flags"]:
        """What the bounds hold: a report value, a series aggregate, its slope, its flags."""
        if self.target == "report":
            return "value"
        if self.slope_max is not None or self.slope_min is not None:
            return "slope"
        return "flags" if self.no_flag_after is not None else "aggregate"

    @property
    def needs_baseline(self) -> bool:
        return any(getattr(self, key) is not None for key in RELATIVE_BOUNDS)

    def where(self) -> str:
        """``rule 3 (path 'a.b')`` or ``rule 3 (series 'a.b')``, for error messages."""
        kind = "series" if self.target == "timeline" else "path"
        return f"rule {self.index} ({kind} '{self.path}')"


@dataclass(frozen=True)
class RuleSet:
    """The rules of one file, in file order."""

    source: str
    rules: tuple[Rule, ...]

    @property
    def needs_baseline(self) -> bool:
        return any(rule.needs_baseline for rule in self.rules)


@dataclass(frozen=True)
class BoundCheck:
    """One bound of a rule, resolved to a threshold on the value.

    ``limit`` is the number written in the rules file; ``threshold`` the value it allows
    (for relative bounds, computed from the baseline); ``direction`` is ``"<="`` (the
    value must not exceed ``threshold``) or ``">="``. ``holds`` is None when the bound
    could not be checked because the value is null or infinite.
    """

    kind: str
    limit: float
    direction: Literal["<=", ">="]
    threshold: float
    holds: bool | None
    description: str


@dataclass(frozen=True)
class RuleOutcome:
    """What one rule found: the value, the baseline value, each bound and the verdict."""

    rule: Rule
    value: float | None
    baseline: float | None
    bounds: tuple[BoundCheck, ...]
    verdict: Verdict
    reason: str

    @property
    def bound_description(self) -> str:
        return "; ".join(bound.description for bound in self.bounds)

    @property
    def change(self) -> float | None:
        """value - baseline when both are numbers."""
        if self.value is None or self.baseline is None:
            return None
        return self.value - self.baseline

    @property
    def change_pct(self) -> float | None:
        """The change in percent of ``|baseline|``; None when either is missing or base is 0."""
        change = self.change
        if change is None or self.baseline == 0:
            return None
        return 100.0 * change / abs(self.baseline)  # type: ignore[arg-type]


@dataclass(frozen=True)
class CheckResult:
    """Every rule's outcome, and which files they came from (as the user named them)."""

    outcomes: tuple[RuleOutcome, ...]
    report: str | None = None
    baseline: str | None = None
    rules: str | None = None

    def count(self, verdict: Verdict) -> int:
        return sum(1 for outcome in self.outcomes if outcome.verdict == verdict)

    @property
    def passed(self) -> bool:
        """True when every rule holds (no failure and no error)."""
        return all(outcome.verdict == "pass" for outcome in self.outcomes)

    def summary_line(self) -> str:
        """``FAIL: 2 of 7 rules did not hold (1 failed, 1 error)`` or ``PASS: ...``."""
        total, failed, errors = len(self.outcomes), self.count("fail"), self.count("error")
        if self.passed:
            return "PASS: the rule holds" if total == 1 else f"PASS: all {total} rules hold"
        return (
            f"FAIL: {failed + errors} of {total} rules did not hold "
            f"({failed} failed, {errors} could not be evaluated)"
        )


# --------------------------------------------------------------------------- parsing


# the TOML helpers live in tomlfile, shared with the verdict's [thresholds] table
_toml_module = toml_module
_suggest = suggest
_number = number


def _parse_rule(table: Any, index: int, source: str) -> Rule:
    if not isinstance(table, Mapping):
        raise RulesError(source, f"rule {index} is not a table; write each rule as [[rule]]")
    raw_path, raw_series = table.get("path"), table.get("series")
    named = raw_series if raw_path is None else raw_path
    kind = "path" if raw_path is not None or raw_series is None else "series"
    where = f"rule {index}" + (f" ({kind} '{named}')" if isinstance(named, str) else "")
    for key in table:
        if key not in RULE_KEYS:
            raise RulesError(
                source,
                f"{where}: unknown key '{key}'{_suggest(key, RULE_KEYS)}; "
                f"allowed keys are {', '.join(RULE_KEYS)}",
            )
    if raw_path is not None and raw_series is not None:
        raise RulesError(
            source,
            f"{where}: has both 'path' (a key of a report) and 'series' (a series of a "
            "timeline); a rule addresses one of them",
        )
    if not isinstance(named, str) or not named.strip():
        raise RulesError(
            source,
            f"{where}: 'path' is required and must be a non-empty string (a report key; "
            "or 'series', a series of a timeline)",
        )
    if any(part == "" for part in named.split(".")):
        raise RulesError(source, f"{where}: '{kind}' has an empty part (two dots or an end dot)")
    timeline = kind == "series"
    if not timeline:
        for key in (*SERIES_KEYS[1:], *TREND_BOUNDS):
            if key in table:
                raise RulesError(
                    source,
                    f"{where}: '{key}' applies to a timeline series; write series = "
                    f"'{named}' to check it over the steps of a timeline",
                )
    all_bounds = BOUND_KEYS + TREND_BOUNDS
    bounds: dict[str, Any] = {
        key: _number(table[key], where, key, source) for key in all_bounds if key in table
    }
    if not bounds:
        allowed = all_bounds if timeline else BOUND_KEYS
        raise RulesError(source, f"{where}: no bound; give at least one of {', '.join(allowed)}")
    for key in RELATIVE_BOUNDS:
        if bounds.get(key, 0.0) < 0:
            raise RulesError(
                source,
                f"{where}: '{key}' must be >= 0 (it is the largest change allowed), "
                f"got {bounds[key]:g}",
            )
    for low, high in (("min", "max"), ("slope_min", "slope_max")):
        if low in bounds and high in bounds and bounds[low] > bounds[high]:
            raise RulesError(
                source,
                f"{where}: '{low}' ({bounds[low]:g}) is larger than '{high}' ({bounds[high]:g})",
            )
    series = _parse_series(table, bounds, where, source) if timeline else {}
    texts: dict[str, str | None] = {}
    for key in ("name", "description"):
        if key in table and not isinstance(table[key], str):
            raise RulesError(source, f"{where}: '{key}' must be a string")
        texts[key] = table.get(key)
    return Rule(
        path=named.strip(),
        index=index,
        source=source,
        name=texts["name"],
        description=texts["description"],
        **bounds,
        **series,
    )


def _parse_series(
    table: Mapping[str, Any], bounds: dict[str, Any], where: str, source: str
) -> dict[str, Any]:
    """The timeline part of a rule: one measure (aggregate, slope or flags), its window."""
    measures = [
        name
        for name, keys in (
            ("bounds on an aggregate", BOUND_KEYS),
            ("a slope bound", ("slope_max", "slope_min")),
            ("no_flag_after", ("no_flag_after",)),
        )
        if any(key in bounds for key in keys)
    ]
    if len(measures) > 1:
        raise RulesError(
            source,
            f"{where}: mixes {' and '.join(measures)}; each measures something else of the "
            "series, so write one rule for each",
        )
    series: dict[str, Any] = {"target": "timeline"}
    if "last" in table:
        last = table["last"]
        if isinstance(last, bool) or not isinstance(last, int) or last < 1:
            raise RulesError(
                source, f"{where}: 'last' must be a whole number of steps >= 1, got {last!r}"
            )
        if last < 2 and measures == ["a slope bound"]:
            raise RulesError(source, f"{where}: a slope needs 'last' >= 2 steps, got {last}")
        series["last"] = last
    if "aggregate" in table:
        aggregate = table["aggregate"]
        if aggregate not in AGGREGATES:
            raise RulesError(
                source,
                f"{where}: 'aggregate' must be one of {', '.join(AGGREGATES)}, got {aggregate!r}",
            )
        if measures != ["bounds on an aggregate"]:
            raise RulesError(source, f"{where}: 'aggregate' only applies to min/max bounds")
        series["aggregate"] = aggregate
    if "no_flag_after" in bounds:
        step = table["no_flag_after"]
        if isinstance(step, bool) or not isinstance(step, int):
            raise RulesError(
                source, f"{where}: 'no_flag_after' must be a step number, got {step!r}"
            )
        if "last" in table:
            raise RulesError(source, f"{where}: 'last' does not apply to no_flag_after")
        bounds["no_flag_after"] = step
    return series


def parse_rules(text: str, source: str | Path = "<rules>") -> RuleSet:
    """Parse the text of a rules TOML file into a :class:`RuleSet`.

    >>> rules = parse_rules('[[rule]]\\npath = "a.b"\\nmax = 0.5\\n')
    >>> rules.rules[0].path, rules.rules[0].max
    ('a.b', 0.5)
    """
    source = str(source)
    document = parse_toml(text, source)
    for key in document:
        if key not in TOP_LEVEL_KEYS:
            raise RulesError(
                source,
                f"unknown top-level key '{key}'{_suggest(key, TOP_LEVEL_KEYS)}; "
                "rules are written as [[rule]] tables (and verdict thresholds as [thresholds])",
            )
    if "thresholds" in document:
        from ratioscope.judgement.verdict import thresholds_from_table

        thresholds_from_table(document["thresholds"], source)  # validated, used by analyze
    tables = document.get("rule")
    if tables is None:
        raise RulesError(source, "no rules; write each rule as a [[rule]] table")
    if not isinstance(tables, list):
        raise RulesError(source, "'rule' must be an array of tables; write [[rule]], not [rule]")
    if not tables:
        raise RulesError(source, "no rules; write each rule as a [[rule]] table")
    return RuleSet(source, tuple(_parse_rule(t, i, source) for i, t in enumerate(tables, start=1)))


def load_rules(path: str | Path) -> RuleSet:
    """Read and validate a rules TOML file."""
    return parse_rules(read_text(path), path)


# ------------------------------------------------------------------------ evaluation


class _Null:
    """Marks a path that ends (or passes through) a null: the metric was not computed."""

    def __init__(self, where: str) -> None:
        self.where = where


def _describe_node(node: Any) -> str:
    if isinstance(node, Mapping):
        keys = ", ".join(str(k) for k in list(node)[:20])
        more = f", ... ({len(node)} in all)" if len(node) > 20 else ""
        return f"an object with keys {keys or '(none)'}{more}"
    if isinstance(node, list):
        return f"a list of {len(node)} item(s)"
    if isinstance(node, str):
        return f"a string {node!r}"
    return f"a {type(node).__name__} ({node!r})"


def _resolve(document: Mapping[str, Any], rule: Rule, file: str, rules: str) -> Any:
    """The value at ``rule.path``, or a :class:`_Null`; a path that does not exist raises."""
    try:
        return lookup(document, rule.path)
    except KeyError as error:
        missing = str(error.args[0])
    parent_path = missing.rpartition(".")[0]
    parent = lookup(document, parent_path) if parent_path else document
    if parent is None:
        return _Null(parent_path)
    shown = f"'{parent_path}' is" if parent_path else "the top level is"
    raise ReportError(
        file,
        f"{rule.where()} of {rules}: no '{missing}' in the report ({shown} "
        f"{_describe_node(parent)})",
    )


def _as_number(value: Any, rule: Rule, file: str, rules: str) -> float | _Null:
    if isinstance(value, _Null):
        return value
    if value is None:
        return _Null(rule.path)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RulesError(
            rules,
            f"{rule.where()}: the value in {file} is {_describe_node(value)}, not a number; "
            "point the path at a number (list items by index, e.g. 'mean.0')",
        )
    value = float(value)
    return _Null(rule.path) if math.isnan(value) else value


def _bound_checks(rule: Rule, value: float | None, baseline: float | None) -> list[BoundCheck]:
    checks = []
    for kind in BOUND_KEYS + TREND_BOUNDS:
        limit = getattr(rule, kind)
        if limit is None:
            continue
        if kind in ("min", "max"):
            threshold, text = limit, f"{limit:.6g}"
        elif kind in ("slope_max", "slope_min"):
            threshold, text = limit, f"{limit:.6g} per step (slope)"
        elif kind == "no_flag_after":
            # the value is the number of flagged steps after the given one
            threshold, text = 0.0, f"0 flags after step {limit}"
        else:
            assert baseline is not None  # enforced before evaluation
            step = abs(baseline) * limit / 100.0 if kind.endswith("_pct") else limit
            shown = f"{limit:.6g}%" if kind.endswith("_pct") else f"{limit:.6g}"
            sign = "+" if "increase" in kind else "-"
            threshold = baseline + step if sign == "+" else baseline - step
            text = f"baseline {sign} {shown} = {threshold:.6g}"
        direction: Literal["<=", ">="] = "<=" if kind in _UPPER_BOUNDS else ">="
        holds = None if value is None else _holds(value, direction, threshold)
        checks.append(BoundCheck(kind, limit, direction, threshold, holds, f"{direction} {text}"))
    return checks


def _holds(value: float, direction: str, threshold: float) -> bool:
    inside = value <= threshold if direction == "<=" else value >= threshold
    return inside or math.isclose(value, threshold, rel_tol=_REL_SLACK, abs_tol=0.0)


def _outcome(
    rule: Rule, value: float | _Null, baseline: float | None, detail: str | None = None
) -> RuleOutcome:
    if isinstance(value, _Null):
        bounds = _bound_checks(rule, None, baseline)
        where = "" if value.where == rule.path else f" ('{value.where}' is null)"
        reason = detail or (
            f"the value is null{where}: the metric could not be computed for this run "
            "(see the report's warnings)"
        )
        return RuleOutcome(rule, None, baseline, tuple(bounds), "error", reason)
    if math.isinf(value):
        bounds = _bound_checks(rule, None, baseline)
        return RuleOutcome(rule, value, baseline, tuple(bounds), "error", "the value is infinite")
    bounds = _bound_checks(rule, value, baseline)
    broken = [b for b in bounds if not b.holds]
    if not broken:
        return RuleOutcome(rule, value, baseline, tuple(bounds), "pass", "")
    reason = detail or "; ".join(
        f"{value:.6g} is {'above' if b.direction == '<=' else 'below'} {b.threshold:.6g} "
        f"({b.kind} = {b.limit:.6g})"
        for b in broken
    )
    return RuleOutcome(rule, value, baseline, tuple(bounds), "fail", reason)


def _baseline_value(baseline: Mapping[str, Any], rule: Rule, file: str, rules: str) -> float | None:
    if not rule.needs_baseline:
        # Shown for context only: a baseline that predates a metric must not break
        # absolute rules on it.
        try:
            value = lookup(baseline, rule.path)
        except KeyError:
            return None
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return float(value) if ok and math.isfinite(value) else None
    value = _as_number(_resolve(baseline, rule, file, rules), rule, file, rules)
    if isinstance(value, _Null) or math.isinf(value):
        raise ReportError(
            file,
            f"{rule.where()} of {rules}: the baseline value is "
            f"{'null' if isinstance(value, _Null) else 'infinite'}, so a bound relative to it "
            "cannot be checked; use another baseline or only absolute bounds (min/max)",
        )
    return value


def _require_no_relative_bounds(rules: Sequence[Rule], rules_name: str) -> None:
    for rule in rules:
        if rule.needs_baseline:
            kinds = [k for k in RELATIVE_BOUNDS if getattr(rule, k) is not None]
            raise RulesError(
                rule.source or rules_name,
                f"{rule.where()} has {', '.join(kinds)}, which compares against a "
                "baseline report, but no baseline was given (--baseline OLD.json)",
            )


def evaluate(
    report: Checked,
    rules: RuleSet | Sequence[Rule],
    baseline: Checked | None = None,
    *,
    report_name: str | Path | None = None,
    baseline_name: str | Path | None = None,
) -> CheckResult:
    """Check every rule against ``report`` (and ``baseline`` for relative bounds).

    ``report_name`` and ``baseline_name`` only label messages and outputs. Raises
    :class:`RulesError` for a relative bound without a baseline or a path that points at
    a non-number, and :class:`ReportError` for a path missing from a report; a null value
    is an ``error`` outcome, not an exception (see the module docstring).

    >>> rules = parse_rules('[[rule]]\\npath = "loss.0"\\nmax_increase_pct = 10\\n')
    >>> result = evaluate({"loss": [1.05]}, rules, {"loss": [1.0]})
    >>> result.outcomes[0].verdict, result.outcomes[0].bounds[0].threshold
    ('pass', 1.1)
    """
    # rules address the JSON layout, so a typed report is checked as its document
    document = _document(report)
    base_document = None if baseline is None else _document(baseline)
    rule_list = rules.rules if isinstance(rules, RuleSet) else tuple(rules)
    rules_name = rules.source if isinstance(rules, RuleSet) else "the rules"
    file = "<report>" if report_name is None else str(report_name)
    base_file = "<baseline>" if baseline_name is None else str(baseline_name)
    _require_matching_targets(rule_list, document, file, rules_name)
    if base_document is not None and document_kind(base_document) != document_kind(document):
        raise ReportError(
            base_file,
            f"the baseline is {document_kind(base_document)} but {file} is "
            f"{document_kind(document)}; compare like with like",
        )
    if is_timeline(document):
        outcomes = _evaluate_timeline(
            rule_list, document, base_document, file, base_file, rules_name
        )
        return CheckResult(
            tuple(outcomes),
            report=None if report_name is None else str(report_name),
            baseline=None if baseline_name is None else str(baseline_name),
            rules=rules.source if isinstance(rules, RuleSet) else None,
        )
    # every path is looked up first: a report of the wrong kind is named as such before
    # anything is said about baselines
    values = [
        _as_number(_resolve(document, rule, file, rule.source or rules_name), rule, file,
                   rule.source or rules_name)
        for rule in rule_list
    ]  # fmt: skip
    if base_document is None:
        _require_no_relative_bounds(rule_list, rules_name)
    outcomes = []
    for rule, value in zip(rule_list, values, strict=True):
        source = rule.source or rules_name
        base = (
            None
            if base_document is None
            else _baseline_value(base_document, rule, base_file, source)
        )
        outcomes.append(_outcome(rule, value, base))
    return CheckResult(
        tuple(outcomes),
        report=None if report_name is None else str(report_name),
        baseline=None if baseline_name is None else str(baseline_name),
        rules=rules.source if isinstance(rules, RuleSet) else None,
    )


def _document(report: Checked) -> Mapping[str, Any]:
    return report.to_dict() if isinstance(report, HasDocument) else report


# ------------------------------------------------------------------------- timelines


def is_timeline(document: Mapping[str, Any]) -> bool:
    """Whether a JSON document is a timeline (``ratioscope timeline --json``)."""
    return document.get("kind") == "timeline"


def _require_matching_targets(
    rules: Sequence[Rule], document: Mapping[str, Any], file: str, rules_name: str
) -> None:
    """A report rule on a timeline, or a series rule on a report, is a setup error."""
    timeline = is_timeline(document)
    for rule in rules:
        source = rule.source or rules_name
        if timeline and rule.target == "report":
            raise RulesError(
                source,
                f"{rule.where()} addresses a report key, but {file} is a timeline; check a "
                f"series of it with series = '{rule.path}' (and last, aggregate, slope_max, "
                "no_flag_after)",
            )
        if not timeline and rule.target == "timeline":
            raise RulesError(
                source,
                f"{rule.where()} addresses a timeline series, but {file} is not a timeline "
                f"(ratioscope timeline --json); check a report with path = '{rule.path}'",
            )


def timeline_series(document: Mapping[str, Any]) -> list[str]:
    """The series a timeline has: its headline keys, then any other key of its steps."""
    keys: list[str] = []
    for headline in document.get("headlines") or []:
        if isinstance(headline, Mapping) and isinstance(headline.get("key"), str):
            keys.append(headline["key"])
    for step in document.get("steps") or []:
        for key in (step.get("values") or {}) if isinstance(step, Mapping) else {}:
            if key not in keys:
                keys.append(key)
    return keys


def _points(
    document: Mapping[str, Any], rule: Rule, file: str, rules: str
) -> list[tuple[int, float | None, bool]]:
    """``(step, value, flagged)`` of the rule's series at every step, in step order."""
    known = timeline_series(document)
    if rule.path not in known:
        shown = ", ".join(known[:20]) + (f", ... ({len(known)} in all)" if len(known) > 20 else "")
        raise ReportError(
            file,
            f"{rule.where()} of {rules}: no series '{rule.path}' in the timeline"
            f"{_suggest(rule.path, known)} (its series: {shown or 'none'})",
        )
    points = []
    for step in document.get("steps") or []:
        try:
            number = int(step["step"])
            raw = (step.get("values") or {}).get(rule.path)
            flagged = rule.path in (step.get("flags") or [])
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ReportError(file, f"malformed timeline step {step!r:.80}") from None
        ok = isinstance(raw, (int, float)) and not isinstance(raw, bool) and math.isfinite(raw)
        points.append((number, float(cast(float, raw)) if ok else None, flagged))
    return sorted(points, key=lambda point: point[0])


def _window(rule: Rule, points: list[tuple[int, float | None, bool]]):
    return points if rule.last is None else points[-rule.last :]


def _aggregate(rule: Rule, points: list[tuple[int, float | None, bool]]) -> float | _Null:
    """The rule's aggregate over its window; null steps are skipped (all null: null)."""
    window = _window(rule, points)
    if rule.aggregate == "last":
        value = window[-1][1] if window else None
        return _Null(f"{rule.path} at the last step") if value is None else value
    values = [value for _, value, _ in window if value is not None]
    if not values:
        return _Null(f"{rule.path} at every step of the window")
    if rule.aggregate == "mean":
        return math.fsum(values) / len(values)
    return max(values) if rule.aggregate == "max" else min(values)


def series_slope(steps: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of ``values`` against ``steps`` (per step); needs 2 distinct steps.

    >>> series_slope([0, 1, 2], [1.0, 3.0, 5.0])
    2.0
    """
    n = len(steps)
    mean_x, mean_y = math.fsum(steps) / n, math.fsum(values) / n
    sxx = math.fsum((x - mean_x) ** 2 for x in steps)
    sxy = math.fsum((x - mean_x) * (y - mean_y) for x, y in zip(steps, values, strict=True))
    return sxy / sxx


def _slope(rule: Rule, points: list[tuple[int, float | None, bool]]) -> float | _Null:
    pairs = [(step, value) for step, value, _ in _window(rule, points) if value is not None]
    if len({step for step, _ in pairs}) < 2:
        return _Null(f"{rule.path} (fewer than 2 steps with a value)")
    return series_slope([float(s) for s, _ in pairs], [v for _, v in pairs])


def _measure(
    rule: Rule, points: list[tuple[int, float | None, bool]]
) -> tuple[float | _Null, str | None]:
    """The number the rule's bounds hold, and a reason that says more than the number."""
    if rule.measure == "slope":
        value = _slope(rule, points)
        if isinstance(value, _Null):
            return value, f"no slope: fewer than 2 steps of the window have a value of {rule.path}"
        return value, None
    if rule.measure == "flags":
        after = rule.no_flag_after
        assert after is not None
        flagged = [step for step, _, flag in points if flag and step > after]
        if not flagged:
            return 0.0, None
        shown = ", ".join(str(step) for step in flagged[:10])
        more = f", ... ({len(flagged)} in all)" if len(flagged) > 10 else ""
        return float(len(flagged)), f"flagged at step(s) {shown}{more}, after step {after}"
    value = _aggregate(rule, points)
    if isinstance(value, _Null):
        return value, f"the value is null ({value.where}): nothing to aggregate"
    return value, None


def _evaluate_timeline(
    rules: Sequence[Rule],
    document: Mapping[str, Any],
    baseline: Mapping[str, Any] | None,
    file: str,
    base_file: str,
    rules_name: str,
) -> list[RuleOutcome]:
    # every series is looked up first, as for reports: a wrong file is named before a
    # missing baseline
    points = [_points(document, rule, file, rule.source or rules_name) for rule in rules]
    if baseline is None:
        _require_no_relative_bounds(rules, rules_name)
    outcomes = []
    for rule, series in zip(rules, points, strict=True):
        source = rule.source or rules_name
        value, detail = _measure(rule, series)
        base: float | None = None
        if baseline is not None and rule.measure in ("aggregate", "slope"):
            base_value, _ = _measure(rule, _points(baseline, rule, base_file, source))
            if isinstance(base_value, _Null) and rule.needs_baseline:
                raise ReportError(
                    base_file,
                    f"{rule.where()} of {source}: the baseline's {rule.aggregate} is null, so a "
                    "bound relative to it cannot be checked; use another baseline or only "
                    "absolute bounds (min/max)",
                )
            base = None if isinstance(base_value, _Null) else base_value
        outcomes.append(_outcome(rule, value, base, detail))
    return outcomes
