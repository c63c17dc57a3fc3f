"""``ratioscope report``: the HTML file's size and build time next to the analysis time
of the same run (docs/report.md).

Two runs:

* bundled      the 16-step sample run (sample_data/verl_steps/), with its tokenizer;
               budget: <= 15 MiB, opens in < 2 s;
* synthetic    SYNTHETIC dumps (benchmarks/make_synthetic.py, with token ids added)
               of ``--steps`` steps of ``--rows`` sequences padded to ``--tokens``;
               budget: <= 50 MiB for 1,000 steps of 4k-token responses.

For each: the analysis alone (``ratioscope.timeline``: what ``timeline`` costs), the whole
report (timeline + drill-down + HTML), their ratio, and the file's size split into
the chart libraries, the per-token data and the rest. With chromium on the machine, the
time from navigation to the page being drawn (headless, best of 3).

    python benchmarks/bench_report.py                       # bundled + 1000 x 8 x 4096
    python benchmarks/bench_report.py --steps 200 --rows 16 # a smaller synthetic run
    python benchmarks/bench_report.py --skip-synthetic
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MiB = 2**20


def _sizes(html: str) -> dict[str, float]:
    """MiB of the file, of its chart libraries and of its per-token data."""
    total = len(html.encode("utf-8"))
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    library = sum(len(s) for s in scripts[:-1])  # the last one is the page's own
    tokens = sum(len(m) for m in re.findall(r'"(?:ids|[a-z_]+)": "([A-Za-z0-9+/=]{16,})"', html))
    return {"total": total / MiB, "charts": library / MiB, "tokens": tokens / MiB}


def _open_time(path: Path, repeat: int = 3) -> float | None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--disable-sync"]  # fmt: skip
    best = float("inf")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=args)
        for _ in range(repeat):
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            start = time.perf_counter()
            page.goto(path.resolve().as_uri())
            page.wait_for_selector("body[data-ready='1']")
            best = min(best, time.perf_counter() - start)
            page.close()
        browser.close()
    return best


def measure(name: str, paths: list[Path], tokenizer: Path | None, out: Path) -> None:
    import ratioscope
    from ratioscope.render.html.run_report import run_report

    # wall clock and this process's CPU time (on a loaded machine the wall clock mostly
    # measures waiting; torch's threads count in the CPU time)
    start, cpu = time.perf_counter(), time.process_time()
    ratioscope.timeline(paths)
    analysis, analysis_cpu = time.perf_counter() - start, time.process_time() - cpu
    start, cpu = time.perf_counter(), time.process_time()
    result = run_report(paths, tokenizer=tokenizer)
    built, built_cpu = time.perf_counter() - start, time.process_time() - cpu
    start = time.perf_counter()
    size = result.write_html(out)
    written = time.perf_counter() - start
    sizes = _sizes(out.read_text(encoding="utf-8"))
    drill = result.drilldown
    kept = len(drill.tokens) if drill else 0
    ranked = sum(len(s.rows) for s in drill.steps) if drill else 0
    print(f"\n{name}: {len(paths)} files")
    print(f"  analysis (timeline)     {analysis:8.1f} s wall, {analysis_cpu:8.1f} s CPU")
    print(
        f"  report (timeline + drill-down) {built:8.1f} s wall, {built_cpu:8.1f} s CPU: "
        f"x{built / analysis:.2f} the analysis (wall), x{built_cpu / analysis_cpu:.2f} (CPU)"
    )
    print(f"  HTML written            {written:8.2f} s")
    print(
        f"  file                    {size / MiB:8.2f} MiB  (Vega libraries {sizes['charts']:.2f}, "
        f"per-token data {sizes['tokens']:.2f}, rest {sizes['total'] - sizes['charts'] - sizes['tokens']:.2f})"  # noqa: E501
    )
    print(f"  sequences               {ranked} ranked, {kept} with their tokens, "
          f"{drill.dropped if drill else 0} left out by the token budget")  # fmt: skip
    opened = _open_time(out)
    if opened is not None:
        print(f"  opens in chromium       {opened:8.2f} s (navigation to drawn page, best of 3)")


def synthetic_run(directory: Path, steps: int, rows: int, tokens: int) -> list[Path]:
    """SYNTHETIC per-step dumps with token ids (never sample data)."""
    import torch
    from make_synthetic import make_synthetic

    paths = []
    extras = ("advantages", "group", "rewards", "entropy", "old_entropy")
    for step in range(1, steps + 1):
        batch = make_synthetic(rows, tokens, seed=step, extras=extras, min_length=tokens // 2)
        generator = torch.Generator().manual_seed(step)
        ids = torch.randint(0, 150_000, (rows, tokens), generator=generator)
        batch["token_ids"] = torch.where(batch["mask"], ids, 0)
        path = directory / f"step_{step:06d}.pt"
        torch.save(batch, path)
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--skip-synthetic", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-report-"))
    try:
        bundled = sorted((ROOT / "sample_data" / "verl_steps").glob("step_*.pt"))
        from ratioscope.render.html.run_report import run_report

        run_report(bundled[:1])  # compiles the numba loops: not part of either time
        measure("bundled 16-step run", bundled, ROOT / "sample_data" / "tokenizer.json",
                work / "bundled.html")  # fmt: skip
        if not args.skip_synthetic:
            start = time.perf_counter()
            paths = synthetic_run(work, args.steps, args.rows, args.tokens)
            print(f"\n(SYNTHETIC dumps written in {time.perf_counter() - start:.0f} s)")
            measure(
                f"SYNTHETIC {args.steps} steps x {args.rows} sequences x {args.tokens} tokens",
                paths, None, work / "synthetic.html",
            )  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
