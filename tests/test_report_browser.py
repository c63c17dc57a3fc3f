"""The run report in a real browser: Debian's chromium, driven by Playwright through the
system browser (never a download). The report of the bundled run loads from a file://
URL with no console error and no network request; a click on a step shows its rankings,
a click on a sequence its tokens, whose values are compared with values computed here
from the dump. Screenshots go to the test's directory, or to RATIOSCOPE_SCREENSHOTS
(docs/report.md shows them).

Skipped when chromium or Playwright is missing (CI installs both: .ci/run)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from report_build import STEPS, kalman_loop, sample_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


def test_report_drills_from_run_to_step_to_tokens(browser, tmp_path):
    _, out, _ = sample_report()
    shots = Path(os.environ.get("RATIOSCOPE_SCREENSHOTS") or tmp_path)
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    url = out.resolve().as_uri()
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']")
    # the small multiples: one chart of 12 panels, a point per step and headline
    assert page.locator("#timeline svg").count() == 1
    assert page.locator("#timeline svg g.mark-symbol path").count() >= 12 * 16
    assert page.locator("#step-table tbody tr").count() == 16
    assert page.locator("#verdict .finding").count() >= 1
    # the verdict after each step: a badge in the table, a square under each panel, as
    # the timeline the page was made from says
    from ratioscope.views.timeline import timeline

    expected = timeline(STEPS).levels()
    badges = page.locator("#step-table td.level .badge").all_inner_texts()
    assert [b.lower() for b in badges] == expected
    squares = page.locator("#timeline svg g.mark-symbol path").count()
    assert squares >= 2 * 12 * 16  # the points and the squares of every panel
    # each square in its level's colour (report.css's), the same strip in every panel
    fills = page.locator("#timeline svg g.mark-symbol path").evaluate_all(
        "p => p.map(e => (e.getAttribute('fill') || '').toLowerCase())"
    )
    colours = {"green": "#2e7d32", "yellow": "#b8860b", "red": "#c62828"}
    assert set(expected) - {"green"}, expected  # more than one level to tell apart
    coloured = {level: fills.count(colour) for level, colour in colours.items()}
    panels, left = divmod(sum(coloured.values()), len(expected))
    assert panels >= 12 and left == 0, coloured
    assert coloured == {level: panels * expected.count(level) for level in colours}
    # counts are shown exactly: the run's valid tokens, summed from the dumps' masks
    tokens = sum(
        int(torch.load(path, weights_only=True)["response_mask"].sum())
        for path in sorted(STEPS.glob("step_*.pt"))
    )
    vitals = page.locator("#vitals .vital").evaluate_all(
        "v => v.map(e => [e.querySelector('.key').textContent,"
        " e.querySelector('.value').textContent])"
    )
    assert ["tokens", str(tokens)] in vitals
    # each vital with its meaning and unit from the report's catalog (ratioscope metrics)
    from ratioscope.report.catalog import entries_for

    meanings = dict(
        page.locator("#vitals .vital").evaluate_all(
            "v => v.map(e => [e.querySelector('.key').textContent,"
            " (e.querySelector('.meaning') || {}).textContent || null])"
        )
    )
    (entry,) = entries_for("vitals.length.mean")
    assert meanings["length.mean"] == f"{entry.meaning} ({entry.unit})"
    assert sum(m is not None for m in meanings.values()) >= 0.8 * len(meanings)
    page.screenshot(path=str(shots / "report-run.png"))

    page.click("#step-table tr[data-step='16'] td")
    page.wait_for_selector("#rankings [data-ranking='policy_k3']")
    assert page.locator("h1").inner_text() == "Step 16"
    page.screenshot(path=str(shots / "report-step.png"))

    first = page.locator("[data-ranking='policy_k3'] tbody tr").first
    sequence = first.get_attribute("data-seq")
    first.locator("td").nth(1).click()
    page.wait_for_selector("#tokens .tok")
    assert page.locator("#tokens").get_attribute("data-sequence") == sequence
    row = int(sequence.rsplit("_r", 1)[1])

    data = torch.load(STEPS / "step_0016.pt", weights_only=True)
    mask = data["response_mask"][row]
    z = (data["log_probs"] - data["old_log_probs"])[row][mask].tolist()
    ids = data["responses"][row][mask].tolist()
    spans = page.locator("#tokens .tok")
    shown = spans.evaluate_all("s => s.map(e => [Number(e.dataset.value), e.textContent])")
    assert len(shown) == len(z)
    text = {3 + d: str(d) for d in range(10)}  # digits of the sample task's vocabulary
    for (value, label), expected, token in zip(shown, z, ids, strict=True):
        assert value == pytest.approx(expected, rel=1e-6, abs=1e-12)
        if token in text:
            assert label == text[token]
    page.screenshot(path=str(shots / "report-sequence.png"), full_page=True)

    page.select_option("#quantity", "kalman")
    page.wait_for_selector("#tokens[data-quantity='kalman']")
    filtered = page.locator("#tokens .tok").evaluate_all("s => s.map(e => Number(e.dataset.value))")
    for value, expected in zip(filtered, kalman_loop(z), strict=True):
        assert value == pytest.approx(expected, abs=1e-7)

    assert errors == []
    assert requests == [url]  # the file itself, nothing else
    page.close()
