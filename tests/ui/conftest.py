"""Browser tests: a real `jupyter lab` on a free port with a throwaway root, settings and
workspace, driven by Python playwright and Debian's chromium (never `playwright install`).

The labextension must be built (`pip install .` / `make setup` run its build; by hand:
`cd labextension && jlpm install && jlpm build`). When it is built in the tree, the server loads
that build through a temporary JUPYTER_PATH, which Lab reads ahead of a copy installed in this
environment (an install made before the last `jlpm build` is stale).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXTENSION_NAME = "torchfuser-labextension"
BUILT_EXTENSION = REPO / "torchfuser" / "labextension"
WIDGET_BUNDLE = REPO / "explorer" / "static" / "widget.js"
ARTIFACTS = REPO / "test-artifacts" / "ui"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
TOKEN = "torchfuser-ui-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _installed_extension() -> Path | None:
    for base in [Path(sys.prefix), Path.home() / ".local"]:
        candidate = base / "share" / "jupyter" / "labextensions" / EXTENSION_NAME
        if (candidate / "package.json").is_file():
            return candidate
    return None


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("*.png"):  # screenshots from an earlier run would mislead
        old.unlink()
    return ARTIFACTS


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory):
    """Yields (base_url, root_dir) of a running JupyterLab; stops it afterwards."""
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is missing: `apt-get install -y chromium` (make setup does this)")
    if not WIDGET_BUNDLE.is_file() or not (_installed_extension() or (BUILT_EXTENSION / "package.json").is_file()):
        pytest.fail("the labextension is not built: run `pip install .` or `cd labextension && jlpm install && jlpm build`")
    root = tmp_path_factory.mktemp("lab-root")
    home = tmp_path_factory.mktemp("lab-home")
    settings = home / "app-settings"
    settings.mkdir()
    # The news pop-up would cover outputs.
    (settings / "overrides.json").write_text(json.dumps(
        {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}))
    env = dict(os.environ)
    env["JUPYTER_CONFIG_DIR"] = str(home / "config")
    env["JUPYTER_RUNTIME_DIR"] = str(home / "runtime")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if (BUILT_EXTENSION / "package.json").is_file():
        data = home / "data"
        (data / "labextensions").mkdir(parents=True)
        (data / "labextensions" / EXTENSION_NAME).symlink_to(BUILT_EXTENSION)
        env["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(data), env.get("JUPYTER_PATH")]))
    port = _free_port()
    log = open(home / "lab.log", "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root}",
         f"--LabApp.app_settings_dir={settings}", f"--LabApp.user_settings_dir={home / 'user-settings'}",
         f"--LabApp.workspaces_dir={home / 'workspaces'}", "--LabApp.expose_app_in_browser=True"],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2)
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"jupyter lab did not start; log:\n{(home / 'lab.log').read_text()[-3000:]}")
            time.sleep(0.3)
    yield base, root
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()
    shutil.copy(home / "lab.log", ARTIFACTS / "lab.log") if ARTIFACTS.is_dir() else None


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def open_notebook(browser, base: str, name: str):
    """A new browser context on notebook `name` in Lab; returns (context, page, page errors)."""
    context = browser.new_context(viewport={"width": 1500, "height": 1200})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    # A workspace per notebook, so Lab does not also restore the other notebook's tab.
    page.goto(f"{base}/lab/workspaces/{Path(name).stem}/tree/{name}?token={TOKEN}")
    page.wait_for_selector(".jp-Notebook", timeout=60_000)
    page.wait_for_function("window.jupyterapp !== undefined && window.jupyterapp.commands !== undefined")
    return context, page, errors


def answer_kernel_dialog(page, button: str, wait_ms: int = 5_000) -> bool:
    """Lab may ask which kernel to start; answer it if it does."""
    choice = page.locator(".jp-Dialog button", has_text=button)
    try:
        choice.first.click(timeout=wait_ms)
        return True
    except Exception:
        return False
