"""The HTML report in a real browser: headless Chromium opens reports, the charts render,
nothing logs an error, nothing is fetched, and hostile trace content stays inert.

The tests skip, with the reason, where no Chromium is installed (``.ci/run`` installs
Debian's ``chromium``), except under ``CI=true``, where they fail instead. Screenshots are kept under pytest's temporary folder, or in
``$TRACEKIT_SCREENSHOTS`` when that is set, for a person to look at.

Below the tests' helpers is a tiny headless-Chromium driver (no extra packages).

It speaks the Chrome DevTools Protocol over ``--remote-debugging-pipe`` (JSON messages
separated by NUL bytes on file descriptors 3 and 4), opens one page, and records what
the page did: every network request, console messages, uncaught exceptions, log
entries (CSP violations land there) and JavaScript dialogs (``alert``).

    python tests/test_report_browser.py REPORT.html SCREENSHOT.png     # look at a report
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "/usr/bin/chromium")


def find_chromium() -> str | None:
    for name in CHROMIUM_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


# Counts, per .tk-chart element, the canvases Bokeh drew (inside its shadow roots) that
# have a size and at least one non-blank pixel.
_CHART_PROBE = r"""
(() => {
  function canvases(root) {
    let out = [];
    for (const el of root.querySelectorAll("*")) {
      if (el.tagName === "CANVAS") out.push(el);
      if (el.shadowRoot) out = out.concat(canvases(el.shadowRoot));
    }
    return out;
  }
  function painted(c) {
    if (!c.width || !c.height) return false;
    try {
      const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
      for (let i = 3; i < d.length; i += 4 * 97) if (d[i] !== 0) return true;
    } catch (e) { return true; }
    return false;
  }
  return Array.from(document.querySelectorAll(".tk-chart")).map(d => ({
    id: d.id, canvases: canvases(d).length, painted: canvases(d).filter(painted).length,
    width: d.getBoundingClientRect().width, height: d.getBoundingClientRect().height,
  }));
})()
"""


def _high_pipe() -> tuple[int, int]:
    """A pipe whose ends are above 9, so that moving them to fds 3 and 4 cannot clash."""
    r, w = os.pipe()
    hr, hw = fcntl.fcntl(r, fcntl.F_DUPFD_CLOEXEC, 10), fcntl.fcntl(w, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(r)
    os.close(w)
    return hr, hw


# Every element, shadow roots included (Bokeh renders into shadow DOM); the probes below
# read the text of every visible Bokeh tooltip, and whether any element that a hostile
# payload would create exists anywhere in the (shadow) DOM.
_ALL_ELEMENTS = r"""
  function all(root) {
    let out = [];
    for (const el of root.querySelectorAll("*")) {
      out.push(el);
      if (el.shadowRoot) out = out.concat(all(el.shadowRoot));
    }
    return out;
  }
