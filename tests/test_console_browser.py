"""The console in a real browser: headless Chromium loads `numasched simulate --serve` on the bundled
example, runs the page's script (live refresh, filters) and the test reads the DOM it built. A
screenshot of the overview is kept under $NUMASCHED_TEST_ARTIFACTS (default build/test-artifacts).

`make test` installs Debian's chromium when it is missing; without it these tests skip and say why.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("NUMASCHED_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_TIMEOUT_S = 30

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (make test installs Debian's chromium with apt-get when run as root)",
)


@pytest.fixture(scope="module")
def console() -> Iterator[str]:
    """The base URL of a simulated cluster's console, served by the numasched command itself."""
    process = subprocess.Popen(
        [sys.executable, "-m", "numasched", "simulate", "--no-progress", "--serve", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert process.stderr is not None
    try:
        url = ""
        for line in process.stderr:
            found = re.search(r"console at (http://\S+/ui/)", line)
            if found:
                url = found.group(1)
                break
        assert url, "numasched simulate --serve printed no console address"
        yield url.removesuffix("/ui/")
    finally:
        process.terminate()
        try:
            assert process.wait(timeout=10) == 0, "numasched simulate --serve did not stop cleanly on SIGTERM"
        finally:
            process.kill()
            process.stderr.close()


def browse(url: str, *extra: str) -> str:
    """Chromium's DOM of url once its scripts ran for a few seconds of virtual time."""
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory(prefix="numasched-chromium-") as profile:
        done = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",  # root in CI containers; the page is our own
                "--disable-gpu",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=5000",
                *extra,
                url,
            ],
            capture_output=True,
            text=True,
            timeout=BROWSER_TIMEOUT_S,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def dom(url: str) -> str:
    return browse(url, "--dump-dom")


def test_overview_shows_a_tile_per_node_refreshes_live_and_is_screenshotted(console: str) -> None:
    page = dom(f"{console}/ui/")
    tiles = re.findall(r'<a class="tile[^"]*" href="/ui/nodes/([^"]+)"', page)
    assert sorted(tiles) == ["a100-0", "dgx1-0", "epyc-0", "epyc-1", "hgx-0", "hgx-1", "l40s-0"]
    # The script fetched the content again (no reload) and said when.
    assert re.search(r'id="live-state"[^>]*>updated ', page), "the live refresh did not run"
    assert 'id="numa-aware-status" class="policy-open">open<' in page
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / "console-overview.png"
    screenshot.unlink(missing_ok=True)
    browse(f"{console}/ui/", f"--screenshot={screenshot}", "--window-size=1400,1000", "--hide-scrollbars")
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "no PNG screenshot"


def test_node_page_shows_pinned_cpus_by_pod_and_the_nvlink_graph(console: str) -> None:
    page = dom(f"{console}/ui/nodes/dgx1-0")
    # The example pins CPUs 1-2 and 41-42 of dgx1-0 for default/infer-1 (see `numasched simulate`).
    for cpu in (1, 2, 41, 42):
        assert re.search(
            rf'<span class="cpu pinned" data-cpu="{cpu}" data-state="pinned" data-pod="default/infer-1"', page
        ), f"CPU {cpu} is not shown pinned by default/infer-1"
    assert re.search(r'<span class="cpu reserved" data-cpu="0" data-state="reserved"', page)
    assert 'id="link-matrix"' in page and 'id="link-graph"' in page
    assert re.search(r'data-link="nvidia.com/gpu/0 nvidia.com/gpu/3">NV2</td>', page)


def test_pending_page_shows_why_each_pod_waits(console: str) -> None:
    page = dom(f"{console}/ui/pending")
    reasons = dict(
        re.findall(r'<article class="pending" data-pod="([^"]+)"><h2>[^<]*</h2><p class="reason">([^<]*)<', page)
    )
    assert reasons["default/too-big-0"] == "0/7 nodes are available: 7 Insufficient nvidia.com/gpu."
    assert "unknown topology policy 'singel-numa-node'" in reasons["default/typo-svc"]


def test_filters_from_the_address_hide_the_other_tiles(console: str) -> None:
    def visible(page: str) -> list[str]:
        return sorted(re.findall(r'<a class="tile" href="/ui/nodes/([^"]+)"', page))

    assert visible(dom(f"{console}/ui/?policy=restricted")) == ["hgx-0"]
    assert visible(dom(f"{console}/ui/?model=Tesla+V100-SXM2-32GB")) == ["dgx1-0"]
    assert visible(dom(f"{console}/ui/?label=numasched.io%2Fmachine%3Depyc-1s-nps4")) == ["epyc-0", "epyc-1"]


def test_a_pending_pod_links_to_its_explanation(console: str) -> None:
    pending = dom(f"{console}/ui/pending")
    assert '<a href="/ui/explain/default/too-big-0">explain, node by node</a>' in pending
    page = dom(f"{console}/ui/explain/default/too-big-0")
    explained = re.search(r'<pre id="explain">(.*?)</pre>', page, re.S)
    assert explained, "no explanation drawn"
    # numasched explain names every node of the example with its verdict.
    for node in ("a100-0", "dgx1-0", "epyc-0", "epyc-1", "hgx-0", "hgx-1", "l40s-0"):
        assert node in explained.group(1), node
    missing = dom(f"{console}/ui/explain/default/no-such-pod")
    assert 'class="reason"' in missing and "no-such-pod" in missing
