"""The trainer's settings as defaults: recorded by the capture, or --trainer's documented ones."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

import ratioscope
from ratioscope.capture import CaptureWriter
from ratioscope.cli import app
from ratioscope.data.trainer_settings import (
    SETTINGS_ENV,
    SETTINGS_KEY,
    TrainerSettings,
    documented_defaults,
    forward_verl_settings,
    openrlhf_settings,
    read_recorded,
    settings_env,
    trl_settings,
    verl_settings,
)
from ratioscope.io.loaders import LoadOptions

ROWS, WIDTH = 8, 5


def capture(directory, settings=None) -> None:
    gen = torch.Generator().manual_seed(1)
    old = -torch.rand(ROWS, WIDTH, generator=gen)
    with CaptureWriter(directory, trainer_settings=settings) as writer:
        writer.write(
            0,
            mask=torch.ones(ROWS, WIDTH, dtype=torch.bool),
            log_probs=old + 0.3 * torch.randn(ROWS, WIDTH, generator=gen),
            old_log_probs=old,
            advantages=torch.randn(ROWS, generator=gen),
            rewards=torch.rand(ROWS, generator=gen),
            group=torch.arange(ROWS) // 4,
        )


def verl_config(**actor):
    """verl's Hydra config as the trainer holds it (nested mappings)."""
    return {
        "actor_rollout_ref": {
            "actor": {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, **actor},
            "rollout": {"n": 4},
        },
        "data": {"max_response_length": 1024},
        "algorithm": {"adv_estimator": "grpo"},
    }


def test_verl_settings_give_the_asymmetric_band_group_size_and_length():
    settings = verl_settings(verl_config())
    assert settings.clip()[0] == (0.2, 0.28)
    assert settings.group_size() == 4
    assert settings.max_response_length() == 1024
    # without clip_ratio_low/high verl uses clip_ratio for both
    bare = verl_config(clip_ratio=0.1, clip_ratio_low=None, clip_ratio_high=None)
    assert verl_settings(bare).clip()[0] == (0.1, 0.1)


def test_verl_settings_record_the_batch_sizes_and_the_old_log_prob_source():
    config = verl_config(ppo_epochs=2, ppo_mini_batch_size=16, use_rollout_log_probs=False)
    config["data"]["train_batch_size"] = 64
    config["algorithm"]["rollout_correction"] = {"bypass_mode": True}
    settings = verl_settings(config).settings
    assert settings["data.train_batch_size"] == 64
    assert settings["actor.ppo_mini_batch_size"] == 16 and settings["actor.ppo_epochs"] == 2
    assert settings["actor.use_rollout_log_probs"] is False
    assert settings["algorithm.rollout_correction.bypass_mode"] is True
    # the actor's config alone (a worker's) has no train batch size; older versions no
    # rollout correction; a config that raises for unknown keys (OmegaConf in struct mode)
    actor = verl_settings(config["actor_rollout_ref"]["actor"]).settings
    assert actor["actor.ppo_mini_batch_size"] == 16 and actor["data.train_batch_size"] is None
    assert verl_settings(verl_config()).settings["algorithm.rollout_correction.bypass_mode"] is None

    class Strict(dict):
        def get(self, key, default=None):
            if key not in self:
                raise KeyError(key)
            return self[key]

    strict = Strict(actor_rollout_ref=Strict(actor=Strict(ppo_epochs=1)), data=Strict())
    assert verl_settings(strict).settings["data.train_batch_size"] is None
    assert verl_settings(strict).settings["actor.ppo_epochs"] == 1


def test_openrlhf_settings_read_nested_and_flat_arguments():
    nested = SimpleNamespace(
        actor=SimpleNamespace(eps_clip=0.1, eps_clip_low_high=[0.1, 0.3]),
        rollout=SimpleNamespace(n_samples_per_prompt=8, max_new_tokens=2048),
    )
    settings = openrlhf_settings(nested)
    assert settings.clip()[0] == (0.1, 0.3)
    assert settings.group_size() == 8 and settings.max_response_length() == 2048
    flat = SimpleNamespace(eps_clip=0.15, n_samples_per_prompt=2)
    assert openrlhf_settings(flat).clip()[0] == (0.15, 0.15)
    assert openrlhf_settings(flat).group_size() == 2


