"""The trainer's own settings: recorded by the capture, or a framework's documented defaults.

A capture (TRL's mixin, or a :class:`~ratioscope.capture.CaptureWriter` given
``trainer_settings``) stores the trainer's configuration in every part file, as one JSON
text under :data:`SETTINGS_KEY`. ``analyze`` and ``timeline`` then take from it what the
trainer really used, unless an option says otherwise:

* the clip band (``clip``): TRL's ``epsilon``/``epsilon_high``, verl's
  ``clip_ratio_low``/``clip_ratio_high``, OpenRLHF's ``eps_clip_low_high``;
* the group size the trainer sampled (TRL's ``num_generations``, verl's ``rollout.n``,
  OpenRLHF's ``n_samples_per_prompt``), against which joined groups are checked whole;
* the response-length limit (``max_completion_length``, ``data.max_response_length``,
  ``rollout.max_new_tokens``);
* the engine's sampling settings where they change its distribution (TRL's
  ``temperature``/``top_p``/``top_k``, verl's ``rollout.temperature``/``top_p``/
  ``top_k``): the ``sampling`` section's truncation check (docs/sampling.md).

For files without recorded settings, ``trainer="trl"`` (``--trainer trl``) applies that
framework's documented defaults (:data:`DOCUMENTED_DEFAULTS`, each cited in
docs/frameworks.md). Settings are in the framework's own names, so that a user can check
them against the trainer's config.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratioscope.errors import ParameterError

if TYPE_CHECKING:
    from ratioscope.data.params import AnalysisParams

#: the top-level key of a part file that holds the settings (a JSON text)
SETTINGS_KEY = "ratioscope_trainer"
#: the environment variable through which a trainer's driver hands its settings (JSON, as
#: :func:`settings_env` writes it) to the writers in its workers (:func:`settings_from_env`)
SETTINGS_ENV = "RATIOSCOPE_TRAINER_SETTINGS"
#: where verl (b178a3cd, ``trainer/main_ppo.py`` ``run_ppo``) takes the environment
#: variables of every Ray actor from: ``ray_init.runtime_env`` is merged into
#: ``ray.init``'s job runtime environment, whose ``env_vars`` Ray merges into each worker's
VERL_ENV_VARS_KEY = "ray_kwargs.ray_init.runtime_env.env_vars"
FRAMEWORKS = ("trl", "verl", "openrlhf")
#: how the ``source`` of settings read from a part file begins
RECORDED = "recorded by the capture"
#: the values of ``trainer``: "auto" reads recorded settings, "none" ignores them
TRAINER_CHOICES = ("auto", "none", *FRAMEWORKS)

#: each framework's documented defaults, in its own names (docs/frameworks.md cites them):
#: TRL 1.16.0 ``GRPOConfig``; verl b178a3cd ``trainer/config/actor/actor.yaml``,
#: ``data/legacy_data.yaml``, ``rollout/rollout.yaml``; OpenRLHF 3c3be623
#: ``openrlhf/cli/train_ppo_ray.py``
DOCUMENTED_DEFAULTS: dict[str, dict[str, Any]] = {
    "trl": {
        "epsilon": 0.2,
        "epsilon_high": None,  # None: epsilon (GRPOTrainer.__init__)
        "delta": None,
        "loss_type": "dapo",
        "importance_sampling_level": "token",
        "beta": 0.0,
        "num_generations": 8,
        "num_iterations": 1,
        "steps_per_generation": None,  # None: gradient_accumulation_steps
        "gradient_accumulation_steps": 1,
        "max_completion_length": 512,
        "vllm_importance_sampling_correction": True,
        "vllm_importance_sampling_mode": "sequence_mask",
        "vllm_importance_sampling_clip_min": None,
        "vllm_importance_sampling_clip_max": 3.0,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,  # 0 or None: no top-k
    },
    "verl": {
        "actor.clip_ratio": 0.2,
        "actor.clip_ratio_low": 0.2,
        "actor.clip_ratio_high": 0.2,
        "actor.clip_ratio_c": 3.0,
        "actor.loss_agg_mode": "token-mean",
        "actor.ppo_epochs": 1,
        "actor.use_kl_loss": False,
        "actor.kl_loss_coef": 0.001,
        "data.max_response_length": 512,
        "rollout.n": 1,
        "algorithm.adv_estimator": "gae",
        "algorithm.norm_adv_by_std_in_grpo": True,
        "rollout.temperature": 1.0,
        "rollout.top_p": 1.0,
        "rollout.top_k": -1,  # -1: no top-k
    },
    "openrlhf": {
        "actor.eps_clip": 0.2,
        "actor.eps_clip_low_high": None,  # None: (eps_clip, eps_clip)
        "actor.dual_clip": None,
        "actor.policy_loss_type": "ppo",
        "rollout.n_samples_per_prompt": 1,
        "rollout.max_new_tokens": None,  # None: data.max_len - prompt length
        "data.max_len": 2048,
        "train.max_epochs": 1,
        "algo.advantage.estimator": "gae",
        "algo.kl.init_coef": 0.01,
    },
}
_NAMES = {"trl": "TRL", "verl": "verl", "openrlhf": "OpenRLHF"}


@dataclass(frozen=True)
class TrainerSettings:
    """A trainer's configuration, in its framework's names.

    Attributes:
        framework: "trl", "verl" or "openrlhf".
        settings: name -> value (numbers, strings, booleans, None, lists).
        reward_functions: (name, weight) of each reward function, when known.
        source: where they come from, in words ("recorded by the capture in FILE",
            "TRL's documented defaults (--trainer trl)").
    """

    framework: str
    settings: Mapping[str, Any]
    reward_functions: tuple[tuple[str, float], ...] = ()
    source: str = ""

    @property
    def name(self) -> str:
        return _NAMES.get(self.framework, self.framework)

    def clip(self) -> tuple[tuple[float, float], str] | None:
        """(low, high) of the token clip band, and the settings it comes from."""
        s = self.settings
        if self.framework == "trl" and _number(s.get("epsilon")):
            low = float(s["epsilon"])
            high = float(s["epsilon_high"]) if _number(s.get("epsilon_high")) else low
            return (low, high), f"epsilon={low:g}, epsilon_high={high:g}"
        if self.framework == "verl" and _number(s.get("actor.clip_ratio", 0.2)):
            base = s.get("actor.clip_ratio", 0.2)
            low = float(_first(s.get("actor.clip_ratio_low"), base))
            high = float(_first(s.get("actor.clip_ratio_high"), base))
            return (low, high), f"clip_ratio_low={low:g}, clip_ratio_high={high:g}"
        if self.framework == "openrlhf" and _number(s.get("actor.eps_clip")):
            pair = s.get("actor.eps_clip_low_high")
            if isinstance(pair, (list, tuple)) and len(pair) == 2:
                low, high = float(pair[0]), float(pair[1])
            else:
                low = high = float(s["actor.eps_clip"])
            return (low, high), f"eps_clip_low_high=({low:g}, {high:g})"
        return None

    def sampling(self) -> dict[str, float | int]:
        """The engine's sampling settings that change its distribution (a temperature
        other than 1, top-p below 1, top-k above 0), by AnalysisParams name: TRL's
        ``temperature``/``top_p``/``top_k``, verl's ``rollout.*``; empty otherwise."""
        prefix = {"trl": "", "verl": "rollout."}.get(self.framework)
        if prefix is None:
            return {}
        s: Mapping[str, Any] = self.settings
        found: dict[str, float | int] = {}
        temperature: Any = s.get(f"{prefix}temperature")
        if _number(temperature) and temperature > 0 and temperature != 1:
            found["temperature"] = float(temperature)
        top_p: Any = s.get(f"{prefix}top_p")
        if _number(top_p) and 0 < top_p < 1:
            found["top_p"] = float(top_p)
        top_k = _positive_int(s.get(f"{prefix}top_k"))
        if top_k is not None:
            found["top_k"] = top_k
        return found

    def group_size(self) -> int | None:
        """The completions sampled per prompt, when the settings say."""
        key = {"trl": "num_generations", "verl": "rollout.n"}.get(
            self.framework, "rollout.n_samples_per_prompt"
        )
        return _positive_int(self.settings.get(key))

    def max_response_length(self) -> int | None:
        """The trainer's response-length limit in tokens, when the settings say."""
        key = {"trl": "max_completion_length", "verl": "data.max_response_length"}.get(
            self.framework, "rollout.max_new_tokens"
        )
        return _positive_int(self.settings.get(key))

    @property
    def recorded(self) -> bool:
        """Whether the settings were recorded by the trainer's capture (not a framework's
        documented defaults that ``--trainer`` assumed)."""
        return self.source.startswith(RECORDED)

    def whole_step_on_policy(self) -> str | None:
        """Why every log-ratio (current vs old) of a captured optimizer step must be exactly
        0, in words, or None when the settings do not imply it (TRL:
        :meth:`_trl_whole_step`, verl: :meth:`_verl_whole_step`; OpenRLHF: never)."""
        if self.framework == "trl":
            return self._trl_whole_step()
        if self.framework == "verl":
            return self._verl_whole_step()
        return None

    def _trl_whole_step(self) -> str | None:
        """TRL's ``GRPOTrainer`` generates every ``steps_per_generation x num_iterations``
        micro-steps; when ``gradient_accumulation_steps`` is a multiple of that, every
        generation happens at an optimizer-step boundary, so all loss micro-batches of a
        step come from the policy before its one update. TRL then sets
        ``old_per_token_logps`` to None and uses ``per_token_logps.detach()`` (the capture
        records that, a ratio of exactly 1), unless vLLM importance sampling makes it
        recompute them (``_generate_and_score_completions``, ``_compute_loss``).
        ``steps_per_generation`` None is ``gradient_accumulation_steps``
        (``GRPOConfig.__post_init__``).
        """
        s = self.settings
        accumulation = _positive_int(s.get("gradient_accumulation_steps"))
        iterations = _positive_int(s.get("num_iterations"))
        per_generation = _positive_int(s.get("steps_per_generation")) or accumulation
        if accumulation is None or iterations is None or per_generation is None:
            return None
        if accumulation % (per_generation * iterations) != 0:
            return None
        return (
            f"TRL gradient_accumulation_steps={accumulation} is a multiple of "
            f"steps_per_generation x num_iterations = {per_generation} x {iterations}: "
            "each optimizer step trains on completions of the policy before it"
        )

    def _verl_whole_step(self) -> str | None:
        """verl updates the actor once per step on ``data.train_batch_size x rollout.n``
        sequences, in mini-batches of ``actor.ppo_mini_batch_size x rollout.n`` (both
        divided by the data-parallel size on each rank; both sizes in prompts, as the
        trainer's top-level config holds them), ``actor.ppo_epochs`` times. With
        ``train_batch_size <= ppo_mini_batch_size`` (verl refuses ``<`` unless
        ``use_dynamic_bsz``) and one epoch, the step is one update from the sampling
        policy. Not when the old log-probs are the rollout's
        (``algorithm.rollout_correction.bypass_mode``, ``actor.use_rollout_log_probs``
        true; None: the config has no such option). All three sizes must be recorded:
        the actor's config alone (a worker's, whose ``ppo_mini_batch_size`` verl has
        normalised to sequences per rank) has no ``data.train_batch_size``.
        """
        s = self.settings
        batch = _positive_int(s.get("data.train_batch_size"))
        mini = _positive_int(s.get("actor.ppo_mini_batch_size"))
        epochs = _positive_int(s.get("actor.ppo_epochs"))
        if batch is None or mini is None or epochs != 1 or batch > mini:
            return None
        for rollout_old in ("algorithm.rollout_correction.bypass_mode",
                            "actor.use_rollout_log_probs"):  # fmt: skip
            if s.get(rollout_old) not in (None, False):
                return None
        return (
            f"verl data.train_batch_size={batch} <= actor.ppo_mini_batch_size={mini} with "
            "ppo_epochs=1: one mini-batch and one epoch, so each step's one update trains "
            "on completions of the policy before it"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "settings": dict(self.settings),
            "reward_functions": [list(pair) for pair in self.reward_functions],
            "source": self.source,
        }

    def to_json(self) -> str:
        """What the capture stores (without ``source``, which is where it is read)."""
        document = self.to_dict()
        del document["source"]
        return json.dumps(document, sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str, source: str = "") -> TrainerSettings | None:
        """The settings a part file stored, or None when the text is not such a document."""
        try:
            document = json.loads(text)
        except ValueError:
            return None
        if not isinstance(document, dict) or document.get("framework") not in FRAMEWORKS:
            return None
        settings = document.get("settings")
        rewards = document.get("reward_functions") or []
        if not isinstance(settings, dict) or not isinstance(rewards, list):
            return None
        return cls(
            framework=document["framework"],
            settings=settings,
            reward_functions=tuple(
                (str(pair[0]), float(pair[1]))
                for pair in rewards
                if isinstance(pair, list) and len(pair) == 2 and _number(pair[1])
            ),
            source=source,
        )


