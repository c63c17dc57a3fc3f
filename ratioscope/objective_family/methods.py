"""The methods of the side-by-side view: names, sources, defaults, what each needs.

Each :class:`Method` turns the tensors of one batch (:class:`MethodInputs`) into its
per-token policy-gradient coefficient (:class:`~ratioscope.functional.objectives.
Coefficients`) with the formulas of :mod:`ratioscope.functional.objectives` and
:mod:`ratioscope.functional.corrections`. Hyper-parameters default to the values of the
method's paper or reference implementation (``source`` says which) and are overridden by
``settings`` (``ratioscope objectives --set dapo.clip=0.2,0.3``). docs/objectives.md
lists them with their formulas.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ratioscope.errors import ParameterError

if TYPE_CHECKING:
    from torch import Tensor

    from ratioscope.data.batch import TokenBatch
    from ratioscope.functional.objectives import Coefficients

Setting = float | tuple[float, ...] | str
Settings = Mapping[str, Setting]

#: the method every other one is compared with (sign flips) and the base the
#: train/inference corrections reweight
REFERENCE = "grpo"


class MissingInput(Exception):
    """A method cannot run on a batch: ``reason`` names the missing tensor."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class MethodInputs:
    """The tensors of one batch, with what several methods share computed once.

    Attributes:
        batch: the :class:`~ratioscope.data.batch.TokenBatch` (one file).
        base_settings: the settings of :data:`REFERENCE`, the objective that the
            corrections reweight (its defaults when None).
        cache: what several methods share (the base coefficients, FPA's method).
    """

    batch: TokenBatch
    base_settings: Settings | None = None
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def mask(self) -> Tensor:
        return self.batch.mask

    @property
    def z(self) -> Tensor:
        return self.batch.log_ratio

    def need(self, name: str, why: str = "") -> Tensor:
        """The batch tensor ``name``, or :class:`MissingInput` naming it."""
        value = getattr(self.batch, name)
        if value is None:
            raise MissingInput(f"needs `{name}`" + (f" ({why})" if why else ""))
        return value

    @property
    def advantages(self) -> Tensor:
        return self.need("advantages")

    @cached_property
    def groups(self) -> tuple[Tensor, Tensor, int]:
        """``(rewards [B], group [B], G)``."""
        rewards = self.need("rewards", "group rewards")
        group = self.need("group", "prompt ids")
        return rewards, group, int(group.max()) + 1 if group.numel() else 0

    @cached_property
    def rollout_log_ratio(self) -> Tensor:
        """``log pi_old - log pi_rollout`` [B, T] float64, 0 at masked positions."""
        import torch

        old = self.need("old_log_probs", "the trainer's behaviour log-probs")
        rollout = self.need("rollout_log_probs", "the inference engine's log-probs")
        return torch.where(self.mask, old.double() - rollout.double(), 0.0)


@dataclass(frozen=True)
class Method:
    """One method of the side-by-side view.

    Attributes:
        name: its key (``--methods``, report keys).
        label: how tables and plots name it.
        family: ``clip`` (the clipping family), ``paper`` (the five papers),
            ``correction`` (train/inference corrections), ``advantage`` (a different
            advantage on GRPO's objective).
        source: the paper or reference implementation its formula and defaults follow.
        defaults: its hyper-parameters.
        compute: ``(inputs, settings) -> Coefficients``.
    """

    name: str
    label: str
    family: str
    source: str
    defaults: Mapping[str, Setting]
    compute: Callable[[MethodInputs, Settings], Coefficients]

    def settings(self, overrides: Settings | None = None) -> dict[str, Setting]:
        """The defaults with ``overrides`` applied (unknown keys refused)."""
        merged = dict(self.defaults)
        for key, value in (overrides or {}).items():
            if key not in merged:
                known = ", ".join(sorted(merged)) or "none"
                raise ParameterError(
                    "settings",
                    f"names a setting '{key}' that {self.name} does not have "
                    f"(its settings: {known})",
                )
            merged[key] = _coerce(self.name, key, self.defaults[key], value)
        return merged


