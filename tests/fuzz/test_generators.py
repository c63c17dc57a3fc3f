"""Hypothesis generators, one per reader: files an attacker (or a broken writer) could
hand to ratioscope, each run contained (tests/fuzz/harness.py) and held to the promise:
exit 0 or 2, one line, no traceback, bounded time and memory, no stray file.

The default run takes a few examples of each; ``RATIOSCOPE_FUZZ=long`` a few hundred
(tests/fuzz/conftest.py).
"""

from __future__ import annotations

import io
import json
import pickle
import struct
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fuzz import files
from fuzz.harness import promise
from fuzz.profiles import FUZZ
from hypothesis import assume, given
from hypothesis import strategies as st

pytestmark = pytest.mark.fuzz

ROOT = Path(__file__).resolve().parents[2]
KEYS = [
    "mask",
    "old_log_probs",
    "log_probs",
    "advantages",
    "rewards",
    "group",
    "entropy",
    "token_ids",
    "ref_log_probs",
    "rollout_log_probs",
    "correct",
    "minibatch",
]
#: what a generated case may cost (a legitimate tiny file analyses in a second or two)
SECONDS = 60.0


def _case(name: str, data: bytes, commands: list[list[str]], **options: Any) -> None:
    """Write ``data`` as ``name`` in a fresh folder and hold each command to the promise."""
    with tempfile.TemporaryDirectory() as folder:
        directory = Path(folder)
        (directory / name).write_bytes(data)
        for command in commands:
            promise(command, directory, seconds=SECONDS, **options)


#: the commands that read a dump: each generated file is given to one of them
dump_commands = st.sampled_from(["analyze", "info"])


def _analyze(name: str, command: str = "analyze") -> list[list[str]]:
    return [["analyze", name, "-q"] if command == "analyze" else ["info", name]]


# ---------------------------------------------------------------------- values
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=5), st.dictionaries(st.text(max_size=6), children, max_size=5)
    )


json_values = st.recursive(json_scalars, _containers, max_leaves=20)
small_shapes = st.lists(st.integers(min_value=0, max_value=6), min_size=0, max_size=3)
wild_ints = st.one_of(
    st.integers(min_value=-3, max_value=8),
    st.sampled_from([2**31, 2**62, 2**63 - 1, 2**64, 10**12]),
)
wild_shapes = st.one_of(
    small_shapes,
    st.lists(wild_ints, max_size=3),
    json_scalars,
    st.lists(json_scalars, max_size=3),
)


def _mutate(data: bytes, flips: list[tuple[int, int]]) -> bytes:
    """``data`` with bytes at (position modulo its length) replaced."""
    out = bytearray(data)
    for position, value in flips:
        if out:
            out[position % len(out)] = value
    return bytes(out)


byte_flips = st.lists(
    st.tuples(st.integers(min_value=0, max_value=1 << 20), st.integers(0, 255)), max_size=6
)


# ------------------------------------------------------------------ safetensors
@st.composite
def safetensors_files(draw: st.DrawFn) -> bytes:
    header: dict[str, Any] = {}
    data = b""
    for key in draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True)):
        dtype = draw(st.sampled_from(["BOOL", "F32", "F64", "I64", "U8", "F16", "BF16", "X9"]))
        shape = draw(st.one_of(st.just([2, 3]), small_shapes, wild_shapes))
        size = draw(st.integers(min_value=0, max_value=64))
        raw = draw(st.binary(min_size=size, max_size=size))
        offsets = draw(
            st.one_of(st.just([len(data), len(data) + len(raw)]), st.lists(wild_ints, max_size=3))
        )
        header[key] = {"dtype": dtype, "shape": shape, "data_offsets": offsets}
        data += raw
    text = json.dumps(header).encode()
    if draw(st.booleans()):
        text = _mutate(text, draw(byte_flips))
    length = draw(st.one_of(st.just(len(text)), wild_ints.filter(lambda n: 0 <= n < 2**64)))
    return struct.pack("<Q", length) + text + data


@FUZZ
@given(data=safetensors_files(), streamed=st.booleans(), command=dump_commands)
def test_safetensors(data: bytes, streamed: bool, command: str) -> None:
    env = {"RATIOSCOPE_STREAM_BYTES": "1"} if streamed else {}
    _case("f.safetensors", data, _analyze("f.safetensors", command), env=env)


# ------------------------------------------------------------------------- npz
numpy_dtypes = st.sampled_from(
    ["|b1", "<f4", ">f4", "<f8", "<i8", "|u1", "<U3", "|O", "<c8", "<f2"]
)