def documented_defaults(framework: str) -> TrainerSettings:
    """The documented defaults of ``framework`` (``--trainer``).

    Raises:
        ParameterError: an unknown framework.
    """
    if framework not in FRAMEWORKS:
        raise ParameterError(
            "trainer", f"must be one of {', '.join(TRAINER_CHOICES)}, got '{framework}'"
        )
    return TrainerSettings(
        framework=framework,
        settings=dict(DOCUMENTED_DEFAULTS[framework]),
        source=f"{_NAMES[framework]}'s documented defaults (--trainer {framework})",
    )


def read_recorded(path: Path) -> TrainerSettings | None:
    """The settings a capture stored in ``path`` (a ``.pt`` part file), read without
    loading its tensors (memory-mapped); None for any other file."""
    if path.suffix.lower() not in (".pt", ".pth"):
        return None
    if not _may_hold_settings(path):
        return None
    import torch

    try:
        content = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # an unreadable file: the analysis says what is wrong with it
        return None
    text = content.get(SETTINGS_KEY) if isinstance(content, dict) else None
    if not isinstance(text, str):
        return None
    return TrainerSettings.from_json(text, source=f"{RECORDED} in {path}")


def _may_hold_settings(path: Path) -> bool:
    """False when the pickle of a ``.pt`` archive does not name :data:`SETTINGS_KEY`
    (a pickle writes a string key's characters as they are), so that the file's
    structure is not unpickled for nothing: a timeline asks this of every step's file.
    True when unsure (not a zip archive: torch's legacy format, a damaged file)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if len(names) != 1:
                return True
            return SETTINGS_KEY.encode() in archive.read(names[0])
    except (OSError, zipfile.BadZipFile, KeyError, ValueError, RuntimeError):
        return True


def resolve(trainer: str | None, first_file: Path | None) -> TrainerSettings | None:
    """The settings in force: recorded in ``first_file`` (``trainer`` "auto" or a
    framework), else the documented defaults of a named framework; None for "none".

    Raises:
        ParameterError: ``trainer`` is not one of :data:`TRAINER_CHOICES`.
    """
    trainer = trainer or "auto"
    if trainer not in TRAINER_CHOICES:
        raise ParameterError(
            "trainer", f"must be one of {', '.join(TRAINER_CHOICES)}, got '{trainer}'"
        )
    if trainer == "none":
        return None
    recorded = read_recorded(first_file) if first_file is not None else None
    if recorded is not None:
        return recorded
    return None if trainer == "auto" else documented_defaults(trainer)


@dataclass
class Applied:
    """What the settings changed: parameter -> where its value came from, in words."""

    settings: TrainerSettings | None
    sources: dict[str, str] = field(default_factory=dict)

    def params_block(self) -> dict[str, Any] | None:
        """The report's ``params.trainer`` block, or None without settings."""
        if self.settings is None:
            return None
        return {**self.settings.to_dict(), "applied": dict(self.sources)}