def _coerce(method: str, key: str, default: Setting, value: Any) -> Setting:
    """``value`` (a string from the command line, or a Python value) as ``default``'s type."""
    where = f"{method}.{key}"
    try:
        if isinstance(default, str):
            return str(value)
        if isinstance(default, tuple):
            items = value.split(",") if isinstance(value, str) else list(value)
            parsed = tuple(float(v) for v in items)
            if len(parsed) != len(default):
                raise ValueError(f"expected {len(default)} comma-separated numbers")
        else:
            parsed = (float(value),)
    except (TypeError, ValueError) as error:
        raise ParameterError("settings", f"cannot read {where}={value} ({error})") from None
    for number in parsed:
        _refuse_unrepresentable(where, number, value)
    return parsed if isinstance(default, tuple) else parsed[0]


#: the largest float32: the coefficients are float32 tensors, which a larger setting
#: overflowed (an internal error)
_FLOAT32_MAX = 3.4028234663852886e38


def _refuse_unrepresentable(where: str, number: float, value: Any) -> None:
    if not math.isfinite(number):
        raise ParameterError("settings", f"needs a finite {where}, got {value!r}")
    if abs(number) > _FLOAT32_MAX:
        raise ParameterError(
            "settings", f"needs {where} within float32's range (3.4e38), got {value!r}"
        )


def _pair(settings: Settings, key: str) -> tuple[float, float]:
    value = settings[key]
    assert isinstance(value, tuple) and len(value) == 2, f"{key} is a pair"
    return float(value[0]), float(value[1])


def _number(settings: Settings, key: str) -> float:
    value = settings[key]
    assert isinstance(value, (int, float)), f"{key} is a number"
    return float(value)


# --------------------------------------------------------------- compute functions
def _grpo(inputs: MethodInputs, s: Settings) -> Coefficients:
    from ratioscope.functional.objectives import ppo_clip_coefficients

    return ppo_clip_coefficients(
        inputs.z, inputs.advantages, inputs.mask, _pair(s, "clip"), str(s["aggregation"])
    )


def _dr_grpo(inputs: MethodInputs, s: Settings) -> Coefficients:
    from ratioscope.functional.objectives import dr_grpo_advantages, ppo_clip_coefficients

    rewards, group, _ = inputs.groups
    advantages = dr_grpo_advantages(rewards, group)
    return ppo_clip_coefficients(inputs.z, advantages, inputs.mask, _pair(s, "clip"), "token-sum")


def _gspo(inputs: MethodInputs, s: Settings) -> Coefficients:
    from ratioscope.functional.objectives import gspo_coefficients

    return gspo_coefficients(inputs.z, inputs.advantages, inputs.mask, _pair(s, "clip"))


def _gmpo(inputs: MethodInputs, s: Settings) -> Coefficients:
    from ratioscope.functional.objectives import gmpo_coefficients

    return gmpo_coefficients(inputs.z, inputs.advantages, inputs.mask, _pair(s, "clip"))


def _cispo(inputs: MethodInputs, s: Settings) -> Coefficients:
    from ratioscope.functional.objectives import cispo_coefficients

    return cispo_coefficients(inputs.z, inputs.advantages, inputs.mask, _pair(s, "clip"))


def _sapo(inputs: MethodInputs, s: Settings) -> Coefficients:
    from ratioscope.functional.objectives import sapo_coefficients

    return sapo_coefficients(
        inputs.z,
        inputs.advantages,
        inputs.mask,
        (_number(s, "tau_pos"), _number(s, "tau_neg")),
    )


def _kpo(inputs: MethodInputs, s: Settings) -> Coefficients:
    from ratioscope.functional.objectives import kpo_coefficients

    return kpo_coefficients(
        inputs.z,
        inputs.advantages,
        inputs.mask,
        _pair(s, "clip"),
        q=_number(s, "q"),
        v=_number(s, "v"),
    )