def test_recorded_settings_set_the_clip_band_and_say_where_from(tmp_path):
    capture(tmp_path / "c", verl_settings(verl_config()))
    part = next((tmp_path / "c").rglob("*.pt"))
    assert json.loads(torch.load(part, weights_only=True)[SETTINGS_KEY])["framework"] == "verl"
    report = ratioscope.analyze(tmp_path / "c")
    assert report.params["analysis"]["clip"] == [0.2, 0.28]
    block = report.params["trainer"]
    assert "clip_ratio_high=0.28" in block["applied"]["clip"]
    assert block["applied"]["group_size"] == "trainer settings (verl: 4)"
    assert "recorded by the capture" in block["source"]
    # an option given wins; "none" ignores what was recorded
    assert ratioscope.analyze(tmp_path / "c", clip=(0.3, 0.3)).params["analysis"]["clip"] == [
        0.3,
        0.3,
    ]
    ignored = ratioscope.analyze(tmp_path / "c", trainer="none")
    assert ignored.params["analysis"]["clip"] == [0.2, 0.28]
    assert "trainer" not in ignored.params


@pytest.mark.parametrize("framework", ["trl", "verl", "openrlhf"])
def test_trainer_applies_documented_defaults_to_files_without_settings(tmp_path, framework):
    capture(tmp_path / "c")
    assert "trainer" not in ratioscope.analyze(tmp_path / "c").params
    report = ratioscope.analyze(tmp_path / "c", trainer=framework)
    # TRL epsilon 0.2 with epsilon_high None; verl clip_ratio_low/high 0.2; OpenRLHF eps_clip
    assert report.params["analysis"]["clip"] == [0.2, 0.2]
    assert report.params["trainer"]["source"].endswith(f"(--trainer {framework})")
    assert (
        documented_defaults(framework).to_dict()["settings"] == report.params["trainer"]["settings"]
    )


def test_the_cli_takes_trainer_and_refuses_an_unknown_one(tmp_path):
    capture(tmp_path / "c")
    out = tmp_path / "r.json"
    ok = CliRunner().invoke(
        app, ["analyze", str(tmp_path / "c"), "--trainer", "trl", "--json", str(out), "-q"]
    )
    assert ok.exit_code == 0, ok.output
    assert json.loads(out.read_text())["params"]["analysis"]["clip"] == [0.2, 0.2]
    # --clip given with ratioscope's default value still wins over the trainer's
    ok = CliRunner().invoke(
        app,
        ["analyze", str(tmp_path / "c"), "--trainer", "trl", "--clip", "0.2,0.28",
         "--json", str(out), "-q"],
    )  # fmt: skip
    assert json.loads(out.read_text())["params"]["analysis"]["clip"] == [0.2, 0.28]
    bad = CliRunner().invoke(app, ["analyze", str(tmp_path / "c"), "--trainer", "ppo"])
    assert bad.exit_code == 2 and "--trainer" in bad.output and "Traceback" not in bad.output


def test_timeline_and_the_terminal_use_and_name_the_recorded_band(tmp_path):
    capture(tmp_path / "c", verl_settings(verl_config()))
    result = ratioscope.timeline(tmp_path / "c")
    assert result.pooled.params["analysis"]["clip"] == [0.2, 0.28]
    given = ratioscope.timeline(
        tmp_path / "c", params=ratioscope.AnalysisParams(clip=(0.2, 0.28)), fixed_params=["clip"]
    )
    assert given.pooled.params["trainer"]["applied"]["clip"] == "option"
    out = " ".join(CliRunner().invoke(app, ["analyze", str(tmp_path / "c")]).output.split())
    assert "trainer settings: recorded by the capture" in out
    assert "clip from trainer settings (verl clip_ratio_low=0.2, clip_ratio_high=0.28)" in out


def test_objectives_take_grpos_clip_band_from_the_trainer(tmp_path):
    capture(tmp_path / "c", verl_settings(verl_config(clip_ratio_high=0.3)))
    result = ratioscope.objectives(tmp_path / "c", methods=["grpo", "dapo"])
    # GRPO's row: verl's (0.2, 0.3) instead of the paper's (0.2, 0.2); DAPO keeps its own
    assert tuple(result.params["settings"]["grpo"]["clip"]) == (0.2, 0.3)
    assert tuple(result.params["settings"]["dapo"]["clip"]) == (0.2, 0.28)
    assert result.params["trainer"]["applied"]["grpo.clip"].startswith("trainer settings")
    given = ratioscope.objectives(
        tmp_path / "c", methods=["grpo"], settings={"grpo": {"clip": (0.1, 0.1)}}
    )
    assert tuple(given.params["settings"]["grpo"]["clip"]) == (0.1, 0.1)
    assert given.params["trainer"]["applied"]["grpo.clip"] == "option"
    assert (
        "trainer"
        not in ratioscope.objectives(
            tmp_path / "c", methods=["grpo"], load_options=LoadOptions(trainer="none")
        ).params
    )