"""

_TOOLTIP_PROBE = (
    "(() => {\n"
    + _ALL_ELEMENTS
    + r"""  const els = all(document);
  const tips = els.filter(e => typeof e.className === "string" && e.className.includes("bk-tooltip-content")
                               && e.getBoundingClientRect().width > 0);
  return tips.map(t => t.textContent).join(" | ");
})()
"""
)

FORBIDDEN_PROBE = (
    "(() => {\n"
    + _ALL_ELEMENTS
    + r"""  const els = all(document);
  return {
    pwned: window.__tkPwned === undefined ? null : window.__tkPwned,
    ids: els.filter(e => e.id && e.id.startsWith("tk-pwned")).map(e => e.tagName + "#" + e.id),
    imgs: els.filter(e => e.tagName === "IMG").length,
  };
})()
"""
)


@dataclass
class PageRun:
    url: str
    requests: list[str] = field(default_factory=list)
    console: list[dict] = field(default_factory=list)  # {"type", "text"}
    exceptions: list[str] = field(default_factory=list)
    log_entries: list[dict] = field(default_factory=list)  # {"level", "source", "text"}
    dialogs: list[str] = field(default_factory=list)
    charts_rendered: str | None = None
    charts_error: str | None = None
    charts: list[dict] = field(default_factory=list)
    tooltips: list[str] = field(default_factory=list)
    evaluated: dict = field(default_factory=dict)
    element_shots: dict = field(default_factory=dict)  # element id -> screenshot path

    @property
    def errors(self) -> list[str]:
        out = [f"console.{c['type']}: {c['text']}" for c in self.console if c["type"] in ("error", "assert")]
        out += [f"exception: {e}" for e in self.exceptions]
        out += [f"log {e['source']}: {e['text']}" for e in self.log_entries if e["level"] == "error"]
        return out

    @property
    def foreign_requests(self) -> list[str]:
        """Requests other than the report itself and inline data: any is a failure."""
        return [u for u in self.requests if u != self.url and not u.startswith(("data:", "blob:"))]


class Chromium:
    def __init__(self, executable: str | None = None):
        exe = executable or find_chromium()
        if not exe:
            raise FileNotFoundError("no chromium executable found")
        self.profile = tempfile.mkdtemp(prefix="tracekit-chromium-")
        cmd_r, cmd_w = _high_pipe()  # we write commands, Chromium reads them on fd 3
        ev_r, ev_w = _high_pipe()  # Chromium writes replies and events on fd 4
        args = [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--mute-audio",
            f"--user-data-dir={self.profile}",
            "--remote-debugging-pipe",
            "about:blank",
        ]
        # bash moves our pipe ends to fds 3 and 4, which is where Chromium expects them.
        shell = f'exec "$@" 3<&{cmd_r} 4>&{ev_w} {cmd_r}<&- {ev_w}>&-'
        self.proc = subprocess.Popen(
            ["bash", "-c", shell, "chromium", *args],
            pass_fds=(cmd_r, ev_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        os.close(cmd_r)
        os.close(ev_w)
        self._out = os.fdopen(cmd_w, "wb", buffering=0)
        self._in = os.fdopen(ev_r, "rb", buffering=0)
        self._messages: queue.Queue = queue.Queue()
        self._events: list[dict] = []
        self._next_id = 0
        self._stderr: list[bytes] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    def _drain_stderr(self) -> None:
        for line in self.proc.stderr:
            self._stderr.append(line)

    def _read(self) -> None:
        buf = b""
        while True:
            chunk = self._in.read(65536)
            if not chunk:
                self._messages.put(None)
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                self._messages.put(json.loads(raw))

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30.0) -> dict:
        self._next_id += 1
        msg_id = self._next_id
        msg = {"id": msg_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self._out.write(json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no reply to {method} within {timeout}s")
            m = self._messages.get(timeout=left)
            if m is None:
                raise RuntimeError("chromium closed the pipe: " + b"".join(self._stderr[-20:]).decode(errors="replace"))
            if m.get("id") == msg_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self._events.append(m)

    def pump(self, seconds: float) -> None:
        """Collect events for a while."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                m = self._messages.get(timeout=left)
            except queue.Empty:
                return
            if m is None:
                return
            self._events.append(m)

    def open(
        self,
        path: str | Path,
        screenshot: str | Path | None = None,
        width: int = 1400,
        wait_s: float = 20.0,
        evaluate: dict[str, str] | None = None,
        hover: str | None = None,
        element_shots: dict[str, str | Path] | None = None,
        hover_y: tuple = (0.75, 0.55),
    ) -> PageRun:
        """Load a page, wait for its charts, optionally hover over chart ``hover`` (an
        element id) and record the tooltips' text, evaluate expressions, screenshot the page
        and, per ``element_shots`` entry {element id: path}, that element alone."""
        url = Path(path).resolve().as_uri()
        run = PageRun(url=url)
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        first_event = len(self._events)
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.send(f"{domain}.enable", session=sid)
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 1000, "deviceScaleFactor": 1, "mobile": False},
            session=sid,
        )
        self.send("Page.navigate", {"url": url}, session=sid)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            self.pump(0.2)
            self._handle_dialogs(sid, first_event, run)
            state = self._eval(
                sid,
                "[document.readyState, document.body && document.body.dataset.chartsRendered,"
                " document.body && document.body.dataset.chartsError]",
            )
            if state and state[0] == "complete" and (state[1] is not None or state[2] is not None):
                run.charts_rendered, run.charts_error = state[1], state[2]
                break
        self.pump(0.8)  # let Bokeh paint
        self._handle_dialogs(sid, first_event, run)
        run.charts = self._eval(sid, _CHART_PROBE) or []
        if hover:
            run.tooltips = self._hover(sid, hover, hover_y)
        for key, expr in (evaluate or {}).items():
            run.evaluated[key] = self._eval(sid, expr)
        if screenshot:
            metrics = self.send("Page.getLayoutMetrics", session=sid)
            height = int(min((metrics.get("cssContentSize") or metrics["contentSize"])["height"], 12000))
            self.send(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                session=sid,
            )
            self.pump(0.5)
            shot = self.send("Page.captureScreenshot", {"format": "png"}, session=sid)
            Path(screenshot).write_bytes(base64.b64decode(shot["data"]))
        for element_id, out in (element_shots or {}).items():
            rect = self._eval(
                sid,
                "(() => { const e = document.getElementById(" + json.dumps(element_id) + ");"
                " if (!e) return null; const r = e.getBoundingClientRect();"
                " return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]; })()",
            )
            if not rect or not rect[2] or not rect[3]:
                continue
            clip = {"x": rect[0], "y": rect[1], "width": rect[2], "height": rect[3], "scale": 1}
            shot = self.send(
                "Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True}, session=sid
            )
            Path(out).write_bytes(base64.b64decode(shot["data"]))
            run.element_shots[element_id] = str(out)
        self.pump(0.2)
        self._handle_dialogs(sid, first_event, run)
        self._collect(sid, first_event, run)
        self.send("Target.closeTarget", {"targetId": target})
        return run

    def _hover(self, sid: str, element_id: str, hover_y: tuple = (0.75, 0.55)) -> list[str]:
        """Move the mouse across a chart at heights ``hover_y`` (fractions from the top);
        return the tooltip texts seen."""
        rect = self._eval(
            sid,
            "(() => { const e = document.getElementById(" + json.dumps(element_id) + ");"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.left, r.top, r.width, r.height]; })()",
        )
        if not rect:
            return []
        self.pump(0.3)
        left, top, w, h = rect
        seen = []
        for frac in (0.2, 0.35, 0.5, 0.65, 0.8):
            for yfrac in hover_y:
                self.send(
                    "Input.dispatchMouseEvent",
                    {"type": "mouseMoved", "x": left + w * frac, "y": top + h * yfrac},
                    session=sid,
                )
                self.pump(0.15)
                text = self._eval(sid, _TOOLTIP_PROBE)
                if text:
                    seen.append(text)
        return seen

    def _eval(self, sid: str, expr: str):
        res = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=sid)
        return (res.get("result") or {}).get("value")

    def _handle_dialogs(self, sid: str, first: int, run: PageRun) -> None:
        for e in self._events[first:]:
            if (
                e.get("sessionId") == sid
                and e.get("method") == "Page.javascriptDialogOpening"
                and not e.get("_handled")
            ):
                e["_handled"] = True
                run.dialogs.append(e["params"].get("message", ""))
                self.send("Page.handleJavaScriptDialog", {"accept": True}, session=sid)

    def _collect(self, sid: str, first: int, run: PageRun) -> None:
        for e in self._events[first:]:
            if e.get("sessionId") != sid:
                continue
            method, p = e.get("method"), e.get("params", {})
            if method == "Network.requestWillBeSent":
                run.requests.append(p["request"]["url"])
            elif method == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                run.console.append({"type": p.get("type"), "text": text})
            elif method == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                run.exceptions.append((d.get("exception") or {}).get("description") or d.get("text", ""))
            elif method == "Log.entryAdded":
                entry = p.get("entry", {})
                run.log_entries.append(
                    {"level": entry.get("level"), "source": entry.get("source"), "text": entry.get("text")}
                )

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except Exception:  # noqa: BLE001 - the browser may already be gone; it is killed below
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self._out, self._in):
            try:
                f.close()
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --- the tests ------------------------------------------------------------------------