def _cw_grpo(inputs: MethodInputs, s: Settings) -> Coefficients:
    from ratioscope.functional.covariance import covariance_weights
    from ratioscope.functional.objectives import ppo_clip_coefficients, token_advantages

    log_probs = inputs.need("log_probs", "the covariance uses log pi_theta itself")
    advantages = token_advantages(inputs.advantages, inputs.mask)
    scope = str(s["scope"])
    if scope not in ("group", "batch"):
        raise ParameterError("settings", f"needs cw_grpo.scope 'group' or 'batch', got '{scope}'")
    group = inputs.batch.group if scope == "group" else None
    _, _, w_norm = covariance_weights(log_probs.double(), advantages, inputs.mask, group)
    return ppo_clip_coefficients(
        inputs.z, advantages * w_norm, inputs.mask, _pair(s, "clip"), "seq-mean-token-mean"
    )


def _tepo(inputs: MethodInputs, s: Settings) -> Coefficients:
    from ratioscope.functional.objectives import tepo_coefficients

    return tepo_coefficients(
        inputs.z,
        inputs.advantages,
        inputs.mask,
        _pair(s, "clip"),
        inputs.batch.entropy,
        inputs.batch.old_entropy,
        beta=_number(s, "beta"),
    )


def _quatro(inputs: MethodInputs, s: Settings) -> Coefficients:
    from ratioscope.functional.objectives import quatro_coefficients
    from ratioscope.functional.quatro import quatro_duals

    rewards, group, n_groups = inputs.groups
    duals = quatro_duals(rewards.double(), group, delta=_number(s, "delta"))
    return quatro_coefficients(inputs.z, duals.adv, inputs.mask, n_groups)


def _fpa(inputs: MethodInputs, s: Settings) -> Coefficients:
    from ratioscope.functional.fpa import future_log_probs_approx, future_log_probs_exact
    from ratioscope.functional.objectives import fpa_coefficients

    batch = inputs.batch
    correct = inputs.need("correct", "FPA's reward is +1 correct, -1 incorrect")
    lam = _number(s, "lam")
    if batch.logits is not None and batch.ref_logits is not None and batch.token_ids is not None:
        future = future_log_probs_exact(
            batch.logits, batch.ref_logits, batch.token_ids, lam=lam, mask=inputs.mask
        )
        inputs.cache["fpa_method"] = "exact"
    else:
        log_probs = inputs.need("log_probs", "pi_theta of the sampled tokens")
        ref = inputs.need("ref_log_probs", "the reference policy FPA extrapolates from")
        future = future_log_probs_approx(log_probs.double(), ref.double(), lam)
        inputs.cache["fpa_method"] = "approximation"
    return fpa_coefficients(future.double(), correct, inputs.mask)


def _base(inputs: MethodInputs) -> Coefficients:
    """GRPO's coefficients with the reference settings: what the corrections reweight."""
    if "base" not in inputs.cache:
        settings = inputs.base_settings or METHODS[REFERENCE].settings()
        inputs.cache["base"] = METHODS[REFERENCE].compute(inputs, settings)
    return inputs.cache["base"]


def _reweighted(inputs: MethodInputs, weight: Tensor, flags: dict[str, Tensor]) -> Coefficients:
    """GRPO's coefficients times a correction's weight; the flags are the correction's own
    (GRPO's clipping is GRPO's row)."""
    from ratioscope.functional.objectives import Coefficients

    base = _base(inputs)
    return Coefficients(base.values * weight, base.scale, flags)


def _tis(inputs: MethodInputs, s: Settings) -> Coefficients:
    from ratioscope.functional.corrections import token_truncation

    return _reweighted(
        inputs, *token_truncation(inputs.rollout_log_ratio, inputs.mask, _number(s, "cap"))
    )