@st.composite
def npz_files(draw: st.DrawFn) -> bytes:
    buffer = io.BytesIO()
    compression = draw(st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]))
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        for key in draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True)):
            shape = draw(st.one_of(st.just((2, 3)), small_shapes.map(tuple)))
            dtype = draw(numpy_dtypes)
            if draw(st.booleans()) and dtype != "|O":
                count = int(np.prod(shape)) if shape else 1
                raw = draw(
                    st.binary(
                        min_size=count * np.dtype(dtype).itemsize,
                        max_size=count * np.dtype(dtype).itemsize,
                    )
                )
                member = files.npy_bytes(
                    {"descr": dtype, "fortran_order": draw(st.booleans()), "shape": shape}, raw
                )
            else:
                header = {
                    "descr": draw(st.one_of(numpy_dtypes, st.text(max_size=6))),
                    "fortran_order": False,
                    "shape": draw(wild_shapes),
                }
                member = files.npy_bytes(header, draw(st.binary(max_size=64)))
            if draw(st.integers(0, 9)) == 0:
                member = _mutate(member, draw(byte_flips))
            archive.writestr(f"{key}.npy", member)
    return buffer.getvalue()


@FUZZ
@given(data=npz_files(), streamed=st.booleans(), command=dump_commands)
def test_npz(data: bytes, streamed: bool, command: str) -> None:
    env = {"RATIOSCOPE_STREAM_BYTES": "1"} if streamed else {}
    _case("f.npz", data, _analyze("f.npz", command), env=env)


# -------------------------------------------------------------------------- .pt
@st.composite
def tensors(draw: st.DrawFn) -> Any:
    dtype = draw(
        st.sampled_from(
            [torch.bool, torch.float32, torch.float64, torch.int64, torch.uint8, torch.float16]
        )
    )
    shape = draw(st.lists(st.integers(0, 5), min_size=0, max_size=3))
    tensor = torch.from_numpy(
        np.frombuffer(bytes(draw(st.binary(min_size=64, max_size=64))) * 16, dtype=np.uint8).copy()
    )
    count = int(np.prod(shape)) if shape else 1
    raw = tensor[: count * torch.empty((), dtype=dtype).element_size()]
    value = raw.view(dtype).reshape(shape)
    kind = draw(st.integers(0, 4))
    if kind == 1 and value.dim() >= 1 and value.numel():
        value = value.reshape(-1)[:1].expand(draw(st.integers(1, 16)), draw(st.integers(1, 512)))
    elif kind == 2:
        value = [value.reshape(-1) for _ in range(draw(st.integers(0, 3)))]
    elif kind == 3:
        value = draw(json_values)
    return value


@st.composite
def pt_files(draw: st.DrawFn) -> bytes:
    content = {
        key: draw(tensors())
        for key in draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True))
    }
    if draw(st.booleans()):
        content = {"rollout_data": content}
    buffer = io.BytesIO()
    torch.save(content, buffer)
    data = buffer.getvalue()
    mode = draw(st.integers(0, 3))
    if mode == 1:
        data = _mutate(data, draw(byte_flips))
    elif mode == 2:  # the same members, deflated
        source = zipfile.ZipFile(io.BytesIO(data))
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as target:
            for info in source.infolist():
                target.writestr(info.filename, source.read(info))
        data = out.getvalue()
    return data


@FUZZ
@given(data=pt_files(), command=dump_commands)
def test_pt(data: bytes, command: str) -> None:
    _case("f.pt", data, _analyze("f.pt", command))


# ---------------------------------------------------------------------- pickles
opcodes = st.sampled_from(
    [
        b"(",
        b")",
        b"]",
        b"}",
        b"a",
        b"e",
        b"s",
        b"u",
        b"t",
        b"0",
        b"1",
        b"2",
        b"N",
        b"\x88",
        b"\x89",
        b"K\x05",
        b"J\xff\xff\xff\x7f",
        b"q\x00",
        b"h\x00",
        b"q\x01",
        b"h\x01",
        b"\x85",
        b"\x86",
        b"\x87",
        b"R",
        b"b",
        b"X\x03\x00\x00\x00abc",
        b"C\x02ab",
        b"ctorch\ndevice\n",
        b"cos\nsystem\n",
        files.skyrl_global(b"TensorFormat"),
        files.skyrl_global(b"TrainingInputBatch"),
        files.skyrl_global(b"_rebuild_tensor_batch"),
        b"\x80\x04",
        b"\x95\x00\x00\x00\x00\x00\x00\x00\x00",
        b"P",
        b"Q",
        b"\x8c\x01a",
        b"\x94",
    ]
)


