"""Loaders: every framework layout and file type gives the same canonical tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from dumps import LAYOUTS, SUFFIXES, make_reference, write_canonical, write_layout

import ratioscope
from ratioscope.errors import DumpKeyError, ParameterError
from ratioscope.io.loaders import expand_paths


def _valid(tensor: torch.Tensor, mask: np.ndarray) -> np.ndarray:
    """Values at valid positions, row by row (layouts may pad to different widths)."""
    array = tensor.double().numpy()
    return np.concatenate([array[i, : int(mask[i].sum())] for i in range(mask.shape[0])])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_framework_layouts_load_to_the_same_canonical_tensors(tmp_path, layout):
    ref = make_reference(seed=1)
    batch = ratioscope.load(write_layout(ref, layout, tmp_path))
    assert batch.profile == layout
    lengths = ref.mask.sum(1)
    assert batch.lengths.tolist() == lengths.tolist()
    # slime dumps the old policy and the engine: z is the train/inference mismatch
    expected_z = ref.old_log_probs - ref.rollout_log_probs if layout == "slime" else ref.z
    np.testing.assert_allclose(
        _valid(batch.log_ratio, ref.mask), _valid(torch.tensor(expected_z), ref.mask), atol=1e-6
    )
    np.testing.assert_allclose(
        _valid(batch.advantages, ref.mask),
        _valid(torch.tensor(ref.advantages), ref.mask),
        atol=1e-6,
    )
    np.testing.assert_allclose(batch.rewards.numpy(), ref.rewards)
    assert batch.correct.tolist() == (ref.rewards > 0).tolist()
    # masked positions never carry the fixture's garbage
    assert float(batch.log_ratio[~batch.mask].abs().sum()) == 0.0


@pytest.mark.parametrize("layout", ["verl", "prime-rl"])
def test_group_labels_map_to_ids_in_order_of_first_appearance(tmp_path, layout):
    ref = make_reference(seed=2, rows=8, group_size=4)
    ref.group = ["b", "b", "a", "a", "b", "c", "c", "a"]
    batch = ratioscope.load(write_layout(ref, layout, tmp_path))
    assert batch.group.tolist() == [0, 0, 1, 1, 0, 2, 2, 1]
    assert batch.group_labels == ["b", "a", "c"]


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_file_types_with_canonical_keys(tmp_path, suffix):
    ref = make_reference(seed=3)
    batch = ratioscope.load(write_canonical(ref, suffix, tmp_path))
    assert batch.profile == "canonical"
    assert batch.num_tokens == int(ref.mask.sum())
    expected = ref.log_probs.astype(np.float32).astype(np.float64) - ref.old_log_probs.astype(
        np.float32
    ).astype(np.float64)
    np.testing.assert_allclose(
        _valid(batch.log_ratio, ref.mask), _valid(torch.tensor(expected), ref.mask), atol=1e-6
    )
    np.testing.assert_allclose(batch.rewards.numpy(), ref.rewards)


def test_prime_rl_prompt_tokens_are_dropped_so_position_zero_is_the_first_trained(tmp_path):
    ref = make_reference(seed=4)
    batch = ratioscope.load(write_layout(ref, "prime-rl", tmp_path))
    assert batch.padding == "left"
    assert bool(batch.mask[:, 0].all())
    np.testing.assert_array_equal(
        _valid(batch.token_ids, ref.mask), _valid(torch.tensor(ref.token_ids), ref.mask)
    )


def test_left_padded_rows_are_shifted_to_the_right():
    mask = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1]], dtype=torch.bool)
    z = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 10
    batch = ratioscope.TokenBatch.from_tensors({"mask": mask, "log_ratio": z})
    assert batch.padding == "left"
    expected_mask = [[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    assert batch.mask.int().tolist() == expected_mask
    expected = [[0.2, 0.3, 0, 0], [0.5, 0.6, 0.7, 0], [0.8, 0.9, 1.0, 1.1]]
    np.testing.assert_allclose(batch.log_ratio.numpy(), expected, atol=1e-7)


def test_sequence_advantages_are_broadcast_and_log_ratio_derived():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    lp = torch.tensor([[-1.0, -2.0, 9.0], [-0.5, -0.5, -0.5]])
    old = torch.tensor([[-1.5, -2.0, 9.0], [-0.5, -1.0, -0.25]])
    batch = ratioscope.TokenBatch.from_tensors(
        {"mask": mask, "log_probs": lp, "old_log_probs": old, "advantages": torch.tensor([2.0, -1])}
    )
    assert batch.advantages.tolist() == [[2.0, 2.0, 0.0], [-1.0, -1.0, -1.0]]
    np.testing.assert_allclose(batch.log_ratio.numpy(), [[0.5, 0.0, 0.0], [0.0, 0.5, -0.25]])


def test_map_patches_a_single_key_and_format_forces_a_profile(tmp_path):
    ref = make_reference(seed=5)
    torch.save(
        {
            "attention_mask": torch.tensor(ref.mask),
            "old_log_probs": torch.tensor(ref.old_log_probs),
            "log_probs": torch.tensor(ref.log_probs),
        },
        tmp_path / "custom.pt",
    )
    with pytest.raises(DumpKeyError, match=r"'mask'.*keys found: attention_mask"):
        ratioscope.load(tmp_path / "custom.pt")
    batch = ratioscope.load(tmp_path / "custom.pt", mapping={"mask": "attention_mask"})
    assert batch.num_tokens == int(ref.mask.sum())
    with pytest.raises(DumpKeyError, match="response_mask"):
        ratioscope.load(tmp_path / "custom.pt", format="verl")
    # a library error names the parameter; the CLI names --format (test_cli_errors)
    with pytest.raises(ParameterError, match=r"format must be one of auto, .*got 'deepspeed'"):
        ratioscope.load(tmp_path / "custom.pt", format="deepspeed")
    with pytest.raises(ParameterError, match="mapping names 'masks', which is not a canonical"):
        ratioscope.load(tmp_path / "custom.pt", mapping={"masks": "attention_mask"})


def test_a_directory_is_read_in_natural_order_and_concatenated(tmp_path):
    for step in (10, 2, 1):
        write_layout(make_reference(seed=step, rows=4), "verl", tmp_path, f"step_{step}")
    files = expand_paths([tmp_path])
    assert [f.name for f in files] == ["step_1.pt", "step_2.pt", "step_10.pt"]
    batch = ratioscope.load(tmp_path)
    assert batch.num_sequences == 12
    # groups of different files stay distinct
    assert batch.group.unique().numel() == 3
    globbed = expand_paths([str(tmp_path / "step_1*.pt")])
    assert [f.name for f in globbed] == ["step_1.pt", "step_10.pt"]


def test_nonfinite_mask_policy_masks_the_token_and_warns():
    mask = torch.ones(2, 3, dtype=torch.bool)
    z = torch.tensor([[0.1, float("nan"), 0.2], [0.0, 0.0, float("inf")]])
    batch = ratioscope.TokenBatch.from_tensors({"mask": mask, "log_ratio": z}, nonfinite="mask")
    assert batch.mask.tolist() == [[True, False, True], [True, True, False]]
    assert any("masked 2 token(s)" in w for w in batch.warnings)


def test_logits_whose_softmax_is_undefined_are_refused_or_masked():
    """NaN, +inf or every entry -inf at a valid token: refused (naming the key and the
    first position) or masked; a -inf entry alone (a token ruled out) and anything
    behind the mask are fine."""
    from ratioscope.errors import NonFiniteError

    mask = torch.tensor([[True, True, True], [True, True, False]])
    logits = torch.zeros(2, 3, 4)
    logits[0, 0, 1] = -float("inf")  # one entry ruled out: a defined softmax
    logits[1, 2] = float("nan")  # behind the mask
    tensors = {"mask": mask, "log_ratio": torch.zeros(2, 3), "token_ids": torch.zeros(2, 3)}
    tensors["token_ids"] = tensors["token_ids"].long()
    clean = ratioscope.TokenBatch.from_tensors({**tensors, "logits": logits})
    assert clean.mask.tolist() == mask.tolist()
    for row, column, bad in ((0, 2, float("nan")), (1, 1, float("inf"))):
        broken = logits.clone()
        broken[row, column, 3] = bad
        with pytest.raises(NonFiniteError, match=rf"'logits' has 1 .*\({row}, {column}\)"):
            ratioscope.TokenBatch.from_tensors({**tensors, "logits": broken})
    ruled_out = logits.clone()
    ruled_out[0, 1] = -float("inf")  # every entry -inf: no token could be drawn
    masked = ratioscope.TokenBatch.from_tensors(
        {**tensors, "ref_logits": ruled_out}, nonfinite="mask"
    )
    assert masked.mask.tolist() == [[True, False, True], [True, True, False]]
    assert any("masked 1 token(s) with non-finite 'ref_logits'" in w for w in masked.warnings)


def test_finiteness_check_takes_the_full_path_when_the_sum_is_not_finite():
    """The fast check (one sum) cannot decide on a sum that overflows or on a
    non-finite value behind the mask; both take the element-wise check, which finds
    nothing to mask there. Masked positions come out zeroed, NaN included."""
    mask = torch.tensor([[True, True, False], [True, True, True]])
    big = torch.tensor([[3e38, 3e38, 0.0], [3e38, 0.1, 0.2]])  # finite, sum overflows
    z = torch.tensor([[0.1, 0.2, float("nan")], [0.0, 0.3, -0.1]])  # NaN only if masked
    batch = ratioscope.TokenBatch.from_tensors(
        {"mask": mask, "log_ratio": z, "advantages": big}, nonfinite="error"
    )
    assert batch.mask.tolist() == mask.tolist()
    assert not any("masked" in w for w in batch.warnings)
    assert batch.log_ratio[0, 2].item() == 0.0
    assert torch.equal(batch.advantages[0], torch.tensor([3e38, 3e38, 0.0]))


def _finiteness_cases() -> dict[str, tuple[dict[str, torch.Tensor], str]]:
    """Dumps whose build takes each way through the finiteness check and the shift."""
    gen = torch.Generator().manual_seed(3)
    rows, length = 6, 9
    lengths = torch.tensor([9, 4, 0, 1, 7, 5])
    right = torch.arange(length)[None, :] < lengths[:, None]
    garbage = torch.full((rows, length), float("nan"))

    def tensors(mask: torch.Tensor) -> dict[str, torch.Tensor]:
        def token() -> torch.Tensor:
            return torch.where(mask, torch.randn(rows, length, generator=gen), garbage)

        return {
            "mask": mask,
            "log_probs": token(),
            "old_log_probs": token().double(),
            "advantages": token(),
            "entropy": token(),
            "token_ids": torch.where(mask, torch.arange(length) + 3, -1),
            "rewards": torch.tensor([1.0, 0.0, 1.0, 0.5, 0.0, 1.0]),
        }

    finite = tensors(right)
    nan_token = tensors(right)
    nan_token["advantages"][1, 2] = float("inf")
    nan_reward = tensors(right)
    nan_reward["rewards"][4] = float("nan")
    left = tensors(right.flip(1))
    return {
        "finite": (finite, "mask"),
        "non-finite token": (nan_token, "mask"),
        "non-finite token, error": (nan_token, "error"),
        "non-finite reward": (nan_reward, "mask"),
        "non-finite reward, error": (nan_reward, "error"),
        "left-padded": (left, "mask"),
    }


@pytest.mark.parametrize("case", list(_finiteness_cases()))
def test_the_one_read_derive_builds_the_batch_the_step_by_step_checks_build(case, monkeypatch):
    """derive_checked (finiteness counted while the masked positions are zeroed) gives
    the same batch, warnings and errors as the checks, shift and derive one after the
    other, which it hands over to where it cannot decide."""
    from ratioscope.data.batch import _Builder
    from ratioscope.errors import InputError

    tensors, policy = _finiteness_cases()[case]
    taken: list[bool] = []
    one_read = _Builder.derive_checked

    def spy(self, *args):
        result = one_read(self, *args)
        taken.append(result is not None)
        return result

    def build() -> ratioscope.TokenBatch | str:
        copies = {key: value.clone() for key, value in tensors.items()}
        try:
            return ratioscope.TokenBatch.from_tensors(copies, nonfinite=policy)
        except InputError as error:
            return str(error)

    monkeypatch.setattr(_Builder, "derive_checked", spy)
    fast = build()
    monkeypatch.setattr(_Builder, "derive_checked", lambda self, *args: None)
    slow = build()
    assert taken == [case in ("finite", "non-finite reward", "non-finite reward, error")]
    if isinstance(slow, str):
        assert fast == slow
        return
    assert isinstance(fast, ratioscope.TokenBatch)
    assert fast.warnings == slow.warnings and fast.padding == slow.padding
    for name in ("mask", "log_probs", "old_log_probs", "log_ratio", "advantages", "entropy",
                 "token_ids", "rewards", "correct"):  # fmt: skip
        got, want = getattr(fast, name), getattr(slow, name)
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=name)
        if got.is_floating_point():  # the zeros behind the mask are +0.0 in both
            assert torch.equal(got.signbit(), want.signbit()), name
    if case == "non-finite reward":
        assert not fast.mask[4].any() and not fast.log_probs[4].any()


def test_group_size_gives_consecutive_groups_to_files_without_ids(tmp_path):
    from ratioscope.errors import ParameterError
    from ratioscope.io.loaders import LoadOptions, load_file

    ref = make_reference(seed=6, rows=8)
    path = write_canonical(ref, ".pt", tmp_path)
    assert ratioscope.load(path).group is None
    batch = load_file(path, LoadOptions(group_size=4))
    assert batch.group.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    with pytest.raises(ParameterError, match=r"group_size 3 does not divide the 8 sequences of"):
        load_file(path, LoadOptions(group_size=3))
    # TRL shuffles the rows of its loss inputs: consecutive groups would be wrong groups
    trl = write_layout(ref, "trl", tmp_path)
    with pytest.raises(ParameterError, match=r"group_size assumes consecutive groups.*shuffle_seq"):
        load_file(trl, LoadOptions(group_size=4))
    # files with their own ids keep them
    verl = write_layout(ref, "verl", tmp_path)
    ids = load_file(verl, LoadOptions(group_size=2)).group
    assert ids.tolist() == ratioscope.load(verl).group.tolist()


def test_canonical_names_never_select_a_framework_layout(tmp_path):
    from ratioscope.data.batch import CANONICAL_KEYS
    from ratioscope.io.profiles import PROFILES

    for profile in PROFILES.values():
        assert not set(profile.signature) & set(CANONICAL_KEYS), profile.name
    ref = make_reference(seed=8)
    torch.save(
        {
            "mask": torch.tensor(ref.mask),
            "log_probs": torch.tensor(ref.log_probs),
            "old_log_probs": torch.tensor(ref.old_log_probs),
            "rollout_log_probs": torch.tensor(ref.rollout_log_probs),
        },
        tmp_path / "c.pt",
    )
    batch = ratioscope.load(tmp_path / "c.pt")
    assert batch.profile == "canonical"
    assert batch.key_map["old_log_probs"] == "old_log_probs"
    assert batch.key_map["rollout_log_probs"] == "rollout_log_probs"


def test_canonical_per_token_rewards_take_the_last_valid_value(tmp_path):
    import json

    path = tmp_path / "r.jsonl"
    rows = [
        {"mask": [1, 1, 1], "log_ratio": [0, 0, 0], "rewards": [1.0, 1.0, 1.0]},
        {"mask": [1, 1, 0], "log_ratio": [0, 0, 0], "rewards": [0.0, 2.0, 9.0]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert ratioscope.load(path).rewards.tolist() == [1.0, 2.0]


def test_missing_group_ids_and_null_integers_are_errors_not_values(tmp_path):
    import json

    import polars as pl

    from ratioscope.errors import InputError

    pl.DataFrame(
        {
            "mask": [[1, 1], [1, 1], [1, 1]],
            "log_ratio": [[0.0, 0.1], [0.0, 0.2], [0.1, 0.0]],
            "rewards": [1, None, 0],
            "group": [7, 7, None],
        }
    ).write_parquet(tmp_path / "g.parquet")
    with pytest.raises(
        InputError, match=r"'group' has no id for 1 sequence\(s\), the first at row 2"
    ):
        ratioscope.load(tmp_path / "g.parquet")
    path = tmp_path / "g.jsonl"
    rows = [{"mask": [1], "log_ratio": [0.0], "group": g} for g in ("a", None, "b")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match="first at row 1"):
        ratioscope.load(path)
    frame = pl.DataFrame({"mask": [[1], [1]], "log_ratio": [[0.0], [0.1]], "rewards": [None, 1]})
    frame.write_parquet(tmp_path / "r.parquet")
    with pytest.raises(InputError, match="non-finite"):
        ratioscope.load(tmp_path / "r.parquet")
    batch = ratioscope.load(tmp_path / "r.parquet", nonfinite="mask")
    assert batch.mask[:, 0].tolist() == [False, True]
    assert batch.rewards[1] == 1.0


def test_jsonl_errors_name_file_lines_and_partial_fields_are_dropped(tmp_path):
    import json

    from ratioscope.errors import JsonLineError

    good = {"mask": [1, 1], "log_ratio": [0.0, 0.1]}
    path = tmp_path / "blank.jsonl"
    path.write_text(
        "\n\n" + json.dumps(good) + "\n\n" + json.dumps({**good, "log_ratio": [0, "x"]}) + "\n"
    )
    with pytest.raises(JsonLineError, match="line 5"):
        ratioscope.load(path)
    path = tmp_path / "partial.jsonl"
    rows = [{**good, "entropy": [1.0, 1.0]}, good, {**good, "entropy": [0.5, 0.5]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    batch = ratioscope.load(path)
    assert batch.entropy is None and batch.num_tokens == 6
    assert any("dropped per-token field 'entropy': missing on line 2" in w for w in batch.warnings)


@pytest.mark.parametrize("found", [True, False])
def test_a_repeated_listing_lists_what_expand_paths_lists_look_after_look(tmp_path, found):
    """RepeatedListing (a watch's looks) gives expand_paths' files in its order, with
    each file's status, as files come, go, change kind and hide behind pickles."""
    import os

    from ratioscope.io.loaders import FoundPath, RepeatedListing

    run = tmp_path / "run"
    (run / "step_10").mkdir(parents=True)
    listing = RepeatedListing([run], shard_reports=True, found=found)

    def check() -> None:
        want = expand_paths([run], allow_empty=True, shard_reports=True)
        got = listing.look()
        assert [path for path, _ in got] == want
        for path, status in got:
            assert type(path) is (FoundPath if found else type(run))
            assert (status.st_size, status.st_mtime_ns) == (
                os.stat(path).st_size,
                os.stat(path).st_mtime_ns,
            )

    check()  # empty
    for name in ("step_2.pt", "step_10.pt", "step_1.safetensors", "notes.txt", ".step_3.pt.tmp"):
        (run / name).write_bytes(b"x")
        check()
    (run / "step_10" / "rank_0.json").write_text("{}")  # a shard report
    (run / "step_10" / "rank_1.json").write_text("{}")
    check()
    (run / "folded").symlink_to(run / "step_10", target_is_directory=True)  # a linked folder
    (run / "step_10" / "loop").symlink_to(run, target_is_directory=True)  # a loop
    check()
    (run / "step_3.pkl").write_bytes(b"x")  # pickles are left out beside other dumps
    check()
    for name in ("step_2.pt", "step_10.pt", "step_1.safetensors"):
        (run / name).unlink()
        check()  # ... and listed when they are all there is
    (run / "step_4.pt").mkdir()  # a folder with a dump's suffix is no file
    (run / "step_3.pkl").unlink()
    (run / "step_3.pkl").mkdir()
    check()
    (run / "step_4.pt").rmdir()
    (run / "step_4.pt").write_bytes(b"xy")  # the same name, a file again
    (run / "dangling.pt").symlink_to(run / "nowhere.pt")
    os.mkfifo(run / "step_5.pt")  # not a regular file: left out
    check()
    plain = tmp_path / "step_7.pt"
    plain.write_bytes(b"x")
    for paths in ([plain], [run, plain], [str(run / "step_*.pt")]):  # expand_paths' way
        again = RepeatedListing(paths, shard_reports=True, found=found)
        want = expand_paths(paths, allow_empty=True, shard_reports=True)
        assert [path for path, _ in again.look()] == [p if found else Path(p) for p in want]


def _os_walk_names(directory: Path) -> list[tuple[str, str]]:
    """The reference walk: (folder, name) of every file os.walk lists through links to
    folders, each real folder entered once."""
    import os

    entered: set[tuple[int, int]] = set()
    found = []
    for root, folders, names in os.walk(directory, followlinks=True):
        try:
            status = os.stat(root)
        except OSError:  # gone while walking
            folders[:] = []
            continue
        identity = (status.st_dev, status.st_ino)
        if identity in entered:
            folders[:] = []
            continue
        entered.add(identity)
        found.extend((root, name) for name in names)
    return found


def _run_of_folders(run: Path) -> None:
    """Step folders with a file each, a nested folder, a link to a folder, a loop and
    a dangling link: the kinds of entry a walk meets."""
    for step in (1, 2, 10):
        (run / f"step_{step}").mkdir(parents=True)
        (run / f"step_{step}" / "rank_0.pt").write_bytes(b"x")
    (run / "step_2" / "ranks" / "deeper").mkdir(parents=True)
    (run / "step_2" / "ranks" / "rank_1.pt").write_bytes(b"x")
    (run / "linked").symlink_to(run / "step_10", target_is_directory=True)
    (run / "step_1" / "loop").symlink_to(run, target_is_directory=True)
    (run / "step_1" / "dangling.pt").symlink_to(run / "nowhere.pt")


def test_folder_listings_walk_as_os_walk_look_after_look(tmp_path):
    """FolderListings (a watch's walk, folders' listings kept) yields what os.walk
    yields, in its order, as files and folders come, go and change, with the kept
    listings in use (a clock ahead of the folders' times)."""
    import os
    import shutil
    import time

    from ratioscope.io.loaders import FolderListings, walk_files

    run = tmp_path / "run"
    _run_of_folders(run)
    listings = FolderListings(clock=lambda: time.time_ns() + 10**10)

    def check() -> None:
        want = _os_walk_names(run)
        assert walk_files(run) == [Path(root) / name for root, name in want]
        assert list(listings.names(run)) == want
        assert list(listings.names(run)) == want  # from the kept listings

    check()
    (run / "step_1" / "rank_1.pt").write_bytes(b"x")  # a file comes to a listed folder
    check()
    (run / "step_2" / "ranks" / "rank_1.pt").unlink()  # ... and goes from a deeper one
    check()
    (run / "step_2" / "ranks" / "deeper" / "rank_2.pt").write_bytes(b"x")
    check()
    (run / "linked").unlink()  # a link to a folder pointed elsewhere
    (run / "linked").symlink_to(run / "step_2", target_is_directory=True)
    check()
    shutil.rmtree(run / "step_10")  # a folder gone, and the same name a file
    (run / "step_10").write_bytes(b"x")
    check()
    (run / "step_10").unlink()  # ... and a folder again, with other files
    (run / "step_10").mkdir()
    (run / "step_10" / "rank_3.pt").write_bytes(b"x")
    check()
    os.rename(run / "step_1", run / "step_11")  # a folder renamed
    check()


def test_folder_listings_list_again_only_the_folders_that_changed(tmp_path, monkeypatch):
    """A folder's listing is kept while its times are unchanged and more than the
    margin old; the directory itself is listed at every walk, and every folder again
    once ``full_s`` has passed."""
    import os
    import time

    from ratioscope.io import loaders

    run = tmp_path / "run"
    _run_of_folders(run)
    listed: list[str] = []
    real = loaders._list_folder

    def counting(root: str) -> tuple[list[str], list[str], bool]:
        listed.append(root)
        return real(root)

    monkeypatch.setattr(loaders, "_list_folder", counting)
    ahead = [0]
    start = time.time_ns()
    listings = loaders.FolderListings(margin_s=2.0, full_s=60.0, clock=lambda: start + ahead[0])

    def walk() -> set[str]:
        listed.clear()
        assert list(listings.names(run)) == _os_walk_names(run)
        return {str(Path(root).relative_to(run)) for root in listed}

    hour_ago = start - 3600 * 10**9  # a writer that sets a folder's mtime back
    os.utime(run / "step_1", ns=(hour_ago, hour_ago))  # (its ctime is now: not settled)
    every = walk()  # the first walk lists every folder, once each
    assert len(listed) == len(every)
    assert every - {"step_10", "linked"} == {
        ".", "step_1", "step_2", "step_2/ranks", "step_2/ranks/deeper"
    }  # fmt: skip
    assert len(every & {"step_10", "linked"}) == 1  # one folder, two names: entered once
    assert walk() == every  # the folders' times are within the margin: listed again
    ahead[0] = 10**10  # ten seconds on: their listings are kept
    assert walk() == every  # (kept as this walk lists them)
    assert walk() == {"."}
    (run / "step_2" / "ranks" / "rank_2.pt").write_bytes(b"x")  # that folder's times change
    assert walk() == {".", "step_2/ranks"}
    assert walk() == {"."}  # its new times are more than the margin behind the clock
    ahead[0] = 75 * 10**9  # a minute on from the first walk: every folder again
    assert walk() == every
    assert walk() == {"."}