def _icepop(inputs: MethodInputs, s: Settings) -> Coefficients:
    from ratioscope.functional.corrections import token_mask

    return _reweighted(
        inputs, *token_mask(inputs.rollout_log_ratio, inputs.mask, _pair(s, "bounds"))
    )


def _seq_tis(inputs: MethodInputs, s: Settings) -> Coefficients:
    from ratioscope.functional.corrections import sequence_truncation

    return _reweighted(
        inputs,
        *sequence_truncation(inputs.rollout_log_ratio, inputs.mask, _number(s, "cap")),
    )


def _geo_rs(inputs: MethodInputs, s: Settings) -> Coefficients:
    from ratioscope.functional.corrections import geometric_rejection

    return _reweighted(
        inputs, *geometric_rejection(inputs.rollout_log_ratio, inputs.mask, _pair(s, "bounds"))
    )


def _geo_tis(inputs: MethodInputs, s: Settings) -> Coefficients:
    from ratioscope.functional.corrections import sequence_truncation

    return _reweighted(
        inputs,
        *sequence_truncation(inputs.rollout_log_ratio, inputs.mask, _number(s, "cap"), True),
    )


def _k_rs(inputs: MethodInputs, s: Settings) -> Coefficients:
    from ratioscope.functional.corrections import sequence_rejection

    divergence = str(s["divergence"])
    if divergence not in ("k1", "k2", "k3"):
        raise ParameterError("settings", f"needs k_rs.divergence k1, k2 or k3, got '{divergence}'")
    if str(s["reduce"]) not in ("sum", "mean", "max"):
        raise ParameterError("settings", f"needs k_rs.reduce sum, mean or max, got '{s['reduce']}'")
    weight, flags = sequence_rejection(
        inputs.rollout_log_ratio,
        inputs.mask,
        divergence,
        str(s["reduce"]),
        _number(s, "threshold"),
    )
    return _reweighted(inputs, weight, flags)


def _m2po(inputs: MethodInputs, s: Settings) -> Coefficients:
    import torch

    from ratioscope.functional.corrections import second_moment_mask
    from ratioscope.functional.objectives import Coefficients, row_weights, token_advantages

    keep, flags = second_moment_mask(inputs.rollout_log_ratio, inputs.mask, _number(s, "threshold"))
    advantages = token_advantages(inputs.advantages, inputs.mask)
    weights, scale = row_weights(inputs.mask, "token-mean")
    ratio = torch.exp(inputs.z.double())
    values = torch.where(inputs.mask, keep * ratio * advantages * weights, 0.0)
    return Coefficients(values, scale, flags)


def _opsm(inputs: MethodInputs, s: Settings) -> Coefficients:
    import torch

    from ratioscope.functional.corrections import off_policy_sequence_mask
    from ratioscope.functional.objectives import token_advantages

    batch = inputs.batch
    current = inputs.need("log_probs", "pi_theta of the sampled tokens")
    behaviour = (
        batch.rollout_log_probs if batch.rollout_log_probs is not None else batch.old_log_probs
    )
    if behaviour is None:
        raise MissingInput("needs `old_log_probs` or `rollout_log_probs` (the sampling policy)")
    drift = torch.where(inputs.mask, behaviour.double() - current.double(), 0.0)
    advantages = token_advantages(inputs.advantages, inputs.mask)
    return _reweighted(
        inputs,
        *off_policy_sequence_mask(drift, advantages, inputs.mask, _number(s, "delta")),
    )


def _clip_defaults(low: float, high: float, aggregation: str | None = None) -> dict[str, Setting]:
    out: dict[str, Setting] = {"clip": (low, high)}
    if aggregation is not None:
        out["aggregation"] = aggregation
    return out


