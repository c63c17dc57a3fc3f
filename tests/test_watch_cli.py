"""``ratioscope watch`` as a user runs it, on a directory a background process fills step
by step with the bundled run: a file written in two halves, a writer killed mid-file, a
corrupt cache entry. The timeline JSON is read after each step (whole, each time: it is
written atomically), --on-red runs once, the HTML opens in chromium while the run grows,
and Ctrl-C ends the watch with exit 130 and no temporary file left."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ratioscope

pytestmark = pytest.mark.slow  # a watch of a growing run in real time: about 30 s

RUN = Path(__file__).resolve().parents[1] / "sample_data" / "runs" / "shaping_hack-s1" / "capture"
STEPS = list(range(1, 13))
#: the step the killed writer leaves truncated; it is skipped, and the run goes on
KILLED = 9
SETTLE = 1.0

WRITER = r"""
import sys, time
from pathlib import Path
source, target = Path(sys.argv[1]), Path(sys.argv[2])
pause, killed, mid = float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[6])
for step in [int(s) for s in sys.argv[5].split(",")]:
    name = f"step_{step:06d}"
    for file in sorted((source / name).iterdir()):
        data = file.read_bytes()
        out = target / name / file.name
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("wb") as handle:  # written in place, as a framework's dump is
            handle.write(data[: len(data) // 2])
            handle.flush()
            if step == killed:
                print("half", flush=True)
                time.sleep(3600)  # killed here by the test
            if step == 4:
                time.sleep(mid)  # a pause mid-file, shorter than --settle
            handle.write(data[len(data) // 2 :])
    time.sleep(pause)
"""


def start_writer(target: Path, steps: list[int], killed: int = -1, pause: float = 0.5):
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(RUN), str(target), str(pause), str(killed),
         ",".join(map(str, steps)), str(0.6 * SETTLE)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def rows(document: dict) -> list[tuple]:
    """Each step of a timeline document: its number, values, flags and verdict."""
    return [
        (s["step"], json.dumps(s["values"], sort_keys=True), tuple(s["flags"]),
         json.dumps(s["verdict"], sort_keys=True))
        for s in document["steps"]
    ]  # fmt: skip


def test_watch_follows_a_growing_run(tmp_path):
    cache = tmp_path / "cache"
    # a corrupt cache entry: step 2 analysed once before, its entry then damaged
    before = tmp_path / "before"
    for step in (1, 2):
        shutil.copytree(RUN / f"step_{step:06d}", before / f"step_{step:06d}")
    command = [sys.executable, "-m", "ratioscope", "watch"]
    done = subprocess.run(
        [*command, str(before), "--once", "--settle", "0", "--cache", str(cache), "--quiet"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    entries = sorted(cache.glob("*/*.json"))
    # step 2's own entry (not a pooled one that names it among its inputs: which comes
    # first in the sorted keys depends on the hashes)
    damaged = next(
        p for p in entries if '"kind":"step"' in p.read_text() and "step_000002" in p.read_text()
    )
    damaged.write_text(damaged.read_text()[:1000])

    run, out = tmp_path / "run", tmp_path / "out"
    run.mkdir()
    out.mkdir()
    hook = tmp_path / "hook.txt"
    watch = subprocess.Popen(
        [*command, str(run), "--settle", str(SETTLE), "--interval", "0.2",
         "--json", str(out / "t.json"), "--html", str(out / "t.html"), "--cache", str(cache),
         "--on-red", f'echo "$RATIOSCOPE_STEP $RATIOSCOPE_KEYS" >> {hook}'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    before_kill = [s for s in STEPS if s < KILLED]
    writer = start_writer(run, before_kill)
    seen: list[dict] = []
    deadline = time.monotonic() + 120
    html_checked = False
    while time.monotonic() < deadline:
        document = read_json(out / "t.json")  # whole every time: written atomically
        if document is not None and (not seen or document["steps"] != seen[-1]["steps"]):
            seen.append(document)
            if not html_checked and len(document["steps"]) >= 4:
                check_html(out / "t.html", tmp_path)
                html_checked = True
        if document is not None and len(document["steps"]) == len(before_kill):
            break
        time.sleep(0.05)
    assert writer.wait(timeout=60) == 0
    assert html_checked
    # a writer killed mid-file: its step is skipped once the file settles
    killed = start_writer(run, [KILLED], killed=KILLED)
    assert killed.stdout.readline().strip() == "half"
    killed.kill()
    killed.wait()
    rest = [s for s in STEPS if s > KILLED]
    writer = start_writer(run, rest)
    assert writer.wait(timeout=60) == 0
    while time.monotonic() < deadline:
        document = read_json(out / "t.json")
        if document["steps"] != seen[-1]["steps"]:
            seen.append(document)
        if [s["step"] for s in document["steps"]][-1] == STEPS[-1]:
            break
        time.sleep(0.05)
    time.sleep(0.5)
    watch.send_signal(signal.SIGINT)
    stdout, stderr = watch.communicate(timeout=60)
    assert watch.returncode == 130, stderr

    final = read_json(out / "t.json")
    expected_steps = [s for s in STEPS if s != KILLED]
    assert [s["step"] for s in final["steps"]] == expected_steps
    assert any(f"step {KILLED} was skipped" in w and "truncated" in w for w in final["warnings"])
    # the half-written step 4 was read whole: its values are those of the bundled file
    alone = ratioscope.timeline(RUN / "step_000004")
    step4 = next(s for s in final["steps"] if s["step"] == 4)
    assert step4["values"] == json.loads(json.dumps(alone.steps[0].values))
    # after each step, the timeline of the steps so far: what later steps add leaves
    # the earlier rows (values, flags, the verdict after each) as they were
    for document in seen:
        assert rows(document) == rows(final)[: len(document["steps"])]
    assert len(seen) >= 4
    # the final timeline is the one of the same files, analysed at once
    copy = tmp_path / "copy"
    for step in expected_steps:
        shutil.copytree(RUN / f"step_{step:06d}", copy / f"step_{step:06d}")
    expected = ratioscope.timeline(copy).to_dict()
    assert rows(final) == rows(expected)
    # --on-red ran once, at the step the verdict turned red
    first_red = final["verdict"]["first_red"]
    assert first_red is not None
    (line,) = hook.read_text().splitlines()
    assert line.split()[0] == str(first_red)
    # the damaged entry was not trusted: analysed again and rewritten whole
    assert json.loads(damaged.read_text())["kind"] == "step"
    # one line a step (stdout is not a terminal), the events on stderr
    assert len([x for x in stdout.splitlines() if x.startswith("step ")]) >= len(expected_steps)
    assert f"step {KILLED} skipped" in stderr and "--on-red ran" in stderr
    assert "stopped (Ctrl-C)" in stderr
    # nothing half-written left beside the outputs
    assert sorted(p.name for p in out.iterdir()) == ["t.html", "t.json"]
    check_html(out / "t.html", tmp_path, steps=len(expected_steps))


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def check_html(path: Path, tmp_path: Path, steps: int | None = None) -> None:
    """The run page loads in chromium without an error, a row and badge per step."""
    if CHROMIUM is None:
        return
    sync_api = pytest.importorskip("playwright.sync_api")
    snapshot = tmp_path / f"snapshot-{time.monotonic_ns()}.html"
    shutil.copyfile(path, snapshot)  # the watch may replace the file while it loads
    document = json.loads(read_json_embedded(snapshot))
    levels = [s["verdict"]["level"] for s in document["runs"][0]["timeline"]["steps"]]
    if steps is not None:
        assert len(levels) == steps
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(snapshot.resolve().as_uri())
        page.wait_for_selector("body[data-ready='1']")
        badges = page.locator("#step-table td.level .badge").all_inner_texts()
        browser.close()
    assert not errors
    assert [b.lower() for b in badges] == levels


def read_json_embedded(path: Path) -> str:
    """The report document the HTML embeds (a JSON script element)."""
    import re

    text = path.read_text()
    match = re.search(
        r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S
    )
    assert match is not None, "no embedded report document"
    return match.group(1)  # escaped as JSON escapes (\u003c): it reads as it is
