"""`spectally replay --html` (docs/observe.md): the report's structure (default suite), and
(marker `browser`) the report rendered by a real headless Chromium: it shows the verdict and
the plots and requests nothing from the network."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from spectally.cli import main
from spectally.engine_bridge.observe import html as report

ROOT = Path(__file__).parents[1]
SERVE = sorted(str(p) for p in (ROOT / "fixtures" / "vllm").glob("serve-*.ndjson.gz"))
DIVERGING = str(ROOT / "traces" / "diverge" / "stale_without_preempt.ndjson")


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _write(tmp_path: Path, *logs: str) -> tuple[int, str]:
    out = tmp_path / "report.html"
    res = CliRunner().invoke(main, ["replay", "-j", "1", "--html", str(out), *logs])
    return res.exit_code, out.read_text()


def _tags(text: str) -> list[tuple[str, dict[str, str | None]]]:
    p = _Tags()
    p.feed(text)
    return p.tags


def test_one_log_report_holds_verdict_totals_and_plots(tmp_path: Path) -> None:
    code, text = _write(tmp_path, SERVE[0])
    assert code == 0
    tags = _tags(text)
    csp = [a["content"] for t, a in tags if t == "meta" and a.get("http-equiv")]
    assert csp == [report.CSP]
    assert ("meta", {"name": "spectally-verdict", "content": "AGREE"}) in tags
    assert sum(1 for t, _ in tags if t == "svg") == 2  # per position, acceptance over steps
    summary = json.loads(CliRunner().invoke(main, ["replay", "--json", SERVE[0]]).output)
    rfc = summary["summary"]["totals"]["rfc"]
    assert (
        f"<td>drafted</td><td>{summary['summary']['totals']['vllm-legacy']['drafted']}</td>"
        f"<td>{rfc['drafted']}</td>" in text
    )
    # Self-contained: nothing to load (no src/href attributes, no URL but SVG's namespaces).
    assert not [a for _, a in tags if "src" in a or "href" in a]
    urls = set(re.findall(r"https?://[^\"'\s<>]+", text))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}


def test_fleet_report_has_fleet_and_first_divergence_with_state(tmp_path: Path) -> None:
    code, text = _write(tmp_path, SERVE[0], DIVERGING)
    assert code == 1
    assert "1 of 2 logs agree" in text
    assert text.count('<section class="log">') == 2
    assert "First divergence" in text and "reference state:" in text
    assert "request &#x27;a&#x27;: unstructured, active" in text
    assert sum(1 for t, _ in _tags(text) if t == "svg") == 1 + 2 + 2


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("chromium not found: apt-get install -y chromium (docs/observe.md)")
    return path


def _render(tmp_path: Path, page: Path) -> tuple[str, list[str]]:
    """The DOM headless Chromium builds for ``page`` and the URLs the page itself asked the
    network stack for (Chromium's own service requests, initiator 'not an origin', aside).
    Hostnames resolve to nothing, so even a request made would go nowhere."""
    netlog = tmp_path / f"{page.stem}.netlog.json"
    profile = tmp_path / f"{page.stem}.profile"
    profile.mkdir()
    args = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--log-net-log={netlog}",
        "--dump-dom",
        page.as_uri(),
    ]
    res = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    log = json.loads(netlog.read_text())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    params = [e.get("params", {}) for e in log["events"] if e["type"] == start]
    urls = [p["url"] for p in params if "url" in p and p.get("initiator") != "not an origin"]
    return res.stdout, urls


@pytest.mark.browser
def test_chromium_renders_the_report_without_network(tmp_path: Path) -> None:
    code, _ = _write(tmp_path, *SERVE, DIVERGING)
    assert code == 1
    dom, urls = _render(tmp_path, tmp_path / "report.html")
    assert urls == []
    assert "3 of 4 logs agree" in dom and "DIVERGE" in dom and "AGREE" in dom
    assert dom.count("<svg") == 1 + 2 * len(SERVE) + 2
    assert "acceptance over steps" in dom and "First divergence" in dom


@pytest.mark.browser
def test_the_network_check_sees_a_page_request(tmp_path: Path) -> None:
    """The control: a page that loads an image is seen asking for it."""
    page = tmp_path / "control.html"
    page.write_text('<!DOCTYPE html><p>x</p><img src="http://spectally-test.invalid/x.png">')
    _, urls = _render(tmp_path, page)
    assert urls == ["http://spectally-test.invalid/x.png"]


def test_divergence_state_as_lines_or_as_data() -> None:
    assert report._state_text(["a", "b"]) == "a\nb"
    assert json.loads(report._state_text({"request": "a", "counters": [1, 2]})) == {
        "request": "a",
        "counters": [1, 2],
    }
    assert report._state_text([]) == ""
