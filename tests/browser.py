"""JupyterLab in a real browser, for tests/test_browser.py.

``Lab`` runs the project's own JupyterLab (the ``jupyter`` next to the Python
running the tests, so kernels come from the same environment) on a free
localhost port with a token, in a throw-away copy of the course; Playwright
drives Debian's Chromium (``/usr/bin/chromium``, never a downloaded browser)
against it. ``Notebook`` wraps the few things a student does in a notebook:
type into a cell, run everything, press a toolbar button.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path(os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium"))
JUPYTER = Path(sys.executable).parent / "jupyter"
ARTIFACTS = ROOT / "tests" / "artifacts" / "browser"
# Headless Chromium as root in a container, and quiet: no calls home, no
# component or safe-browsing downloads, no first-run pages.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-domain-reliability",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-client-side-phishing-detection",
    "--disable-features=Translate,MediaRouter,OptimizationHints",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--disable-dev-shm-usage",
]
# JupyterLab settings for the test session: every cell stays in the page
# (no virtual scrolling, so a test can find cell 20 without scrolling to it),
# and no news or update prompts over the notebook.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                         "checkForUpdates": False},
}
WIDGET_SOURCE = re.compile(r"widget|ipywidgets|jupyterlab-manager", re.I)


def skip_reason() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if not CHROMIUM.exists():
        return (f"browser tests skipped: Chromium not found at {CHROMIUM} (Debian packages `chromium` and "
                "`chromium-driver`; `python3 course.py test` installs them when run as root)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "browser tests skipped: playwright is not installed in this environment (requirements.txt)"
    if not JUPYTER.exists():
        return f"browser tests skipped: no jupyter next to {sys.executable}"
    try:
        import axe_playwright_python  # noqa: F401
    except ImportError:
        return "browser tests skipped: axe-playwright-python is not installed in this environment (requirements.txt)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def course_copy(dest: Path) -> Path:
    """The parts of the course JupyterLab serves, copied so that nothing a test
    does (saving, validating, the gradebook) touches the repository."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "nbgrader_config.py", dest / "nbgrader_config.py")
    for folder in ("source", "release"):
        shutil.copytree(ROOT / folder, dest / folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    return dest


def read_saved(path: Path, timeout: float = 30.0):
    """The notebook at ``path`` as JupyterLab left it. JupyterLab saves in place after
    keeping a backup, so a read can land mid-write (an empty or cut file): read again."""
    import nbformat
    deadline = time.monotonic() + timeout
    while True:
        try:
            return nbformat.read(path, as_version=4)
        except ValueError:   # nbformat.reader.NotJSONError is one
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class Lab:
    """A JupyterLab server on ``root`` (also its working directory, where
    nbgrader's server extensions read ``nbgrader_config.py``)."""

    def __init__(self, root: Path, home: Path):
        self.root, self.home = root, home
        self.port, self.token = free_port(), secrets.token_hex(16)
        self.proc: subprocess.Popen | None = None
        self.log_path = home / "jupyterlab.log"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str, **query: str) -> str:
        q = "&".join([f"token={self.token}", *(f"{k}={v}" if v else k for k, v in query.items())])
        return f"{self.base}/{path.lstrip('/')}?{q}"

    def _env(self) -> dict:
        env = dict(os.environ)
        env["PATH"] = str(JUPYTER.parent) + os.pathsep + env.get("PATH", "")  # nbgrader runs alembic
        for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                         ("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTERLAB_SETTINGS_DIR", "settings"),
                         ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"), ("IPYTHONDIR", "ipython")):
            env[var] = str(self.home / sub)
        for var in ("NBGRADER_EXECUTION", "JUPYTER_PATH", "MPLBACKEND"):
            env.pop(var, None)
        env["PYTHONUTF8"] = "1"
        return env

    def start(self, timeout: float = 120.0) -> None:
        for name, value in LAB_SETTINGS.items():
            path = self.home / "settings" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(value), encoding="utf-8")
        args = [str(JUPYTER), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
                "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={self.root}",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--allow-root")
        args += getattr(self, "extra_args", [])
        self.log = open(self.log_path, "w", encoding="utf-8")
        self.proc = subprocess.Popen(args, cwd=self.root, env=self._env(), stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.proc.returncode}:\n{self.log_text()}")
            try:
                self.api("GET", "api/status")
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.25)
        self.stop()
        raise TimeoutError(f"JupyterLab did not answer within {timeout:.0f} s:\n{self.log_text()}")

    def api(self, method: str, path: str):
        req = urllib.request.Request(f"{self.base}/{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        """Stop every kernel (one chapter's kernel must not slow the next)."""
        for k in self.api("GET", "api/kernels"):
            self.api("DELETE", f"api/kernels/{k['id']}")

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if getattr(self, "log", None):
            self.log.close()


def launch_chromium(playwright):
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)


class Console:
    """JavaScript errors seen by one page: console errors and uncaught exceptions."""

    def __init__(self, page):
        self.errors: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda err: self.errors.append(f"pageerror: {err.name}: {err.message}\n{err.stack}"))

    def _console(self, msg) -> None:
        if msg.type == "error":
            loc = msg.location or {}
            self.errors.append(f"console.error: {msg.text} ({loc.get('url', '')}:{loc.get('lineNumber', '')})")

    def save(self, test: str) -> None:
        """Append every error to tests/artifacts/browser/console-errors.txt (for reading after a run)."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        with open(ARTIFACTS / "console-errors.txt", "a", encoding="utf-8") as f:
            f.write(f"== {test}: {len(self.errors)} error(s)\n" + "".join(e + "\n" for e in self.errors))

    def from_widgets(self) -> list[str]:
        return [e for e in self.errors if WIDGET_SOURCE.search(e)]


# Where the page already runs JupyterLab with its app exposed (a Lab with ``in_app``: the
# server started with --LabApp.expose_app_in_browser), the next notebook is opened in the
# running app, the documents open before disposed of (as the ``reset`` of a fresh load
# leaves none), instead of loading JupyterLab again (3-4 s a notebook on 2 cores).
OPEN_IN_APP = """async path => { const app = window.jupyterapp;
    if (!app || !document.querySelector('.jp-LabShell')) return false;
    for (const w of [...app.shell.widgets('main')]) w.dispose();
    const w = await app.commands.execute('docmanager:open', {path, factory: 'Notebook'});
    await w.context.ready; await w.sessionContext.ready;
    return true; }"""


class Notebook:
    """One notebook open in JupyterLab, driven as a student would."""

    def __init__(self, page, lab: Lab, path: str, timeout_ms: int = 90_000):
        self.page, self.lab, self.path, self.timeout = page, lab, path, timeout_ms
        if not (getattr(lab, "in_app", False) and page.evaluate(OPEN_IN_APP, path)):
            page.goto(lab.url(f"lab/tree/{path}", reset=""))
        self.panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").last
        self.panel.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=self.timeout)
        self.wait_idle()

    @property
    def cells(self):
        return self.panel.locator(".jp-Notebook-cell")

    def cell(self, index: int):
        return self.cells.nth(index)

    def wait_idle(self, timeout_ms: int | None = None) -> None:
        """Until the kernel is started and idle (the status bar says so: the
        toolbar's indicator also reads 'idle' before the kernel exists)."""
        self.page.wait_for_function(
            """() => [...document.querySelectorAll('.jp-StatusBar-Widget')]
                         .some(e => /\\|\\s*Idle/.test(e.textContent))""",
            timeout=timeout_ms or self.timeout)

    def menu(self, top: str, item: str) -> None:
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(top)}$")).click()
        self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).first.click()

    def type_into(self, index: int, text: str) -> None:
        """Replace the text of cell ``index`` by typing, as a student would
        (inserted verbatim: no auto-indent or bracket closing)."""
        cell = self.cell(index)
        if "jp-MarkdownCell" in (cell.get_attribute("class") or ""):
            cell.locator(".jp-MarkdownOutput").dblclick()      # a rendered markdown cell: open its editor
        cell.locator(".cm-content").click()
        self.page.keyboard.press("Control+A")
        self.page.keyboard.insert_text(text)
        self.page.keyboard.press("Escape")

    def save(self) -> None:
        """Ctrl+S until the tab is no longer marked changed. JupyterLab asks
        whether to overwrite when a save crosses its own autosave (it then
        believes the file changed on disk): the student's answer is the one to keep."""
        self.page.keyboard.press("Control+S")
        clean = """() => !document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)')
                         ?.closest('.lm-DockPanel')?.querySelector('.lm-TabBar-tab.lm-mod-current.jp-mod-dirty')"""
        self.page.wait_for_function(f"() => ({clean})() || document.querySelector('.jp-Dialog')",
                                    timeout=self.timeout)
        dialog = self.page.locator(".jp-Dialog")
        if dialog.count():
            dialog.locator(".jp-Dialog-button.jp-mod-accept").last.click()
            self.page.wait_for_function(clean, timeout=self.timeout)

    def run_all(self, timeout_ms: int | None = None) -> list[int]:
        """Run ▸ Run All Cells, wait until nothing is queued or running any
        more (every cell ran, or a cell failed and the rest were cancelled),
        and return the indices of the code cells that did not run."""
        self.menu("Run", "Run All Cells")
        self.page.wait_for_function(
            """() => { const p = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
                       const prompts = [...p.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
                       const idle = [...document.querySelectorAll('.jp-StatusBar-Widget')]
                                        .some(e => /\\|\\s*Idle/.test(e.textContent));
                       return idle && prompts.some(e => /\\[\\d+\\]/.test(e.textContent))
                                   && !prompts.some(e => e.textContent.includes('[*]')); }""",
            timeout=timeout_ms or self.timeout)
        return self.panel.evaluate("""p => [...p.querySelectorAll('.jp-Notebook-cell')]
            .map((c, i) => c.classList.contains('jp-CodeCell')
                           && !/\\[\\d+\\]/.test(c.querySelector('.jp-InputPrompt').textContent) ? i : -1)
            .filter(i => i >= 0)""")

    def output_text(self, index: int) -> str:
        return self.cell(index).locator(".jp-Cell-outputArea").inner_text()

    def error_outputs(self) -> list[str]:
        errs = self.panel.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        return [t for t in errs.all_inner_texts() if "Traceback" in t or "Error" in t]

    def toolbar_button(self, label: str):
        return self.panel.locator(".jp-Toolbar .jp-ToolbarButtonComponent-label",
                                  has_text=re.compile(rf"^\s*{re.escape(label)}\s*$")).first