def apply(
    params: AnalysisParams, settings: TrainerSettings | None, fixed: Collection[str]
) -> tuple[AnalysisParams, Applied]:
    """``params`` with the trainer's clip band and response-length limit (``clip``,
    ``max_length``), each unless it is in ``fixed`` (an option the user gave); the
    sources of the values, for the report."""
    applied = Applied(settings)
    if settings is None:
        return params, applied
    clip = settings.clip()
    if clip is not None:
        if "clip" in fixed:
            applied.sources["clip"] = "option"
        else:
            params = replace(params, clip=clip[0])
            applied.sources["clip"] = f"trainer settings ({settings.name} {clip[1]})"
    size = settings.group_size()
    if size is not None:
        applied.sources["group_size"] = f"trainer settings ({settings.name}: {size})"
    length = settings.max_response_length()
    if length is not None:
        if "max_length" in fixed:
            applied.sources["max_length"] = "option"
        else:
            params = replace(params, max_length=length, max_length_source="trainer settings")
            applied.sources["max_length"] = f"trainer settings ({settings.name}: {length})"
    for name, value in settings.sampling().items():
        if name in fixed:
            applied.sources[name] = "option"
        else:
            update: dict[str, Any] = {name: value}  # Any: one field of three, by name
            params = replace(params, **update)
            applied.sources[name] = f"trainer settings ({settings.name}: {value:g})"
    return params, applied


