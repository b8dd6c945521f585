"""A real browser: JupyterLab + headless Chromium run every notebook that draws, offline.

Skips cleanly without Debian's chromium (``/usr/bin/chromium``) or Playwright for Python; no
browser is downloaded. JupyterLab serves a copy of the notebooks (so autosave never writes
outputs into the repository) on a loopback port with a random token, and is stopped (its whole
process group) when the tests end.

Every request the page makes to anything but that server is refused and recorded, as is every
request that fails: a chart that needs a CDN (altair's default renderer loads vega from
cdn.jsdelivr.net) fails the test even on a machine with internet. Every cell that draws a
chart (it calls a ``*_chart(...)`` function or builds a dashboard or the gallery) must show an
SVG or a canvas; no cell may show an error, a stderr stream (a red box in JupyterLab) or a
dashboard's error line. The screenshot of the TTL test goes to ``figures/browser_03_retention.png``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from conftest import runs_engines

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOT = ROOT / "figures" / "browser_03_retention.png"
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
#: A cell that draws a chart: a ``*_chart(`` call, a dashboard or the gallery.
CHART_CELL = re.compile(r"_chart\(|[Dd]ashboard\(|Gallery\(")
#: Notebooks that run vLLM engines (08): they draw nothing (tables and dicts, checked executed by
#: tests/test_notebooks.py), so here they would only start the same engines again, about a minute.
ENGINE_NOTEBOOKS = [n for n in NOTEBOOKS if runs_engines(ROOT / "notebooks" / n)]
#: Chart cells each notebook has at least (so the pattern above cannot silently match nothing).
MIN_CHART_CELLS = {"00_tour.ipynb": 1, "01_window_and_replay.ipynb": 1, "02_fp4.ipynb": 3, "03_retention.ipynb": 3,
                   "04_ttft_and_cost.ipynb": 1, "05_reproduce.ipynb": 1, "06_workshop.ipynb": 4,
                   "07_policy_arena.ipynb": 2}

pytestmark = pytest.mark.browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """Stop the server and its kernels (one process group): TERM, then KILL after 15 s."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # kernels left in the group after the server exited
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _settings(root: Path) -> None:
    """No news or update checks (network), and every cell attached to the page (no windowing)."""
    files = {
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
            {"fetchNews": "false", "checkForUpdates": False},
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    }
    for rel, value in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium not installed at /usr/bin/chromium")
    pytest.importorskip("playwright.sync_api")
    pytest.importorskip("jupyterlab")
    tmp = tmp_path_factory.mktemp("lab")
    work = tmp / "nb"
    shutil.copytree(ROOT / "notebooks", work)
    _settings(tmp / "settings")
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, TIERED_KV_QUICK="1", JUPYTER_CONFIG_DIR=str(tmp / "cfg"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(tmp / "ws"),
               JUPYTER_RUNTIME_DIR=str(tmp / "rt"), XDG_CACHE_HOME=os.environ.get(
                   "XDG_CACHE_HOME", str(Path.home() / ".cache")))
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={work}", "--LabApp.expose_app_in_browser=True",
           "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # CI containers run as root
    log = open(tmp / "lab.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("JupyterLab did not start:\n" + (tmp / "lab.log").read_text()[-3000:])
            time.sleep(0.5)
        yield base, token
    finally:
        _stop(proc)
        log.close()


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=FLAGS)
        try:
            yield b
        finally:
            b.close()


class Offline:
    """A page that may only talk to the JupyterLab server; everything else is refused and recorded."""

    def __init__(self, browser, base: str) -> None:
        self.base_host = urllib.parse.urlparse(base).netloc
        self.outside: list[str] = []
        self.failed: list[str] = []
        self.console: list[str] = []
        self.page = browser.new_page(viewport={"width": 1500, "height": 1100})
        self.page.route("**/*", self._route)
        self.page.on("requestfailed", lambda r: self.failed.append(f"{r.url} ({r.failure})"))
        self.page.on("console", lambda m: self.console.append(m.text) if m.type == "error" else None)

    def _route(self, route) -> None:
        url = route.request.url
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme in ("data", "blob") or parsed.netloc == self.base_host:
            route.continue_()
        else:
            self.outside.append(url)
            route.abort()

    def problems(self) -> list[str]:
        fetch = [u for u in self.failed if "/api/" not in u or "ERR_ABORTED" not in u]
        scripts = [m for m in self.console if "Error loading script" in m or "ERR_NAME_NOT_RESOLVED" in m]
        return [f"outside request: {u}" for u in self.outside] + [f"failed: {u}" for u in fetch] + scripts

    def close(self) -> None:
        self.page.close()