#: the methods, in the order of the tables
METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method(
            "grpo", "GRPO", "clip",
            "DeepSeekMath (Shao et al. 2024) Eq. 3: token clip eps 0.2, seq-mean-token-mean",
            _clip_defaults(0.2, 0.2, "seq-mean-token-mean"), _grpo,
        ),
        Method(
            "dapo", "DAPO", "clip",
            "DAPO (Yu et al. 2025) Eq. 8: clip-higher 0.2 / 0.28, token-mean",
            _clip_defaults(0.2, 0.28, "token-mean"), _grpo,
        ),
        Method(
            "gspo", "GSPO", "clip",
            "GSPO (Zheng et al. 2025) Eq. 5 and GSPO-token: sequence ratio, eps 3e-4 / 4e-4",
            _clip_defaults(3e-4, 4e-4), _gspo,
        ),
        Method(
            "gmpo", "GMPO", "clip",
            "GMPO (Zhao et al. 2025): geometric mean, token clip in log space (-0.4, 0.4)",
            _clip_defaults(0.4, 0.4), _gmpo,
        ),
        Method(
            "cispo", "CISPO", "clip",
            "MiniMax-M1 (2025) Eq. 4: stop-gradient truncated ratio on A log pi, no lower "
            "bound; cap 1.2 as verl's CISPO example (clip_ratio_low 10, clip_ratio_high 0.2)",
            _clip_defaults(1.0, 0.2), _cispo,
        ),
        Method(
            "sapo", "SAPO", "clip",
            "SAPO (Gao et al. 2025): soft gate 4/tau sigmoid(tau (r - 1)), tau 1.0 / 1.05",
            {"tau_pos": 1.0, "tau_neg": 1.05}, _sapo,
        ),
        Method(
            "dr_grpo", "Dr. GRPO", "advantage",
            "Understanding R1-Zero-Like Training (Liu et al. 2025): R - mean R, no std; "
            "token sum over a constant length; clip 0.2",
            _clip_defaults(0.2, 0.2), _dr_grpo,
        ),
        Method(
            "kpo", "KPO", "paper",
            "KPO Eq. 10: GRPO on the Kalman-filtered ratio, Q 1e-6, V 1, band 3e-4 / 4e-4",
            {"clip": (3e-4, 4e-4), "q": 1e-6, "v": 1.0}, _kpo,
        ),
        Method(
            "cw_grpo", "CW-GRPO", "paper",
            "CW-GRPO Sec. 2.3: GRPO with the kernel-weighted advantage w~ A",
            {"clip": (0.2, 0.2), "scope": "group"}, _cw_grpo,
        ),
        Method(
            "tepo", "TEPO", "paper",
            "TEPO Eq. 4: sequence likelihood, token-mean, KL mask with beta 1e-3",
            {"clip": (3e-4, 4e-4), "beta": 1e-3}, _tepo,
        ),
        Method(
            "quatro", "QUATRO", "paper",
            "QUATRO Eq. 14-15: dual advantages, radius 0.01, sequence ratio with its log term",
            {"delta": 0.01}, _quatro,
        ),
        Method(
            "fpa", "FPA", "paper",
            "FPA Eq. 3: R pi_hat^(1/|y|) / |y| with lambda 1 (exact from logits, else the "
            "approximation)",
            {"lam": 1.0}, _fpa,
        ),
        Method(
            "tis", "TIS", "correction",
            "token truncated IS on GRPO: min(pi_old/pi_rollout, C), C 2 (verl rollout "
            "correction decoupled_token_is; slime --tis-clip 2)",
            {"cap": 2.0}, _tis,
        ),
        Method(
            "icepop", "IcePop", "correction",
            "token mask (MIS) on GRPO: rho kept inside [0.5, 5], 0 outside (verl "
            "decoupled_token_icepop; OpenRLHF is_correction_threshold)",
            {"bounds": (0.5, 5.0)}, _icepop,
        ),
        Method(
            "seq_tis", "Seq-TIS", "correction",
            "sequence IS on GRPO: min(prod_t rho_t, C), C 2 (verl decoupled_seq_is)",
            {"cap": 2.0}, _seq_tis,
        ),
        Method(
            "geo_tis", "Geo-TIS", "correction",
            "geometric sequence IS on GRPO: min(exp(mean_t log rho_t), C), C 2 (slime's MIS "
            "example, tis_level geometric, truncate)",
            {"cap": 2.0}, _geo_tis,
        ),
        Method(
            "geo_rs", "Geo-RS", "correction",
            "geometric rejection on GRPO: drop sequences with exp(mean log rho) outside "
            "[0.999, 1.001] (verl decoupled_geo_rs, seq_mean_k1)",
            {"bounds": (0.999, 1.001)}, _geo_rs,
        ),
        Method(
            "k_rs", "K-RS", "correction",
            "divergence rejection on GRPO: drop sequences whose mean (or sum, max) k3 = "
            "rho - 1 - log rho (or k1, k2) exceeds 0.01 (verl decoupled_k3_rs, seq_mean_k3)",
            {"divergence": "k3", "reduce": "mean", "threshold": 0.01}, _k_rs,
        ),
        Method(
            "m2po", "M2PO", "correction",
            "M2PO: mask the largest (log pi_old/pi_rollout)^2 until their mean is < 0.04, "
            "then token-mean r A without clipping (AReaL m2_threshold; M2PO M2_budget)",
            {"threshold": 0.04}, _m2po,
        ),
        Method(
            "opsm", "OPSM", "correction",
            "DeepSeek-V3.2 off-policy sequence mask on GRPO: drop A < 0 sequences with mean "
            "log(pi_sampling/pi_theta) > 1e-4 (slime --opsm-delta)",
            {"delta": 1e-4}, _opsm,
        ),
    )
}  # fmt: skip