def capture_steps(directory, epsilons) -> list:
    """One capture part per step, step s recording TRL epsilon ``epsilons[s]`` (None: no
    settings); the part files in step order."""
    from ratioscope.data.trainer_settings import TrainerSettings

    gen = torch.Generator().manual_seed(2)
    for step, epsilon in enumerate(epsilons):
        settings = None
        if epsilon is not None:
            settings = TrainerSettings("trl", {"epsilon": epsilon, "num_generations": 4})
        old = -torch.rand(ROWS, WIDTH, generator=gen)
        with CaptureWriter(directory, trainer_settings=settings) as writer:
            writer.write(
                step, mask=torch.ones(ROWS, WIDTH, dtype=torch.bool),
                log_probs=old + 0.3 * torch.randn(ROWS, WIDTH, generator=gen),
                old_log_probs=old, advantages=torch.randn(ROWS, generator=gen),
                rewards=torch.rand(ROWS, generator=gen), group=torch.arange(ROWS) // 4,
            )  # fmt: skip
    return sorted(directory.rglob("*.pt"))


def settings_warnings(warnings) -> list[str]:
    return [w for w in warnings if w.startswith("trainer settings:")]


def test_files_recording_other_settings_are_named_once(tmp_path):
    files = capture_steps(tmp_path, [0.2, 0.3, 0.2, 0.3])
    report = ratioscope.analyze(tmp_path)
    (warning,) = settings_warnings(report.warnings)
    assert "2 file(s)" in warning and "in epsilon:" in warning
    assert str(files[1]) in warning and str(files[3]) in warning
    assert str(files[0]) not in warning.split("in epsilon:")[1]
    assert report.params["analysis"]["clip"] == [0.2, 0.2]  # the first file's
    # timeline: every step with the run's settings (the pooled report merges), one warning
    line = ratioscope.timeline(tmp_path)
    (timeline_warning,) = settings_warnings(line.warnings)
    assert timeline_warning == warning
    assert line.pooled.params["analysis"]["clip"] == [0.2, 0.2]
    result = ratioscope.objectives(tmp_path, methods=["grpo"])
    assert settings_warnings(result.warnings) == [warning]
    assert list(result.params["settings"]["grpo"]["clip"]) == [0.2, 0.2]
    # an option wins; the files still differ, and the warning still says so
    chosen = ratioscope.analyze(tmp_path, clip=(0.1, 0.1))
    assert chosen.params["analysis"]["clip"] == [0.1, 0.1]
    assert len(settings_warnings(chosen.warnings)) == 1
    # --trainer none: no settings in force, nothing to warn about
    assert settings_warnings(ratioscope.analyze(tmp_path, trainer="none").warnings) == []


def test_equal_settings_give_no_warning_and_a_first_file_without_says_so(tmp_path):
    capture_steps(tmp_path / "same", [0.2, 0.2])
    assert settings_warnings(ratioscope.analyze(tmp_path / "same").warnings) == []
    files = capture_steps(tmp_path / "late", [None, 0.3])
    (warning,) = settings_warnings(ratioscope.analyze(tmp_path / "late").warnings)
    assert "first file records none" in warning and str(files[1]) in warning
    line = ratioscope.timeline(tmp_path / "late")  # step 1's settings do not apply alone
    assert line.pooled.params["analysis"]["clip"] == [0.2, 0.28]
    assert settings_warnings(line.warnings) == [warning]


