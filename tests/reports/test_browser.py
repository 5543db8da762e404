"""The HTML report in a real headless Chromium: no console errors, every image decodes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from chromium_cdp import Browser, find_chromium
from reports_golden import RESULTS, ROOT, TRACE

from vgcsim.reports import render

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

IMAGE_SIZES = (
    "Array.from(document.images).map(i => "
    "({src: i.src.slice(0, 30), complete: i.complete, w: i.naturalWidth, h: i.naturalHeight}))"
)


@pytest.fixture(scope="module")
def chromium() -> str:
    path = find_chromium()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI; .ci/run installs Debian's `chromium`")
        pytest.skip("no chromium on this machine (apt-get install chromium)")
    return path


@pytest.mark.browser
@pytest.mark.slow  # a headless browser renders the whole page (about 9 s)
def test_report_page_loads_without_errors(chromium, tmp_path, monkeypatch):
    # the real thing: committed predict/simulate results of the sample trace, and the trace
    monkeypatch.chdir(ROOT)
    inputs = render.load_inputs([p.parent for p in RESULTS], [TRACE])
    report = render.build_report(inputs)
    page = render.write_report(report, tmp_path / "report")

    browser = Browser(chromium)
    try:
        browser.call("Page.enable")
        browser.call("Runtime.enable")
        browser.call("Log.enable")
        browser.call("Page.navigate", url=page.resolve().as_uri())
        browser.wait_event("Page.loadEventFired")
        images = browser.call("Runtime.evaluate", expression=IMAGE_SIZES, returnByValue=True)
        images = images["result"]["value"]
        title = browser.call("Runtime.evaluate", expression="document.title", returnByValue=True)
        ARTIFACTS.mkdir(exist_ok=True)
        browser.screenshot(ARTIFACTS / "report-screenshot.png")
        errors = browser.errors()
    finally:
        browser.close()

    assert title["result"]["value"] == "vgcsim report"
    assert len(images) == len(report.plots)
    for img in images:
        assert img["complete"] and img["w"] > 0 and img["h"] > 0, img
    assert errors == []
    assert (ARTIFACTS / "report-screenshot.png").stat().st_size > 10_000