def trl_settings(trainer: Any) -> TrainerSettings:
    """What a TRL ``GRPOTrainer`` was configured with (its ``args`` and reward functions)."""
    args = trainer.args
    names = (
        "epsilon", "epsilon_high", "delta", "loss_type", "importance_sampling_level", "beta",
        "num_generations", "num_iterations", "steps_per_generation",
        "gradient_accumulation_steps", "per_device_train_batch_size",
        "max_completion_length", "scale_rewards", "mask_truncated_completions", "use_vllm",
        "vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
        "vllm_importance_sampling_clip_min", "vllm_importance_sampling_clip_max",
        "temperature", "top_p", "top_k",
    )  # fmt: skip
    settings = {name: _plain(getattr(args, name, None)) for name in names}
    functions = list(getattr(trainer, "reward_func_names", []) or [])
    weights = getattr(trainer, "reward_weights", None)
    weights = [float(w) for w in weights.tolist()] if weights is not None else []
    return TrainerSettings(
        framework="trl",
        settings=settings,
        reward_functions=tuple(zip(functions, weights, strict=False)),
    )


def verl_settings(config: Any) -> TrainerSettings:
    """verl's settings from its Hydra config (``self.config`` of ``RayPPOTrainer``: the
    top-level config with ``actor_rollout_ref``, ``data``, ``algorithm``), or from the
    actor's config (``self.config`` of the actor worker) alone. Only the top-level config
    has ``data.train_batch_size`` and the mini-batch size in prompts, which the verdict's
    whole-step on-policy rule needs (:meth:`TrainerSettings.whole_step_on_policy`)."""
    actor = _path(config, "actor_rollout_ref.actor") or config
    out: dict[str, Any] = {}
    for name in (
        "clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "loss_agg_mode",
        "ppo_epochs", "use_kl_loss", "kl_loss_coef", "ppo_mini_batch_size",
        "use_rollout_log_probs",
    ):  # fmt: skip
        out[f"actor.{name}"] = _plain(_path(actor, name))
    for name in ("data.max_response_length", "data.train_batch_size"):
        out[name] = _plain(_path(config, name))
    out["rollout.n"] = _plain(_path(config, "actor_rollout_ref.rollout.n"))
    for name in ("temperature", "top_p", "top_k"):
        out[f"rollout.{name}"] = _plain(_path(config, f"actor_rollout_ref.rollout.{name}"))
    out["algorithm.adv_estimator"] = _plain(_path(config, "algorithm.adv_estimator"))
    out["algorithm.norm_adv_by_std_in_grpo"] = _plain(
        _path(config, "algorithm.norm_adv_by_std_in_grpo")
    )
    out["algorithm.rollout_correction.bypass_mode"] = _plain(
        _path(config, "algorithm.rollout_correction.bypass_mode")
    )
    return TrainerSettings(framework="verl", settings=out)