def test_recorded_settings_are_read_without_unpickling(tmp_path, monkeypatch):
    import pickle

    from ratioscope.data.trainer_settings import TrainerSettings, read_recorded
    from ratioscope.judgement.settings import recorded_text

    (path,) = capture_steps(tmp_path, [0.25])
    expected = read_recorded(path)

    def refuse(*args, **kwargs):
        raise AssertionError("unpickled")

    monkeypatch.setattr(pickle, "Unpickler", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    text = recorded_text(path)
    assert text is not None and json.loads(text)["settings"]["epsilon"] == 0.25
    assert TrainerSettings.from_json(text, source=expected.source) == expected


@pytest.mark.parametrize(
    ("changes", "on_policy"),
    [
        ({}, True),  # TRL's defaults: one generation per optimizer step
        ({"gradient_accumulation_steps": 4, "steps_per_generation": 2}, True),  # 2 per step
        ({"gradient_accumulation_steps": 4, "steps_per_generation": None}, True),  # None: 4
        ({"steps_per_generation": 4}, False),  # 4 optimizer steps per generation
        ({"gradient_accumulation_steps": 2, "num_iterations": 2, "steps_per_generation": 1}, True),
        ({"gradient_accumulation_steps": 2, "num_iterations": 2, "steps_per_generation": 2}, False),
        ({"gradient_accumulation_steps": None}, False),  # unknown: no claim
    ],
)
def test_trl_whole_step_on_policy(changes, on_policy):
    # TRL: gradient_accumulation_steps % (steps_per_generation x num_iterations) == 0
    settings = {"gradient_accumulation_steps": 1, "steps_per_generation": 1, "num_iterations": 1}
    trl = TrainerSettings("trl", {**settings, **changes}, source="recorded by the capture in f")
    assert (trl.whole_step_on_policy() is not None) == on_policy
    assert trl.recorded
    assert TrainerSettings("verl", trl.settings).whole_step_on_policy() is None
    assert not documented_defaults("trl").recorded


VERL_ON_POLICY = {
    "data.train_batch_size": 32, "actor.ppo_mini_batch_size": 32, "actor.ppo_epochs": 1,
    "actor.use_rollout_log_probs": False, "algorithm.rollout_correction.bypass_mode": False,
}  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "on_policy"),
    [
        ({}, True),  # one mini-batch (32 prompts of 32), one epoch
        ({"data.train_batch_size": 16}, True),  # fewer than a mini-batch (use_dynamic_bsz)
        ({"data.train_batch_size": 64}, False),  # two mini-batches: the second is off-policy
        ({"actor.ppo_epochs": 2}, False),  # the second epoch follows an update
        ({"algorithm.rollout_correction.bypass_mode": True}, False),  # old = rollout's
        ({"actor.use_rollout_log_probs": True}, False),  # fully async: old = rollout's
        ({"algorithm.rollout_correction.bypass_mode": None}, True),  # no such option
        ({"data.train_batch_size": None}, False),  # the actor's config alone: no claim
        ({"actor.ppo_epochs": None}, False),  # unknown: no claim, not verl's default 1
    ],
)
def test_verl_whole_step_on_policy(changes, on_policy):
    # verl: one mini-batch (train_batch_size <= ppo_mini_batch_size) and ppo_epochs == 1
    verl = TrainerSettings(
        "verl", {**VERL_ON_POLICY, **changes}, source="recorded by the capture in f"
    )
    reason = verl.whole_step_on_policy()
    assert (reason is not None) == on_policy
    if on_policy:
        assert f"train_batch_size={verl.settings['data.train_batch_size']}" in reason
    assert TrainerSettings("trl", verl.settings).whole_step_on_policy() is None
    assert TrainerSettings("openrlhf", verl.settings).whole_step_on_policy() is None


# ------------------------------------------------ settings handed down in the environment
# verl's driver has the top-level config, its workers (where the writer is) only the
# actor's: the driver puts the settings into RATIOSCOPE_TRAINER_SETTINGS, which Ray sets in
# every worker, and a writer made without trainer_settings records them

#: what verl_settings reads from on_policy_verl_config(), written out by hand
ON_POLICY_SETTINGS = {
    "actor.clip_ratio": 0.2,
    "actor.clip_ratio_low": 0.2,
    "actor.clip_ratio_high": 0.28,
    "actor.clip_ratio_c": None,
    "actor.loss_agg_mode": None,
    "actor.ppo_epochs": 1,
    "actor.use_kl_loss": None,
    "actor.kl_loss_coef": None,
    "actor.ppo_mini_batch_size": 32,
    "actor.use_rollout_log_probs": False,
    "data.max_response_length": 1024,
    "data.train_batch_size": 32,
    "rollout.n": 4,
    "algorithm.adv_estimator": "grpo",
    "algorithm.norm_adv_by_std_in_grpo": None,
    "algorithm.rollout_correction.bypass_mode": None,
    "rollout.temperature": None,
    "rollout.top_p": None,
    "rollout.top_k": None,
}


def on_policy_verl_config():
    config = verl_config(ppo_epochs=1, ppo_mini_batch_size=32, use_rollout_log_probs=False)
    config["data"]["train_batch_size"] = 32
    config["ray_kwargs"] = {"ray_init": {"num_cpus": None}}  # as verl's ppo_trainer.yaml
    return config