import pytest  # noqa: E402
from conftest import SAMPLE_TRACES, read_real  # noqa: E402

CHROMIUM = find_chromium()
# In CI (CI=true, as .ci/run sets) the browser tests are part of the suite: without Chromium they
# fail instead of skipping, so that a green CI always means the pages were opened in a browser.
BROWSER_REQUIRED = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
needs_browser = pytest.mark.skipif(
    CHROMIUM is None and not BROWSER_REQUIRED,
    reason="no Chromium on this machine: install Debian's chromium (.ci/run does) to run the browser tests",
)


def chromium_path() -> str:
    """The Chromium to drive; fails the test (CI only reaches here without one) with the reason."""
    if CHROMIUM is None:
        pytest.fail(
            "CI=true but no Chromium was found (looked for "
            + ", ".join(CHROMIUM_CANDIDATES)
            + "): the browser tests must run in CI",
            pytrace=False,
        )
    return CHROMIUM


@pytest.fixture(scope="module")
def browser():
    with Chromium(chromium_path()) as b:
        yield b


def _shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("TRACEKIT_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _sample(name: str):
    from tracekit import read_trace

    path = SAMPLE_TRACES / f"{name}.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent (regenerate with sample_traces/regenerate.sh)")
    return read_trace(str(path))