def settings_env(settings: TrainerSettings) -> dict[str, str]:
    """``{SETTINGS_ENV: JSON}``: the environment variable that hands ``settings`` to the
    :class:`~ratioscope.capture.CaptureWriter` of another process (a trainer's worker),
    which reads it when made without ``trainer_settings``. Each ``$`` is written as the
    JSON escape ``\\u0024``, so that a config system that interpolates ``${...}`` in
    strings (OmegaConf) passes the text through unchanged."""
    return {SETTINGS_ENV: settings.to_json().replace("$", "\\u0024")}


def settings_from_env(environ: Mapping[str, str] | None = None) -> TrainerSettings | None:
    """The settings :data:`SETTINGS_ENV` holds (``environ``: default ``os.environ``), or
    None when it is unset or blank.

    Raises:
        ValueError: the variable holds no settings document (not JSON, or JSON without a
            known ``framework`` and a ``settings`` object); one sentence naming it.
    """
    text = (os.environ if environ is None else environ).get(SETTINGS_ENV, "")
    if not text.strip():
        return None
    settings = TrainerSettings.from_json(text, source=f"{RECORDED} (from {SETTINGS_ENV})")
    if settings is None:
        shown = text if len(text) <= 80 else text[:77] + "..."
        raise ValueError(
            f"the {SETTINGS_ENV} environment variable must hold the trainer settings as "
            "JSON (ratioscope.data.trainer_settings.settings_env writes it: an object with "
            f"'framework' one of {', '.join(FRAMEWORKS)} and a 'settings' object), "
            f"got {shown!r}"
        )
    return replace(settings, source="")


