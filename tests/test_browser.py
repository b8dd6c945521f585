"""A real browser: JupyterLab + headless Chromium run 03_retention and move the TTL slider.

Skips cleanly without Debian's chromium (``/usr/bin/chromium``) or Playwright for Python; no
browser is downloaded. JupyterLab serves a copy of the notebook (so autosave never writes
outputs into the repository) on a loopback port with a random token, and is stopped (its whole
process group) when the test ends. The screenshot goes to ``figures/browser_03_retention.png``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOT = ROOT / "figures" / "browser_03_retention.png"

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


@pytest.fixture()
def lab(tmp_path):
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium not installed at /usr/bin/chromium")
    pytest.importorskip("playwright.sync_api")
    pytest.importorskip("jupyterlab")
    work = tmp_path / "nb"
    work.mkdir()
    shutil.copy(ROOT / "notebooks" / "03_retention.ipynb", work)
    port, token = _free_port(), secrets.token_hex(16)
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')
    env = dict(os.environ, TIERED_KV_QUICK="1", JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "ws"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"), XDG_CACHE_HOME=os.environ.get(
                   "XDG_CACHE_HOME", str(Path.home() / ".cache")))
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={work}", "--LabApp.expose_app_in_browser=True",
           "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # CI containers run as root
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("JupyterLab did not start:\n" + (tmp_path / "lab.log").read_text()[-3000:])
            time.sleep(0.5)
        yield base, token
    finally:
        _stop(proc)
        log.close()


def _hit_text(page) -> str:
    return page.locator(".tkv-hit-chatbot").first.inner_text(timeout=1000).strip()


def test_ttl_slider_changes_the_displayed_hit_rate(lab):
    from playwright.sync_api import sync_playwright

    base, token = lab
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.goto(f"{base}/lab/tree/03_retention.ipynb?token={token}", timeout=60_000)
            page.wait_for_function(
                "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                " && window.jupyterapp.shell.currentWidget.sessionContext"
                " && window.jupyterapp.shell.currentWidget.sessionContext.session"
                " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel",
                timeout=60_000,
            )
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            hit = page.locator(".tkv-hit-chatbot").first
            hit.wait_for(state="visible", timeout=120_000)
            before = _hit_text(page)
            # the first TTL slider (real trace, class chatbot): type a short TTL into its readout
            slider = page.locator(".widget-hslider", has_text="TTL chatbot").first
            slider.scroll_into_view_if_needed()
            readout = slider.locator(".widget-readout")
            readout.click()
            page.keyboard.press("Control+A")
            page.keyboard.type("20")
            page.keyboard.press("Enter")
            page.wait_for_function(
                "(before) => { const e = document.querySelector('.tkv-hit-chatbot');"
                " return e && e.innerText.trim() !== before; }",
                arg=before, timeout=60_000,
            )
            after = _hit_text(page)
            SHOT.parent.mkdir(parents=True, exist_ok=True)
            page.locator(".vega-embed").first.scroll_into_view_if_needed()  # the chart, redrawn
            page.screenshot(path=str(SHOT), full_page=False)
        finally:
            browser.close()
    assert before != after
    assert float(after.rstrip("%")) < float(before.rstrip("%")), "a 20 s TTL must lower the hit rate"
    assert SHOT.stat().st_size > 10_000
