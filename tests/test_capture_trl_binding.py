"""The TRL capture reads ``compute_entropy`` by name, whatever the override's signature.

No TRL needed: the classes here have TRL 1.16's signature of
``_get_per_token_logps_and_entropies`` (model, input_ids, attention_mask, logits_to_keep,
batch_size=None, compute_entropy=False, ...) and overrides of it as users write them.
"""

from __future__ import annotations

import pytest
import torch

from ratioscope.capture.trl import (
    IncompatibleTrainerError,
    RatioscopeCaptureMixin,
    _asks_entropy,
    check_trainer_class,
)


class Base:
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list): ...
    def _generate_and_score_completions(self, inputs): ...
    def _compute_loss(self, model, inputs): ...

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
        compute_entropy=False, compute_aux_loss=False,
    ): ...  # fmt: skip


class Positional(Base):
    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
        compute_entropy=False, **kw,
    ):  # fmt: skip
        return super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, **kw
        )


class KeywordOnly(Base):
    # the override of the issue: compute_entropy after *a
    def _get_per_token_logps_and_entropies(self, *a, compute_entropy=False, **kw):
        return super()._get_per_token_logps_and_entropies(*a, compute_entropy=compute_entropy, **kw)


class CatchAll(Base):
    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        return super()._get_per_token_logps_and_entropies(*args, **kwargs)


class CatchAllOverKeywordOnly(KeywordOnly):
    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        return super()._get_per_token_logps_and_entropies(*args, **kwargs)


TENSORS = (object(), torch.ones(2, 3), torch.ones(2, 3), 3)  # model, ids, mask, keep


def captured(base: type):
    return type("Captured", (RatioscopeCaptureMixin, base), {})


@pytest.mark.parametrize("base", [Base, Positional, KeywordOnly, CatchAll, CatchAllOverKeywordOnly])
def test_compute_entropy_is_read_by_name(base):
    check_trainer_class(captured(base))
    trainer = captured(base).__new__(captured(base))
    # the loss call of TRL 1.16: compute_entropy=True by keyword
    assert _asks_entropy(trainer, TENSORS, {"compute_entropy": True, "batch_size": 2}) is True
    # the old/ref log-prob calls: no compute_entropy (its default False)
    assert _asks_entropy(trainer, TENSORS, {"batch_size": 2}) is False
    assert _asks_entropy(trainer, (*TENSORS, 2), {}) is False
    assert _asks_entropy(trainer, TENSORS, {"compute_entropy": False}) is False


@pytest.mark.parametrize("base", [Base, Positional])
def test_a_positional_compute_entropy_is_read_where_the_signature_puts_it(base):
    trainer = captured(base).__new__(captured(base))
    assert _asks_entropy(trainer, (*TENSORS, 2, True), {}) is True
    assert _asks_entropy(trainer, (*TENSORS, 2, False), {}) is False


def test_a_tensor_is_never_taken_for_the_flag():
    trainer = captured(KeywordOnly).__new__(captured(KeywordOnly))
    # the positional arguments (tensors) go to *a: compute_entropy keeps its default
    assert _asks_entropy(trainer, (*TENSORS, torch.ones(2), torch.ones(2)), {}) is False


def test_an_override_without_compute_entropy_or_kwargs_is_refused():
    class NoFlag(Base):
        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, keep):
            return None

    with pytest.raises(IncompatibleTrainerError, match="compute_entropy"):
        check_trainer_class(NoFlag)
