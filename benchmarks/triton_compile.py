"""The Triton kernels compiled for GPUs, on a machine without one.

Triton compiles ahead of time for a stated target: source, Triton IR, LLVM IR, PTX and
the machine code (``ptxas``, which the Triton wheel carries), with no device involved.
This script compiles each kernel of ``ratioscope/functional/_triton_source.py`` in every
variant the package launches (its compile-time flags, float32 and float64 inputs) for an
A100 (sm_80) and an H100 (sm_90), and prints for each the registers a thread uses, the
bytes it spills to local memory and the shared memory a program takes (from ``ptxas
-v``). It exits 1 when a variant does not compile or spills: a kernel that spills reads
and writes local memory beside its data, which would cost it its share of the bandwidth.
What it cannot say: how fast the machine code runs (``benchmarks/gpu_check.sh`` times
it on a GPU).

Run it without ``TRITON_INTERPRET`` (the interpreter replaces the compiler):

    python benchmarks/triton_compile.py
    python benchmarks/triton_compile.py --targets 90 --kernels kalman_scan
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: the GPUs compiled for: compute capability -> a name
TARGETS = {80: "A100 (sm_80)", 90: "H100 (sm_90)"}
#: the pointer arguments' element types, by name (a name missing here fails loudly, so a
#: kernel's new argument is typed here before it is checked)
POINTERS = {
    "mask_ptr": "*u8", "keep_ptr": "*fp64", "gain_ptr": "*fp64", "initial_ptr": "*fp64",
    "start_ptr": "*fp64", "offset_ptr": "*i32", "end_keep_ptr": "*fp64",
    "end_state_ptr": "*fp64", "bounds_ptr": "*fp64", "counts_ptr": "*i32",
    "partial_ptr": "*fp64", "row_sums_ptr": "*fp64", "clipped_ptr": "*i64",
    "sums_ptr": "*fp64", "correct_ptr": "*u8", "slots_ptr": "*fp64",
    "row_abs_ptr": "*fp64", "row_tokens_ptr": "*i64", "rows_ptr": "*fp64",
    "tops_ptr": "*fp64", "terms_ptr": "*fp64", "scope_ptr": "*i64", "table_ptr": "*fp64",
    "constants_ptr": "*fp64", "auto_ptr": "*fp64", "lengths_ptr": "*i64", "widths_ptr": "*fp64",
    "band_ptr": "*fp64", "energy_ptr": "*fp64", "stats_ptr": "*fp64", "centred_ptr": "*fp64",
    "sign_counts_ptr": "*i64", "state_counts_ptr": "*i64", "histogram_ptr": "*i64",
    "changes_ptr": "*i64", "off_ptr": "*i64", "quadrants_ptr": "*i64", "kl_rows_ptr": "*i64",
    "first_ptr": "*fp64", "second_ptr": "*fp64", "totals_ptr": "*fp64", "kept_ptr": "*u8",
    "cell_counts_ptr": "*i64",
}  # fmt: skip
#: the pointers of the input's dtype (and the Kalman filter's output)
FLOAT_POINTERS = (
    "z_ptr", "out_ptr", "signal_ptr", "adv_ptr", "values_ptr", "entropy_ptr", "old_ptr",
    "logp_ptr", "ref_ptr",
)  # fmt: skip


def variants() -> list[tuple[str, str, dict[str, Any], int]]:
    """(kernel, input float type, compile-time flags, warps) of every launch the package
    makes (``_triton_kernels``'s wrappers), with their block sizes and warps."""
    from ratioscope.functional import _triton_kernels as tk
    from ratioscope.functional import histogram as bins_module

    bins = tk._BIN_CONSTANTS
    out: list[tuple[str, str, dict[str, Any], int]] = []
    passes = {  # one chunk a row; the first pass of rows in chunks; their second pass
        "one": {"HAS_START": False, "WRITE_OUT": True, "WRITE_ENDS": False},
        "ends": {"HAS_START": False, "WRITE_OUT": False, "WRITE_ENDS": True},
        "apply": {"HAS_START": True, "WRITE_OUT": True, "WRITE_ENDS": False},
    }
    for skip in (False, True):
        for name, flags in passes.items():
            for dtype in ("fp32", "fp64") if name == "one" else ("fp32",):
                out.append((
                    "kalman_scan", dtype,
                    {
                        "SKIP": skip, "ZERO_MASKED": True, "HAS_OFFSETS": skip and name != "one",
                        **flags, "BLOCK_ROWS": tk.BLOCK_ROWS, "BLOCK_T": tk.BLOCK_T,
                    },
                    tk.NUM_WARPS,
                ))  # fmt: skip
    out.append(("chunk_starts", "fp32", {"BLOCK": 128}, 4))
    for has_adv, dtype in ((True, "fp32"), (True, "fp64"), (False, "fp32")):
        flags = {"HAS_ADV": has_adv, "BLOCK_ROWS": tk.BLOCK_ROWS, "BLOCK_T": tk.BLOCK_T, **bins}
        out.append(("ratio_rows", dtype, flags, tk.NUM_WARPS))
    for has_sums, dtype in ((False, "fp32"), (True, "fp32"), (False, "fp64")):
        flags = {"HAS_SUMS": has_sums, "BLOCK": tk.HISTOGRAM_BLOCK, **bins}
        out.append(("histogram_moments", dtype, flags, tk.NUM_WARPS))
    everything = ("HAS_ENTROPY", "HAS_OLD", "HAS_ADV", "HAS_PAIRS", "HAS_CORRECT")
    for present, dtype in (
        (everything, "fp32"), (everything, "fp64"), (("HAS_ENTROPY",), "fp32"),
        (("HAS_ADV", "HAS_PAIRS"), "fp32"),
    ):  # fmt: skip
        flags = {name: name in present for name in everything}
        flags.update(BLOCK_ROWS=tk.BLOCK_ROWS, BLOCK_T=tk.BLOCK_T, **bins)
        out.append(("vitals_rows", dtype, flags, tk.NUM_WARPS))
    for dtype in ("fp32", "fp64"):
        blocks = {"BLOCK_ROWS": tk.BLOCK_ROWS, "BLOCK_T": tk.BLOCK_T}
        out.append(("mismatch_rows", dtype, blocks, tk.NUM_WARPS))
        blocks = {"BLOCK_ROWS": tk.BLOCK_ROWS, "BLOCK_T": tk.MISMATCH_BLOCK_T, "BLOCK_TOPS": 1024}
        out.append(("mismatch_terms", dtype, blocks, tk.NUM_WARPS))
    for dtype in ("fp32", "fp64"):
        narrow = dtype == "fp32"
        for index in range(4):
            flags = {"PASS": index, "NARROW": narrow, "NARROW_Z": narrow}
            flags.update(BLOCK_ROWS=tk.BLOCK_ROWS, BLOCK_T=tk.BLOCK_T)
            out.append(("covariance_rows", dtype, flags, tk.NUM_WARPS))
        flags = {"WEIGHT_BINS": 50, "NARROW": narrow, "NUM_BINS": bins_module.NUM_BINS}
        flags.update(BLOCK_ROWS=tk.BLOCK_ROWS, BLOCK_T=tk.COVARIANCE_BLOCK_T, **bins)
        out.append(("covariance_statistics", dtype, flags, tk.NUM_WARPS))
    out.append(("lfr_band", "fp64", {"BLOCK_T": tk.LFR_BLOCK_T}, tk.NUM_WARPS))
    for dtype in ("fp32", "fp64"):
        blocks = {"BLOCK_ROWS": tk.BLOCK_ROWS, "BLOCK_T": tk.BLOCK_T}
        out.append(("advantage_rows", dtype, blocks, tk.NUM_WARPS))
        out.append(("difference_rows", dtype, blocks, tk.NUM_WARPS))
    for dtype in ("fp32", "fp64"):
        out.append(("state_runs", dtype, {"BLOCK_T": tk.STATES_BLOCK_T}, tk.NUM_WARPS))
        blocks = {"BLOCK_ROWS": tk.BLOCK_ROWS, "BLOCK_T": tk.BLOCK_T}
        out.append(("entropy_quadrants", dtype, blocks, tk.NUM_WARPS))
    for dtype, ratio, window_block in (
        ("fp32", False, 64),
        ("fp32", True, 64),
        ("fp64", False, 64),
        ("fp32", False, tk.MAX_WINDOW),
    ):
        flags = {"RATIO": ratio, "BLOCK_T": tk.CENTRE_BLOCK_T, "WINDOW_BLOCK": window_block}
        flags["WINDOWS"] = max(1, tk.CENTRE_WINDOW_LANES // window_block)
        out.append(("centre_rows", dtype, flags, tk.NUM_WARPS))
    # float64 row sums whatever the input's dtype
    out.append(("aggregation_rows", "fp64", {"BLOCK": tk.AGGREGATION_BLOCK}, tk.AGGREGATION_WARPS))
    for log, dtype in ((True, "fp64"), (False, "fp64"), (True, "fp32")):
        flags = {"LOG": log, "NUM_BINS": bins_module.NUM_BINS, "BLOCK": tk.CELLS_BLOCK, **bins}
        out.append(("class_cells", dtype, flags, tk.NUM_WARPS))
    return out


def signature(kernel: Any, dtype: str, flags: dict[str, Any]) -> dict[str, str]:
    """Each argument's Triton type: pointers by :data:`POINTERS` (the input's float type
    for :data:`FLOAT_POINTERS`), ``constexpr`` for the flags, 32-bit integers else."""
    types = {}
    for name in kernel.arg_names:
        if name in flags:
            types[name] = "constexpr"
        elif name in FLOAT_POINTERS:
            types[name] = f"*{dtype}"
        elif name.endswith("_ptr"):
            types[name] = POINTERS[name]
        else:
            types[name] = "i32"
    return types


def resources(ptx: str, capability: int) -> tuple[int, int]:
    """(registers a thread, bytes spilled) of PTX by ``ptxas -v`` for the capability."""
    from triton.backends.nvidia.compiler import get_ptxas

    arch = f"sm_{capability}a" if capability >= 90 else f"sm_{capability}"
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "kernel.ptx"
        source.write_text(ptx)
        done = subprocess.run(
            [get_ptxas(capability).path, f"-arch={arch}", "-v", str(source), "-o",
             str(Path(folder) / "kernel.cubin")],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    registers = re.search(r"Used (\d+) registers", done.stderr)
    spills = re.search(r"(\d+) bytes spill stores", done.stderr)
    if registers is None or spills is None:
        raise RuntimeError(f"ptxas -v said: {done.stderr.strip()[-300:]}")
    return int(registers.group(1)), int(spills.group(1))


def compile_one(kernel: Any, dtype: str, flags: dict[str, Any], warps: int, capability: int):
    """The compiled kernel (Triton's ``CompiledKernel``) for one target."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    source = ASTSource(fn=kernel, signature=signature(kernel, dtype, flags), constexprs=flags)
    return triton.compile(
        source, target=GPUTarget("cuda", capability, 32), options={"num_warps": warps}
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="80,90", help="compute capabilities, e.g. 80,90")
    parser.add_argument("--kernels", default="", help="only these kernels (comma-separated)")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "") not in ("", "0"):
        print("triton_compile: TRITON_INTERPRET is set; run it without (nothing to compile)")
        return 2
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, said
    from ratioscope.functional import _triton_source

    wanted = {name for name in args.kernels.split(",") if name}
    failed = 0
    print(
        f"{'kernel':<18} {'input':<5} {'target':<13} {'regs':>5} {'spills':>7} {'shared':>7}  flags"
    )
    for name, dtype, flags, warps in variants():
        if wanted and name not in wanted:
            continue
        kernel = getattr(_triton_source, name)
        shown = " ".join(f"{k}={v}" for k, v in flags.items() if k.isupper() and k not in (
            "MIN_EXP", "PER_DECADE", "MAGNITUDE_BINS", "CENTER"))  # fmt: skip
        for capability in (int(c) for c in args.targets.split(",")):
            target = TARGETS.get(capability, f"sm_{capability}")
            try:
                compiled = compile_one(kernel, dtype, flags, warps, capability)
                registers, spills = resources(compiled.asm["ptx"], capability)
            except Exception as error:  # any failure of any stage is this row's verdict
                failed += 1
                print(f"{name:<18} {dtype:<5} {target:<13} FAILED: {type(error).__name__}: "
                      f"{str(error).strip().splitlines()[-1][:200]}  {shown}")  # fmt: skip
                continue
            failed += spills > 0
            print(
                f"{name:<18} {dtype:<5} {target:<13} {registers:>5} {spills:>7} "
                f"{compiled.metadata.shared:>7}  {shown}{'  SPILLS' if spills else ''}"
            )
    print("all compiled without spills" if not failed else f"{failed} failed or spilled")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