def _check_page(run: PageRun, expected_charts: int, shot: Path | None = None) -> None:
    assert run.charts_error is None, run.charts_error
    assert run.charts_rendered == str(expected_charts)
    assert len(run.charts) == expected_charts
    for chart in run.charts:
        assert chart["canvases"] > 0 and chart["painted"] > 0, f"chart {chart['id']} drew nothing: {chart}"
        assert chart["width"] > 300 and chart["height"] > 100, chart
    assert run.errors == [], run.errors
    assert run.foreign_requests == [], f"the page fetched {run.foreign_requests}"
    assert run.dialogs == []
    if shot is not None:
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000


CASES = {
    # name -> (how to get the trace, what the page must show)
    "tiny-bs1": lambda: _sample("tiny-bs1"),  # CPU, prefill + 16 decode steps, roofline per phase
    "tiny-bs8": lambda: _sample("tiny-bs8"),
    "h100_hf": lambda: read_real("h100_hf"),  # GPU prefill only: no decode chart, a reason instead
    "mi300x_decode": lambda: read_real("mi300x_decode"),  # one decode step replayed from a HIP graph
    "rtx4080_nanovllm": lambda: read_real("rtx4080_nanovllm"),  # unknown GPU: no roofline, reason shown
    "v100_ddp": lambda: read_real("v100_ddp"),  # training run: whole-trace breakdown only
}


@needs_browser
@pytest.mark.parametrize("name", list(CASES))
def test_report_renders_in_chromium(browser, tmp_path, name):
    from tracekit.analysis import analyze
    from tracekit.report import render
    from tracekit.report.render_html import HtmlRenderer

    analysis = analyze(CASES[name]())
    expected = len(HtmlRenderer().view_model(analysis.to_dict())["chart_items"])
    page = tmp_path / f"{name}.html"
    page.write_text(render(analysis, "html"), encoding="utf-8")
    shot = _shots(tmp_path) / f"{name}.png"
    run = browser.open(page, screenshot=shot)
    assert expected >= 1
    _check_page(run, expected, shot)