def looks_across_groups(name: str, settings: Settings) -> bool:
    """Whether method ``name``'s coefficient of a row depends on the other rows of its
    group: Dr. GRPO's and QUATRO's advantages from the group's rewards, CW-GRPO's kernel
    weights centred and scaled per group (scope ``group``). ``objectives`` computes
    them on whole groups only (:mod:`ratioscope.objective_family.step_join`)."""
    if name == "cw_grpo":
        return str(settings.get("scope")) == "group"
    return name in ("dr_grpo", "quatro")


def method_names(methods: str | Sequence[str] | None) -> tuple[str, ...]:
    """The methods named by a comma-separated string or a list (None or "all": every
    method), in the table order."""
    if methods is None:
        return tuple(METHODS)
    parts = methods.split(",") if isinstance(methods, str) else list(methods)
    wanted = [part.strip() for part in parts if part.strip()]
    if not wanted or wanted == ["all"]:
        return tuple(METHODS)
    unknown = [name for name in wanted if name not in METHODS]
    if unknown:
        raise ParameterError(
            "methods",
            f"names unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}",
        )
    return tuple(name for name in METHODS if name in wanted)


def chosen_settings(
    names: Sequence[str], overrides: Mapping[str, Mapping[str, Any]] | None
) -> dict[str, dict[str, Setting]]:
    """Each named method's settings with ``overrides`` applied; an override of a method
    that is not named is refused (it would silently do nothing)."""
    overrides = overrides or {}
    for name in overrides:
        if name not in names:
            raise ParameterError(
                "settings", f"sets {name}, which is not among the methods ({', '.join(names)})"
            )
    return {name: METHODS[name].settings(overrides.get(name)) for name in names}


def parse_settings(items: list[str] | None) -> dict[str, dict[str, str]]:
    """``["dapo.clip=0.2,0.3", "kpo.q=1e-4"]`` as ``{method: {key: text}}``."""
    out: dict[str, dict[str, str]] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        method, dot, key = name.strip().partition(".")
        if not sep or not dot or not key:
            raise ParameterError(
                "settings", f"takes METHOD.KEY=VALUE (e.g. dapo.clip=0.2,0.3), got '{item}'"
            )
        if method not in METHODS:
            raise ParameterError(
                "settings",
                f"names an unknown method in '{item}'; choose from {', '.join(METHODS)}",
            )
        out.setdefault(method, {})[key] = value.strip()
    return out