AXE_TAGS = ("wcag2a", "wcag2aa", "wcag21a", "wcag21aa")    # WCAG 2.0 and 2.1, levels A and AA


def axe(page, context=None, skip: tuple[str, ...] = ()) -> list[dict]:
    """The violations axe-core finds on ``page`` (or inside ``context``: a CSS
    selector or axe's {"include": ..., "exclude": ...}) under the WCAG 2.0/2.1
    A and AA rules, less the rules named in ``skip``."""
    from axe_playwright_python.sync_playwright import Axe

    options = {"runOnly": {"type": "tag", "values": list(AXE_TAGS)}, "resultTypes": ["violations"],
               "rules": {rule: {"enabled": False} for rule in skip}}
    return Axe().run(page, context=context, options=options).response["violations"]


def axe_report(violations: list[dict]) -> str:
    """One line per violating element: the rule, what axe says, the element."""
    lines = []
    for v in violations:
        for node in v["nodes"]:
            said = (node.get("any") or node.get("all") or node.get("none") or [{}])[0].get("message", "")
            lines.append(f"{v['id']} ({v['impact']}): {said} | {' '.join(node['target'])} | {node['html'][:160]}")
    return "\n".join(lines)


def axe_count(violations: list[dict]) -> int:
    return sum(len(v["nodes"]) for v in violations)


def shot(target, name: str) -> Path:
    """Save a screenshot of a page or an element as tests/artifacts/browser/<name>.png."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    target.screenshot(path=str(path))
    return path


def widget_shows(page, chapter: str, spec: dict, target) -> None:
    """What a chapter's main picture shows once its cell has run (``target``: the ipywidgets
    box, or the cell's output where the picture is something else): the labels of its
    WIDGET spec (tests/catalogue/<chapter>.py) and the numbers its ``check_widget`` computes
    from the course's helpers, with no error from the widgets' JavaScript (``page.console``);
    a screenshot kept as widget_<chapter>.png."""
    import importlib
    if spec.get("ipywidgets", True):   # the widget's own output (figure or HTML) arrives after the box
        page.wait_for_function("w => w.querySelector('img, .widget-html-content:not(:empty)')",
                               arg=target.element_handle())
    shot(target, f"widget_{chapter}")
    text = target.inner_text()
    for label in spec["labels"]:
        assert label in text, f"{chapter}: {label!r} not shown in the widget:\n{text[:500]}"
    check = getattr(importlib.import_module(f"catalogue.{chapter}"), "check_widget", None)
    if check is not None:
        check(target, text)
    assert page.console.from_widgets() == [], (chapter, page.console.from_widgets())