def _open(page, base: str, token: str, name: str) -> None:
    page.goto(f"{base}/lab/tree/{name}?reset&token={token}", timeout=90_000)
    page.wait_for_function(
        "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
        " && window.jupyterapp.shell.currentWidget.sessionContext"
        " && window.jupyterapp.shell.currentWidget.sessionContext.session"
        " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel",
        timeout=90_000,
    )


_STATE = """() => {
  const nb = window.jupyterapp.shell.currentWidget;
  const cells = nb.content.widgets.map((c, i) => ({i, type: c.model.type, c}))
    .filter(x => x.type === 'code');
  const kernel = nb.sessionContext.session && nb.sessionContext.session.kernel;
  const out = cells.map(({i, c}) => {
    const outputs = c.model.outputs.toJSON();
    const node = c.node.querySelector('.jp-Cell-outputWrapper') || c.node;
    const drawn = [...node.querySelectorAll('svg, canvas, img')].filter(e => {
      if (e.tagName === 'IMG' && !(e.src || '').startsWith('data:image/svg')) return false;
      if (e.closest('.jp-OutputPrompt, .jp-InputPrompt, .lm-Widget.jp-Toolbar, button')) return false;
      const r = e.getBoundingClientRect(); return r.width > 50 && r.height > 50;
    }).length;
    return {i, source: c.model.sharedModel.getSource(), count: c.model.executionCount,
            running: c.model.executionState === 'running', drawn,
            errors: outputs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue),
            stderr: outputs.filter(o => o.output_type === 'stream' && o.name === 'stderr')
                           .map(o => [].concat(o.text).join('').slice(0, 300)),
            dashboardErrors: [...node.querySelectorAll('.tkv-error')].map(e => e.innerText.slice(0, 300)),
            text: node.innerText.slice(0, 200)};
  });
  return {status: kernel ? kernel.status : 'none', cells: out};
}"""


def _run_all(page, timeout_s: float = 420.0) -> dict:
    """Run every cell; return the state once all ran (or a cell failed, or the time is up)."""
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    deadline = time.monotonic() + timeout_s
    state = {}
    while time.monotonic() < deadline:
        time.sleep(0.5)
        state = page.evaluate(_STATE)
        if any(c["errors"] for c in state["cells"]):
            return state
        if state["status"] == "idle" and all(c["count"] is not None and not c["running"] for c in state["cells"]):
            return state
    state["timed_out"] = True
    return state