@needs_browser
@pytest.mark.parametrize("key", ["mi300x_decode", "gb10_vllm"])
def test_step_timeline_in_chromium(browser, tmp_path, key):
    """The slowest and typical steps' timelines draw, hover names what is under the mouse,
    and their screenshots are kept: one blocking copy (MI300X) and a GPU behind the host (GB10)."""
    from tracekit.analysis import analyze
    from tracekit.report import render
    from tracekit.report.render_html import HtmlRenderer

    analysis = analyze(read_real(key))
    d = analysis.to_dict()
    html = render(analysis, "html")
    assert len(html) < 3_000_000
    page = tmp_path / f"{key}.html"
    page.write_text(html, encoding="utf-8")
    ids = [f"tk-chart-timeline-{i}" for i in range(len(d["timelines"]))]
    assert ids and all(f'id="{i}"' in html for i in ids)
    folder = _shots(tmp_path)
    shots = {i: folder / f"{key}-{i}.png" for i in ids}
    # The lanes fill the chart's top part; the legend sits below them.
    run = browser.open(
        page, screenshot=folder / f"{key}-page.png", element_shots=shots, hover=ids[0], hover_y=(0.15, 0.25, 0.35)
    )
    _check_page(run, len(HtmlRenderer().view_model(d)["chart_items"]))
    drawn = {c["id"]: c for c in run.charts}
    for i, path in shots.items():
        assert drawn[i]["painted"] > 0
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert run.tooltips and any("name:" in t for t in run.tooltips)


@needs_browser
def test_projection_page_in_chromium(browser, tmp_path):
    """tracekit project's page: both GPUs' breakdowns and both rooflines draw, nothing fetched."""
    from tracekit.report.project import ProjectHtml
    from tracekit.whatif.project import project

    pj = project(read_real("b300_qwen3_moe"), "mi300x", model="qwen3-30b-a3b")
    page = tmp_path / "projection.html"
    page.write_text(ProjectHtml().render(pj), encoding="utf-8")
    expected = len(ProjectHtml().view_model(pj.to_dict())["chart_items"])
    assert expected == 4  # limiter and category bars, the measured and the projected roofline
    run = browser.open(page, screenshot=_shots(tmp_path) / "projection.png")
    _check_page(run, expected)


@needs_browser
def test_plan_page_in_chromium(browser, tmp_path):
    from tracekit.report.plan import PlanHtml
    from tracekit.whatif.fit import PhaseCosts
    from tracekit.whatif.plan import Demand, Slo, plan

    costs = PhaseCosts(lambda n: 2e-4 * n, lambda b, ctx: 0.02 + 2e-4 * b, device="a test GPU")
    page = tmp_path / "plan.html"
    page.write_text(PlanHtml().render(plan(costs, Demand(4.0, 1000, 100), Slo(1.0, 0.03))), encoding="utf-8")
    run = browser.open(page, screenshot=_shots(tmp_path) / "plan.png")
    _check_page(run, 1)


@needs_browser
def test_decode_chart_hover_shows_step_figures(browser, tmp_path):
    from tracekit.analysis import analyze
    from tracekit.report import render

    page = tmp_path / "tiny.html"
    page.write_text(render(analyze(_sample("tiny-bs1")), "html"), encoding="utf-8")
    run = browser.open(page, hover="tk-chart-decode")
    assert run.tooltips, "hovering the decode chart showed no tooltip"
    assert "duration:" in run.tooltips[0] and "tracekit::decode#" in run.tooltips[0]


@needs_browser
def test_hostile_report_is_inert_in_chromium(browser, tmp_path):
    from test_report_hostile import HOSTILE, hostile_analysis

    from tracekit.report import render
    from tracekit.report.render_html import HtmlRenderer

    analysis = hostile_analysis(tmp_path)
    expected = len(HtmlRenderer().view_model(analysis.to_dict())["chart_items"])
    page = tmp_path / "hostile.html"
    page.write_text(render(analysis, "html"), encoding="utf-8")
    shot = _shots(tmp_path) / "hostile.png"
    run = browser.open(page, screenshot=shot, hover="tk-chart-decode", evaluate={"forbidden": FORBIDDEN_PROBE})
    _check_page(run, expected, shot)
    assert run.evaluated["forbidden"] == {"pwned": None, "ids": [], "imgs": 0}
    # The hostile step labels are in the tooltip, as text.
    assert run.tooltips and HOSTILE[0] in run.tooltips[0] and HOSTILE[2] in run.tooltips[0]