@FUZZ
@given(body=st.lists(opcodes, max_size=40))
def test_pickle_opcodes(body: list[bytes]) -> None:
    data = files.skyrl_bytes(b"".join(body))
    _case("global_step_1_training_input.pkl", data, _analyze("global_step_1_training_input.pkl"))


@st.composite
def skyrl_states(draw: st.DrawFn) -> dict[str, Any]:
    state: dict[str, Any] = files.skyrl_state(
        rows=draw(st.integers(1, 4)), width=draw(st.integers(1, 5))
    )
    for _ in range(draw(st.integers(1, 4))):
        target = draw(st.sampled_from(["tensor", "metadata", "batch"]))
        if target == "tensor":
            tensors = sorted(k for k, v in state["batch_dict"].items() if isinstance(v, dict))
            if not tensors:
                continue
            encoded = state["batch_dict"][draw(st.sampled_from(tensors))]
            field = draw(st.sampled_from(["dtype", "shape", "data", "format"]))
            encoded[field] = draw(
                st.one_of(
                    json_values,
                    wild_shapes,
                    st.binary(max_size=40),
                    st.sampled_from(["<f4", ">f8", "garbage", "torch", "|b1", "<U4"]),
                )
            )
        elif target == "metadata":
            key = draw(st.sampled_from(["pad_size", "policy_prompt_boundaries", "other"]))
            state["metadata"][key] = draw(
                st.one_of(
                    json_values, wild_ints, st.lists(st.lists(wild_ints, max_size=3), max_size=4)
                )
            )
        else:
            state["batch_dict"][draw(st.sampled_from([*KEYS, "loss_mask"]))] = draw(json_values)
    return state


@FUZZ
@given(state=skyrl_states())
def test_skyrl_payloads(state: dict[str, Any]) -> None:
    try:
        opcodes_of_state = files.pickled(state)
    except (pickle.PicklingError, RecursionError, TypeError):
        assume(False)
    _case(
        "global_step_1_training_input.pkl",
        files.skyrl_bytes(opcodes_of_state),
        _analyze("global_step_1_training_input.pkl"),
    )


# ----------------------------------------------------------------------- parquet
@st.composite
def parquet_files(draw: st.DrawFn) -> bytes:
    import polars as pl

    rows = draw(st.integers(0, 5))
    columns: dict[str, Any] = {}
    for key in draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True)):
        kind = draw(st.sampled_from(["floats", "bools", "ints", "scalar", "text", "nested"]))
        if kind in ("floats", "bools", "ints"):
            element = {
                "floats": st.floats(width=32) | st.none(),
                "bools": st.booleans() | st.none(),
                "ints": st.integers(-(2**63), 2**63 - 1) | st.none(),
            }[kind]
            columns[key] = draw(
                st.lists(st.lists(element, max_size=6) | st.none(), min_size=rows, max_size=rows)
            )
        elif kind == "scalar":
            columns[key] = draw(st.lists(st.floats() | st.none(), min_size=rows, max_size=rows))
        elif kind == "text":
            columns[key] = draw(
                st.lists(st.text(max_size=4) | st.none(), min_size=rows, max_size=rows)
            )
        else:
            columns[key] = draw(
                st.lists(
                    st.lists(st.lists(st.integers(0, 3), max_size=2), max_size=2),
                    min_size=rows,
                    max_size=rows,
                )
            )
    try:
        frame = pl.DataFrame(columns, strict=False)
    except Exception:  # a mix polars will not build: not a file anyone could write
        assume(False)
    buffer = io.BytesIO()
    frame.write_parquet(buffer)
    data = buffer.getvalue()
    if draw(st.integers(0, 4)) == 0:
        data = _mutate(data, draw(byte_flips))
    return data


@FUZZ
@given(data=parquet_files(), streamed=st.booleans(), command=dump_commands)
def test_parquet(data: bytes, streamed: bool, command: str) -> None:
    env = {"RATIOSCOPE_STREAM_BYTES": "1"} if streamed else {}
    _case("f.parquet", data, _analyze("f.parquet", command), env=env)