def _wait_for_charts(page, timeout_s: float = 60.0) -> dict:
    """The state once every chart cell has drawn (widgets render after their cell finished)."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = page.evaluate(_STATE)
        pending = [c for c in state["cells"] if CHART_CELL.search(c["source"]) and not c["drawn"]]
        if not pending or time.monotonic() > deadline:
            return state
        time.sleep(1.0)


def _shutdown_kernels(base: str, token: str) -> None:
    req = urllib.request.Request(f"{base}/api/kernels?token={token}")
    with urllib.request.urlopen(req, timeout=10) as r:
        kernels = json.loads(r.read())
    for k in kernels:
        urllib.request.urlopen(urllib.request.Request(f"{base}/api/kernels/{k['id']}?token={token}",
                                                      method="DELETE"), timeout=10).close()


def test_the_notebooks_left_out_draw_nothing():
    """Only a notebook without a chart cell may be left to tests/test_notebooks.py."""
    for name in ENGINE_NOTEBOOKS:
        cells = json.loads((ROOT / "notebooks" / name).read_text())["cells"]
        drawing = ["".join(c["source"])[:60] for c in cells if c["cell_type"] == "code"
                   and CHART_CELL.search("".join(c["source"]))]
        assert not drawing, f"{name} draws {drawing}: run it here (drop it from ENGINE_NOTEBOOKS)"


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in NOTEBOOKS if n not in ENGINE_NOTEBOOKS])
def test_notebook_runs_offline_and_every_chart_cell_draws(lab, browser, name):
    base, token = lab
    page = Offline(browser, base)
    try:
        _open(page.page, base, token, name)
        state = _run_all(page.page)
        assert not state.get("timed_out"), f"{name}: cells still running: " + str(
            [(c["i"], c["source"][:60]) for c in state["cells"] if c["count"] is None or c["running"]])
        state = _wait_for_charts(page.page)
        cells = state["cells"]
        errors = [(c["i"], c["errors"]) for c in cells if c["errors"]]
        assert not errors, f"{name}: cells raised {errors}"
        stderr = [(c["i"], c["stderr"]) for c in cells if c["stderr"]]
        assert not stderr, f"{name}: stderr shown in red boxes: {stderr}"
        dash = [(c["i"], c["dashboardErrors"]) for c in cells if c["dashboardErrors"]]
        assert not dash, f"{name}: dashboards report errors: {dash}"
        charts = [c for c in cells if CHART_CELL.search(c["source"])]
        assert len(charts) >= MIN_CHART_CELLS.get(name, 0), f"{name}: found {len(charts)} chart cells"
        blank = [(c["i"], c["source"][:60], c["text"][:120]) for c in charts if not c["drawn"]]
        assert not blank, f"{name}: chart cells without an SVG or canvas: {blank}"
        if name == "04_ttft_and_cost.ipynb":  # the admission checkbox's label was cut off
            cut = page.page.evaluate("""() => [...document.querySelectorAll('.widget-checkbox')]
                .filter(e => e.innerText.includes('admission'))
                .map(e => { const l = e.querySelector('label') || e; return l.scrollWidth - l.clientWidth; })""")
            assert cut and max(cut) <= 1, f"admission checkbox label overflows by {cut} px"
        assert not page.problems(), f"{name}: network use: {page.problems()[:10]}"
    finally:
        page.close()
        _shutdown_kernels(base, token)


def _hit_text(page) -> str:
    return page.locator(".tkv-hit-chatbot").first.inner_text(timeout=1000).strip()


def test_ttl_readout_changes_the_displayed_hit_rate(lab, browser):
    base, token = lab
    page = Offline(browser, base)
    p = page.page
    try:
        _open(p, base, token, "03_retention.ipynb")
        p.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        hit = p.locator(".tkv-hit-chatbot").first
        hit.wait_for(state="visible", timeout=180_000)
        before = _hit_text(p)
        # the first TTL slider (real trace, class chatbot): type a short TTL into its readout box
        row = p.locator(".widget-hbox", has=p.locator(".widget-hslider", has_text="TTL chatbot")).first
        row.scroll_into_view_if_needed()
        box = row.locator(".tkv-readout input")
        assert box.input_value().endswith(("s", "m", "h", "d")), box.input_value()  # a duration, for people
        box.click()
        p.keyboard.press("Control+A")
        p.keyboard.type("20")
        p.keyboard.press("Enter")
        p.wait_for_function(
            "(before) => { const e = document.querySelector('.tkv-hit-chatbot');"
            " return e && e.innerText.trim() !== before; }",
            arg=before, timeout=60_000,
        )
        after = _hit_text(p)
        assert row.locator(".tkv-readout input").input_value() == "20 s"
        SHOT.parent.mkdir(parents=True, exist_ok=True)
        p.locator(".vega-embed").first.scroll_into_view_if_needed()  # the chart, redrawn
        p.screenshot(path=str(SHOT), full_page=False)
        assert not page.problems(), page.problems()[:10]
    finally:
        page.close()
        _shutdown_kernels(base, token)
    assert before != after
    assert float(after.rstrip("%")) < float(before.rstrip("%")), "a 20 s TTL must lower the hit rate"
    assert SHOT.stat().st_size > 10_000