def forward_verl_settings(config: Any) -> TrainerSettings:
    """Hand ``verl_settings(config)`` to every verl worker: write it (:func:`settings_env`)
    into ``config.ray_kwargs.ray_init.runtime_env.env_vars`` (:data:`VERL_ENV_VARS_KEY`),
    which verl's ``run_ppo`` passes to ``ray.init``, so that each worker's
    :class:`~ratioscope.capture.CaptureWriter` records the top-level settings. Call it on
    the driver with the Hydra config before ``run_ppo(config)`` (verl's ``main``); it
    has no effect when Ray is already initialised (then pass :func:`settings_env` to
    your own ``ray.init(runtime_env={"env_vars": ...})``).

    Args:
        config: verl's top-level config: an OmegaConf ``DictConfig`` (struct mode
            allowed) or nested dicts.

    Returns:
        The settings forwarded.
    """
    settings = verl_settings(config)
    variables = settings_env(settings)
    if type(config).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf  # verl's own dependency, present where it runs

        for name, value in variables.items():
            OmegaConf.update(config, f"{VERL_ENV_VARS_KEY}.{name}", value, force_add=True)
        return settings
    node = config
    for part in VERL_ENV_VARS_KEY.split("."):
        child = node.get(part) if isinstance(node, Mapping) else None
        if not isinstance(child, dict):
            if child is not None:
                raise ValueError(f"verl config {VERL_ENV_VARS_KEY}: {part} is not a mapping")
            child = node[part] = {}
        node = child
    node.update(variables)
    return settings


def openrlhf_settings(args: Any) -> TrainerSettings:
    """OpenRLHF's settings from its parsed arguments (``--actor.eps_clip`` is
    ``args.actor.eps_clip``; the flat names of older versions, ``args.eps_clip``, too)."""
    out: dict[str, Any] = {}
    for name in DOCUMENTED_DEFAULTS["openrlhf"]:
        value = _path(args, name)
        if value is None:
            value = _path(args, name.rsplit(".", 1)[-1])
        out[name] = _plain(value)
    return TrainerSettings(framework="openrlhf", settings=out)


def _path(obj: Any, dotted: str) -> Any:
    """``obj.a.b`` for ``"a.b"`` through mappings and attributes; None where a part is
    absent (an OmegaConf config in struct mode may raise for an unknown key, as for an
    option an older version of the trainer does not have)."""
    for part in dotted.split("."):
        if obj is None:
            return None
        try:
            obj = obj.get(part) if isinstance(obj, Mapping) else getattr(obj, part, None)
        except (AttributeError, KeyError):
            return None
    return obj


def _plain(value: Any) -> Any:
    """A JSON value: numbers, strings, booleans, None, lists of them."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    if hasattr(value, "value") and isinstance(value.value, str):  # an Enum
        return value.value
    return str(value)


def _number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def _positive_int(value: Any) -> int | None:
    return int(value) if _number(value) and int(value) >= 1 else None


def _first(value: Any, fallback: Any) -> Any:
    return value if _number(value) else fallback