@needs_browser
def test_page_without_bokeh_says_so(browser, tmp_path):
    """If the inline library failed, charts are replaced by a sentence (not a blank box)."""
    from tracekit.analysis import analyze
    from tracekit.report.render_html import HtmlRenderer

    page = tmp_path / "nojs.html"
    page.write_text(HtmlRenderer(include_js=False).render(analyze(_sample("tiny-bs1"))), encoding="utf-8")
    run = browser.open(page, evaluate={"text": "document.getElementById('tk-chart-decode').textContent"})
    assert run.charts_error == "the inline Bokeh library did not load"
    assert "could not be drawn" in run.evaluated["text"]
    assert run.errors == [] and run.foreign_requests == []


if __name__ == "__main__":
    with Chromium() as browser:
        shots = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in sys.argv[3:]}  # ELEMENT_ID=PATH ...
        result = browser.open(sys.argv[1], screenshot=sys.argv[2] if len(sys.argv) > 2 else None, element_shots=shots)
    print(json.dumps({k: v for k, v in result.__dict__.items()}, indent=1))
    print("errors:", result.errors)
    print("foreign requests:", result.foreign_requests)


# --- pages that fit (issue 44, item 9) ----------------------------------------------------------


@needs_browser
def test_compare_op_column_holds_one_line(browser, tmp_path):
    """Bug: the compare page's "Op" column wrapped a graph-replayed kernel family (190
    characters) into ~12 lines; each op is one line now, the whole name on hover."""
    from click.testing import CliRunner
    from conftest import real_trace_path

    from tracekit.cli import main

    page = tmp_path / "compare.html"
    r = CliRunner().invoke(
        main,
        ["compare", str(real_trace_path("b300_qwen3_moe")), str(real_trace_path("mi300x_qwen3_moe")), "-o", str(page)],
    )
    assert r.exit_code == 0, r.output
    # The name's own height (the row's grows with the kernel columns beside it), against one line.
    probe = (
        "Array.from(document.querySelectorAll('td.op')).map(td => [td.querySelector('code')"
        ".getBoundingClientRect().height, parseFloat(getComputedStyle(td).lineHeight), td.title.length])"
    )
    run = browser.open(page, screenshot=_shots(tmp_path) / "compare-ops.png", evaluate={"ops": probe})
    ops = run.evaluated["ops"]
    assert ops and all(height < 1.5 * line for height, line, _ in ops), ops
    assert max(title for _, _, title in ops) > 100  # the long names are there, in full, on hover


@needs_browser
def test_fleet_table_fits_a_1400_px_window(browser, tmp_path):
    """Bug: the fleet table was 2,076 px wide in a 1,314 px box at a 1,400 px window, its right
    columns (tokens/s, MFU, MBU, idle, the top finding) cut off behind a scrollbar below the rows."""
    from click.testing import CliRunner
    from conftest import real_trace_path

    from tracekit.cli import main

    bad = tmp_path / "notes.txt"
    bad.write_text("not a trace")
    page = tmp_path / "fleet.html"
    paths = [
        str(SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"),
        str(SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz"),
        *(str(real_trace_path(k)) for k in ("b300_moe", "mi300x_decode", "rtx4080_nanovllm")),
        str(bad),
    ]
    r = CliRunner().invoke(main, ["batch", *paths, "-j", "1", "-o", str(page)])
    assert r.exit_code == 1, r.output  # the row of notes.txt is an error, and the table is written
    probe = "(() => { const t = document.getElementById('tk-fleet'); return [t.scrollWidth, t.parentElement.clientWidth]; })()"
    run = browser.open(page, width=1400, screenshot=_shots(tmp_path) / "fleet.png", evaluate={"fit": probe})
    table, box = run.evaluated["fit"]
    assert table <= box, f"the table is {table} px wide in a {box} px box"
    assert run.errors == []