# ------------------------------------------------------------------------ jsonl
@st.composite
def jsonl_files(draw: st.DrawFn) -> bytes:
    lines = []
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.integers(0, 5)) == 0:
            lines.append(draw(st.text(max_size=20)))
            continue
        record = {
            key: draw(
                st.one_of(
                    st.lists(st.floats() | st.booleans() | st.integers() | st.none(), max_size=5),
                    json_values,
                )
            )
            for key in draw(st.lists(st.sampled_from(KEYS), max_size=4, unique=True))
        }
        lines.append(json.dumps(record))
    return ("\n".join(lines) + draw(st.sampled_from(["", "\n", "\n\n"]))).encode(
        "utf-8", "surrogatepass"
    )


@FUZZ
@given(data=jsonl_files(), streamed=st.booleans(), command=dump_commands)
def test_jsonl(data: bytes, streamed: bool, command: str) -> None:
    env = {"RATIOSCOPE_STREAM_BYTES": "1"} if streamed else {}
    _case("f.jsonl", data, _analyze("f.jsonl", command), env=env)


# -------------------------------------------------------------- samples files
@st.composite
def samples_files(draw: st.DrawFn) -> bytes:
    fields = ["problem_id", "response", "correct", "method", "sample_index", "answer", "score"]
    lines = []
    for _ in range(draw(st.integers(0, 6))):
        record = {
            key: draw(st.one_of(json_scalars, st.sampled_from(["a", "b", 0, 1, True])))
            for key in draw(st.lists(st.sampled_from(fields), max_size=6, unique=True))
        }
        lines.append(json.dumps(record))
    return "\n".join(lines).encode()


@FUZZ
@given(data=samples_files())
def test_samples(data: bytes) -> None:
    _case("s.jsonl", data, [["eval-passk", "s.jsonl", "-q"], ["eval-ucc", "s.jsonl", "-q"]])


# ------------------------------------------------------ report JSON and state
def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside a JSON document."""
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:3]):
            out += _paths(item, (*prefix, index))
    return out


@pytest.fixture(scope="module")
def report_document(report: Path) -> dict[str, Any]:
    return json.loads(report.read_text())


@pytest.fixture(scope="module")
def state_paths(report_document: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [p for p in _paths(report_document) if p]


@FUZZ
@given(data=st.data())
def test_report_state(
    report_document: dict[str, Any], state_paths: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    document = json.loads(json.dumps(report_document))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(state_paths))
        target = document
        try:
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = data.draw(json_values)
        except (KeyError, IndexError, TypeError):
            continue
    document["inputs"] = (
        [{**item, "path": "elsewhere.pt"} for item in document.get("inputs", [])]
        if isinstance(document.get("inputs"), list)
        and all(isinstance(i, dict) for i in document["inputs"])
        else document.get("inputs")
    )
    with tempfile.TemporaryDirectory() as folder:
        directory = Path(folder)
        (directory / "a.json").write_text(json.dumps(report_document))
        (directory / "b.json").write_text(json.dumps(document))
        for command in (
            ["merge", "a.json", "b.json", "--out", "m.json"],
            ["check", "b.json", "--rules", str(ROOT / "examples" / "rules.toml")],
        ):
            written = ["m.json"] if "merge" in command else []
            promise(command, directory, seconds=SECONDS, written=written, codes=(0, 1, 2))


# ------------------------------------------------------------------ TOML rules
toml_values = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1).map(str),
    st.floats(allow_nan=True).map(lambda x: repr(x).replace("inf", "inf").replace("nan", "nan")),
    st.text(max_size=8).map(json.dumps),
    st.sampled_from(["true", "[1, 2]", "{a = 1}", '"ratios.kalman.switch_frequency"', "[[[]]]"]),
)


@st.composite
def rules_files(draw: st.DrawFn) -> bytes:
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        parts.append("[[rule]]")
        for key in draw(
            st.lists(
                st.sampled_from(
                    [
                        "name",
                        "path",
                        "min",
                        "max",
                        "max_increase",
                        "max_decrease_pct",
                        "description",
                        "slope_max",
                        "steps",
                        "other",
                    ]
                ),
                max_size=5,
                unique=True,
            )
        ):
            parts.append(f"{key} = {draw(toml_values)}")
    text = "\n".join(parts)
    if draw(st.integers(0, 4)) == 0:
        text += draw(st.text(max_size=20))
    return text.encode("utf-8", "surrogatepass")


@FUZZ
@given(data=rules_files())
def test_rules(report: Path, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        directory = Path(folder)
        (directory / "run.json").write_bytes(report.read_bytes())
        (directory / "r.toml").write_bytes(data)
        promise(
            ["check", "run.json", "--rules", "r.toml"], directory, seconds=SECONDS, codes=(0, 1, 2)
        )