def recorded_settings(directory):
    (part,) = sorted(directory.rglob("*.pt"))
    return read_recorded(part)


def test_the_writer_records_the_settings_the_environment_hands_it(tmp_path, monkeypatch):
    document = {
        "framework": "verl",
        "settings": {"data.train_batch_size": 64, "actor.ppo_mini_batch_size": 64,
                     "actor.ppo_epochs": 1, "rollout.n": 8, "actor.loss_agg_mode": "a${b}"},
        "reward_functions": [["acc", 0.5]],
    }  # fmt: skip
    monkeypatch.setenv(SETTINGS_ENV, json.dumps(document))
    capture(tmp_path / "run")
    recorded = recorded_settings(tmp_path / "run")
    assert recorded.framework == "verl"
    assert dict(recorded.settings) == document["settings"]
    assert recorded.reward_functions == (("acc", 0.5),)
    assert recorded.recorded and recorded.group_size() == 8
    # blank or unset: no settings
    monkeypatch.setenv(SETTINGS_ENV, "  ")
    capture(tmp_path / "blank")
    assert recorded_settings(tmp_path / "blank") is None


def test_forward_verl_settings_reaches_a_worker_writer_whole(tmp_path, monkeypatch):
    config = on_policy_verl_config()
    config["ray_kwargs"]["ray_init"]["runtime_env"] = {"env_vars": {"NCCL_DEBUG": "INFO"}}
    forward_verl_settings(config)
    env_vars = config["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert set(env_vars) == {"NCCL_DEBUG", SETTINGS_ENV} and env_vars["NCCL_DEBUG"] == "INFO"
    assert config["ray_kwargs"]["ray_init"]["num_cpus"] is None
    # Ray sets the job's env_vars in the worker; the worker's writer gets no argument
    monkeypatch.setenv(SETTINGS_ENV, env_vars[SETTINGS_ENV])
    capture(tmp_path / "run")
    recorded = recorded_settings(tmp_path / "run")
    assert recorded.framework == "verl"
    assert dict(recorded.settings) == ON_POLICY_SETTINGS
    # so the verdict's whole-step rule fires, which the actor's config alone never does
    assert "train_batch_size=32 <= actor.ppo_mini_batch_size=32" in (
        recorded.whole_step_on_policy() or ""
    )
    actor_only = verl_settings(config["actor_rollout_ref"]["actor"])
    assert actor_only.settings["data.train_batch_size"] is None


def test_forward_verl_settings_into_verls_struct_mode_omegaconf(tmp_path, monkeypatch):
    omegaconf = pytest.importorskip("omegaconf")
    config = omegaconf.OmegaConf.create(on_policy_verl_config())
    config["algorithm"]["adv_estimator"] = "${data.max_response_length}x"  # to be resolved
    omegaconf.OmegaConf.set_struct(config, True)  # as Hydra hands it to main()
    with pytest.raises(omegaconf.errors.ConfigAttributeError):
        config.ray_kwargs.ray_init.runtime_env = {}  # verl's yaml has no such key
    forward_verl_settings(config)
    # what verl's run_ppo does with it (b178a3cd main_ppo.py 65-77), minus its defaults
    ray_init = config.ray_kwargs.get("ray_init", {})
    runtime_env = omegaconf.OmegaConf.merge({"env_vars": {}}, ray_init.get("runtime_env", {}))
    ray_init = omegaconf.OmegaConf.create({**ray_init, "runtime_env": runtime_env})
    kwargs = omegaconf.OmegaConf.to_container(ray_init)
    monkeypatch.setenv(SETTINGS_ENV, kwargs["runtime_env"]["env_vars"][SETTINGS_ENV])
    capture(tmp_path / "run")
    recorded = recorded_settings(tmp_path / "run")
    assert recorded.settings["algorithm.adv_estimator"] == "1024x"
    assert recorded.settings["data.train_batch_size"] == 32
    assert recorded.settings["actor.clip_ratio_high"] == 0.28
    # a $ in a value survives OmegaConf's interpolation as the text it was
    document = TrainerSettings("verl", {"actor.loss_agg_mode": "${x}"})
    config = omegaconf.OmegaConf.create({"env_vars": settings_env(document)})
    text = omegaconf.OmegaConf.to_container(config, resolve=True)["env_vars"][SETTINGS_ENV]
    assert json.loads(text)["settings"] == {"actor.loss_agg_mode": "${x}"}


def test_an_explicit_trainer_settings_argument_wins_over_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(SETTINGS_ENV, settings_env(verl_settings(verl_config()))[SETTINGS_ENV])
    trl = trl_settings(SimpleNamespace(args=SimpleNamespace(epsilon=0.3, num_generations=2)))
    capture(tmp_path / "run", trl)
    recorded = recorded_settings(tmp_path / "run")
    assert recorded.framework == "trl" and recorded.settings["epsilon"] == 0.3
    # not even read: a malformed variable does not stop a writer given its settings
    monkeypatch.setenv(SETTINGS_ENV, "{broken")
    capture(tmp_path / "again", trl)
    assert recorded_settings(tmp_path / "again").framework == "trl"


@pytest.mark.parametrize(
    "text",
    ['{"framework": "verl", "settings": {', '{"framework": "slime", "settings": {}}',
     '{"framework": "verl", "settings": [1]}', "[]", "verl"],
)  # fmt: skip
def test_malformed_settings_in_the_environment_stop_the_writer(tmp_path, monkeypatch, text):
    monkeypatch.setenv(SETTINGS_ENV, text)
    with pytest.raises(ValueError, match=f"the {SETTINGS_ENV} environment variable") as error:
        CaptureWriter(tmp_path / "run")
    assert "\n" not in str(error.value) and text[:20] in str(error.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_ray_hands_the_forwarded_settings_to_a_worker_with_its_own_env_vars(tmp_path):
    # verl's path without verl: run_ppo passes config.ray_kwargs.ray_init to ray.init;
    # RayWorkerGroup starts each worker with its own runtime_env env_vars (RANK, ...),
    # which Ray merges with the job's (verl b178a3cd single_controller/ray/base.py 603-640)
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a Ray instance is already running in this process")
    config = on_policy_verl_config()
    forward_verl_settings(config)
    ray_init = dict(config["ray_kwargs"]["ray_init"])
    env_vars = dict(ray_init.pop("runtime_env")["env_vars"])
    here = Path(__file__).resolve()  # the workers import ratioscope as here
    env_vars["PYTHONPATH"] = os.pathsep.join(
        [str(here.parents[1]), os.environ.get("PYTHONPATH", "")]
    )
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": env_vars})  # fmt: skip
    # this module travels to the worker by value: verl, when installed, brings a top-level
    # `tests` package of its own, under which the worker would look for it by name
    module = sys.modules[__name__]
    ray.cloudpickle.register_pickle_by_value(module)
    try:

        class Worker:
            def capture(self, directory: str) -> str:
                capture(directory)  # a CaptureWriter made without trainer_settings
                return os.environ["RANK"]

        actor = ray.remote(num_cpus=0)(Worker).options(runtime_env={"env_vars": {"RANK": "1"}})
        assert ray.get(actor.remote().capture.remote(str(tmp_path / "run"))) == "1"
    finally:
        ray.cloudpickle.unregister_pickle_by_value(module)
        ray.shutdown()
    assert dict(recorded_settings(tmp_path / "run").settings) == ON_POLICY_SETTINGS


@pytest.mark.parametrize(
    ("framework", "settings", "expected"),
    [
        ("trl", {"temperature": 0.7, "top_p": 0.9, "top_k": 0}, {"temperature": 0.7, "top_p": 0.9}),
        ("trl", {"temperature": 1.0, "top_p": 1.0, "top_k": None}, {}),
        (
            "verl",
            {"rollout.temperature": 1.0, "rollout.top_p": 1, "rollout.top_k": 50},
            {"top_k": 50},
        ),
        ("verl", {"rollout.top_k": -1}, {}),
        ("openrlhf", {"generate.temperature": 0.7}, {}),
    ],
)
def test_the_engines_sampling_settings_reach_the_analysis(framework, settings, expected):
    from ratioscope.data.params import AnalysisParams
    from ratioscope.data.trainer_settings import TrainerSettings, apply

    recorded = TrainerSettings(framework=framework, settings=settings)
    assert recorded.sampling() == expected
    params, applied = apply(AnalysisParams(), recorded, fixed=())
    for name in ("temperature", "top_p", "top_k"):
        assert getattr(params, name) == expected.get(name)
    # an option wins over the recorded value
    params, applied = apply(AnalysisParams(top_p=0.5), recorded, fixed=("top_p",))
    assert params.top_p == 0.5
    if "top_p" in expected:
        assert applied.sources["top_p"] == "option"
