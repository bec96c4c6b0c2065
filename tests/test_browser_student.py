"""What a student sees, in a real browser: their own workspace, a student pack,
and a feedback page opened with no network.

- in a git clone of the course, a student types an answer in their workspace;
  the instructor changes chapter 1 and runs the release step (what
  `course.py release` runs once the environment is there); the student
  starts again: the answer is still there, the new version sits beside it, the
  student is told once, and `git status` is clean;
- in the zh student pack: Chinese menus, no formgrader or Create Assignment
  anywhere, and Validate logs no exchange or configuration warning;
- a feedback page made by the course's feedback step shows its formulas as
  drawn maths with every network request blocked.

The maths conversion itself (coursekit/base/mathml.py) is checked here too, without
a browser, on every chapter's markdown.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import browser
import nbformat
import pytest
from harness import ROOT

from coursekit.author import dist
from coursekit.base import mathml
from coursekit.student import workspace as ws

needs_browser = pytest.mark.skipif(browser.skip_reason() is not None, reason=str(browser.skip_reason()))
pytestmark = [pytest.mark.xdist_group("browser")]

CH01 = "ch01_attention"
CH02 = "ch02_causal_mask"
COPIED = ("course.py", "coursekit", "helpers", "nbgrader_config.py", "release", "source", ".gitignore",
          "requirements.txt", "pyproject.toml", "Makefile")
NOTEBOOK_SETTINGS = {"@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
                     "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosaveInterval": 2},
                     "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
                         {"fetchNews": "false", "checkForUpdates": False}}
INSTRUCTOR_WORDS = re.compile(r"Formgrader|Create Assignment|创建作业|Course List|Courses")


def load_course_py(path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"course_at_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class StudentLab(browser.Lab):
    """`course.py lab` of a course folder (a clone or a pack), started the way
    that command starts it (``student_lab``: workspace brought up to date,
    student configuration written), on a free port, with its output kept.
    Only the environment check is left out: the folder runs on this project's
    environment through a link."""

    def __init__(self, course_dir, home):
        super().__init__(course_dir / "workspace", home)
        self.course_py = load_course_py(course_dir / "course.py")

    def start(self, capsys, timeout: float = 120.0) -> str:
        args, env, cwd, _ = self.course_py.student_lab(self.root, port=self.port, token=self.token)
        told = capsys.readouterr().out
        for name, value in NOTEBOOK_SETTINGS.items():
            path = self.root / ws.CONFIG / "lab" / "user-settings" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(value), encoding="utf-8")
        env.update(JUPYTER_RUNTIME_DIR=str(self.home / "runtime"), IPYTHONDIR=str(self.home / "ipython"),
                   JUPYTER_DATA_DIR=str(self.home / "data"))
        for var in ("NBGRADER_EXECUTION", "JUPYTER_PATH", "MPLBACKEND", "COURSE_EXCHANGE"):
            env.pop(var, None)
        self.home.mkdir(parents=True, exist_ok=True)
        self.log = open(self.log_path, "a", encoding="utf-8")
        self.proc = subprocess.Popen(args + ["--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
                                     cwd=cwd, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.wait(timeout)
        return told

    def wait(self, timeout: float) -> None:
        import time
        import urllib.error
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


class Notebook(browser.Notebook):
    """browser.Notebook in a JupyterLab that may speak Chinese (the status
    bar then says 空闲 for Idle)."""

    def wait_idle(self, timeout_ms: int | None = None) -> None:
        self.page.wait_for_function(
            """() => [...document.querySelectorAll('.jp-StatusBar-Widget')]
                         .some(e => /\\|\\s*(Idle|空闲)/.test(e.textContent))""",
            timeout=timeout_ms or self.timeout)


def link_environment(folder) -> None:
    """The folder runs on this project's environment (a link, kept out of git)."""
    (folder / ".venv").symlink_to(ROOT / ".venv")


def git(folder, *args) -> str:
    return subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, check=True).stdout


def clone_of_the_course(dest):
    """The course's files in a fresh git repository, all committed."""
    dest.mkdir()
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
        else:
            shutil.copy(src, dest / name)
    git(dest, "init", "-q")
    (dest / ".git" / "info" / "exclude").write_text(".venv\n")
    link_environment(dest)
    commit(dest, "the course")
    return dest


def commit(folder, message: str) -> None:
    git(folder, "add", "-A")
    git(folder, "-c", "user.name=Instructor", "-c", "user.email=instructor@example.org",
        "commit", "-q", "-m", message)


@pytest.fixture
def context(chromium):
    ctx = chromium.new_context(viewport={"width": 1400, "height": 950}, locale="zh-CN")
    ctx.set_default_timeout(30_000)
    yield ctx
    ctx.close()


def menu_bar(page) -> list[str]:
    page.locator(".lm-MenuBar-itemLabel").first.wait_for()
    return [t.strip() for t in page.locator(".lm-MenuBar-itemLabel").all_inner_texts()]


MENU = ".lm-Menu.lm-MenuBar-menu"


def menu_items(page, top: str) -> list[str]:
    """Open the menu bar's ``top`` menu and read its visible items, in one step: the
    menu is read where it is found, and opened again when it closed before it was read
    (a click that lands while another menu closes, or the lab moving its focus as it
    finishes loading, closes it; on a busy machine the menu's items are laid out
    visibly after it appears). It is left open: ``close_menu`` closes it."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    label = page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(top)}$"))
    for _ in range(3):
        label.click()
        try:
            page.locator(MENU).wait_for(timeout=5_000)
        except PlaywrightTimeout:
            page.keyboard.press("Escape")
            continue
        try:
            page.wait_for_function(f"""() => [...document.querySelectorAll('{MENU} .lm-Menu-item')]
                .some(e => e.getBoundingClientRect().height > 0)""", timeout=5_000)
        except PlaywrightTimeout:
            pass   # a menu without items is reported by the caller
        items = page.evaluate(f"""() => {{
            const m = document.querySelector('{MENU}');
            return m && [...m.querySelectorAll('.lm-Menu-item')]
                .filter(e => e.getBoundingClientRect().height > 0).map(e => e.textContent.trim());
        }}""")
        if items is not None:
            return items
    raise AssertionError(f"the {top!r} menu does not stay open long enough to be read")


def close_menu(page) -> None:
    """Escape, or a click outside the menu when Escape went elsewhere."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    menu = page.locator(MENU)
    page.keyboard.press("Escape")
    for _ in range(3):
        try:
            menu.wait_for(state="detached", timeout=3_000)
            return
        except PlaywrightTimeout:
            page.locator("#jp-main-statusbar").click()
    raise AssertionError("a menu does not close")


def palette_results(page, query: str) -> str:
    """What the command palette lists for ``query``. The palette is a modal
    that closes when the focus moves: Ctrl+Shift+C is lost when it lands while
    a closing menu still holds the focus, and an open palette can close again
    before it is typed into. So open, type and read are tried together, again
    until the palette still shows the query when its results are read."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    search = page.locator(".lm-CommandPalette-input")
    results = page.locator(".lm-CommandPalette-content")
    for _ in range(6):
        try:
            if not search.is_visible():
                page.locator("#jp-main-statusbar").click()
                page.keyboard.press("Control+Shift+C")
                search.wait_for(state="visible", timeout=5_000)
            search.fill(query, timeout=5_000)
            text = results.inner_text(timeout=5_000)
            if search.is_visible() and search.input_value(timeout=1_000) == query:
                return text
        except PlaywrightTimeout:
            continue
    raise AssertionError("the command palette does not stay open to be searched")


def short_exercise(workspace) -> str:
    """Chapter 1 cut to its setup cells and first exercise (its heading, answer
    and test cell, nbgrader metadata kept), so that Validate has little to run."""
    doc = nbformat.read(workspace / CH01 / f"{CH01}.ipynb", as_version=4)
    code = [i for i, c in enumerate(doc.cells) if c.cell_type == "code"]
    answer = answer_cell(doc)
    heading = max(i for i, c in enumerate(doc.cells[:answer]) if c.cell_type == "markdown" and "#" in c.source)
    test = next(i for i in code if i > answer and doc.cells[i].metadata.get("nbgrader", {}).get("grade"))
    doc.cells = [doc.cells[i] for i in (*code[:2], heading, answer, test)]
    nbformat.write(doc, workspace / CH01 / "first_exercise.ipynb")
    return f"{CH01}/first_exercise.ipynb"


def answer_cell(nb_doc) -> int:
    return next(i for i, c in enumerate(nb_doc.cells) if c.metadata.get("nbgrader", {}).get("solution")
                and c.cell_type == "code")


# ------------------------------------------------------------------ the workspace


@needs_browser
def test_students_answer_survives_a_new_release(context, tmp_path, capsys):
    course = clone_of_the_course(tmp_path / "course")
    lab = StudentLab(course, tmp_path / "home")
    told = lab.start(capsys)
    assert "workspace" in told and not list(lab.root.rglob("*.new-*"))
    rel = f"{CH01}/{CH01}.ipynb"
    cell = answer_cell(nbformat.read(lab.root / rel, as_version=4))
    answer = "# 我的答案：先减去最大值\nMY_ANSWER = 42"
    try:
        served = sorted(item["name"] for item in lab.api("GET", "api/contents")["content"])
        assert served == sorted(p.name for p in (course / "release").iterdir() if p.is_dir()), served
        page = context.new_page()
        nb = Notebook(page, lab, rel)
        labels = menu_bar(page)
        assert "文件" in labels and "Nbgrader" not in labels, labels
        nb.type_into(cell, answer)
        nb.save()
        import time
        on_disk = lambda: browser.read_saved(lab.root / rel).cells[cell].source  # noqa: E731
        deadline = time.monotonic() + 30
        while on_disk() != answer and time.monotonic() < deadline:
            time.sleep(0.5)
        assert on_disk() == answer, "the saved notebook does not hold the answer typed"
        browser.shot(page, "workspace_01_student_answer")
        # chapter 2 is only opened: JupyterLab marks it changed (it adds the kernel's language_info) and autosaves
        ch2 = f"{CH02}/{CH02}.ipynb"
        before = (lab.root / ch2).read_bytes()
        Notebook(context.new_page(), lab, ch2)
        deadline = time.monotonic() + 60
        while (lab.root / ch2).read_bytes() == before and time.monotonic() < deadline:
            time.sleep(0.5)
        assert (lab.root / ch2).read_bytes() != before, "chapter 2 was never autosaved"
    finally:
        lab.stop()
    assert browser.read_saved(lab.root / rel).cells[cell].source == answer

    # the instructor changes chapter 1 and releases it (both committed, as an instructor would)
    src = course / "source" / CH01 / f"{CH01}.ipynb"
    doc = nbformat.read(src, as_version=4)
    doc.cells.append(nbformat.v4.new_markdown_cell("补充：新的一节。"))
    nbformat.write(doc, src)
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run([sys.executable, "-m", "coursekit.cli", "release", CH01], cwd=course, env=env, check=True,
                   capture_output=True, timeout=300)
    assert "补充：新的一节。" in (course / "release" / rel).read_text(encoding="utf-8")
    src2 = course / "source" / CH02 / f"{CH02}.ipynb"
    doc = nbformat.read(src2, as_version=4)
    doc.cells.append(nbformat.v4.new_markdown_cell("补充：第 2 章的新一节。"))
    nbformat.write(doc, src2)
    subprocess.run([sys.executable, "-m", "coursekit.cli", "release", CH02], cwd=course, env=env, check=True,
                   capture_output=True, timeout=300)
    commit(course, "chapters 1 and 2: a new section")

    beside = f"{CH01}.new-{datetime.date.today().isoformat()}.ipynb"
    lab = StudentLab(course, tmp_path / "home")
    told = lab.start(capsys)
    try:
        assert beside in told, told
        page = context.new_page()
        page.goto(lab.url(f"lab/tree/{CH01}", reset=""))
        listing = page.locator(".jp-DirListing-content")
        listing.get_by_text(beside).wait_for()
        assert f"{CH01}.ipynb" in listing.inner_text()
        browser.shot(page, "workspace_02_new_version_beside")
        nb = Notebook(page, lab, rel)
        editor = nb.cell(cell).locator(".cm-content").inner_text()
        assert "MY_ANSWER = 42" in editor, editor
    finally:
        lab.stop()
    assert browser.read_saved(lab.root / rel).cells[cell].source == answer
    assert "补充：新的一节。" in (lab.root / CH01 / beside).read_text(encoding="utf-8")
    # the chapter opened and autosaved, never changed by the student, was brought up to date in place
    assert f"{CH02}/{CH02}.ipynb：已更新" in told and not list((lab.root / CH02).glob("*.new-*")), told
    assert "补充：第 2 章的新一节。" in (lab.root / CH02 / f"{CH02}.ipynb").read_text(encoding="utf-8")
    assert git(course, "status", "--porcelain") == ""
    lab.course_py.student_lab(lab.root)                      # a third start: nothing new, nothing said
    assert beside not in capsys.readouterr().out


# ------------------------------------------------------------------ the pack


@needs_browser
def test_zh_pack_shows_a_chinese_student_lab_without_instructor_tools(context, tmp_path, capsys):
    pack = dist.assemble_pack(ROOT / "release", "zh", tmp_path / "pack")
    link_environment(pack)
    lab = StudentLab(pack, tmp_path / "home")
    lab.start(capsys)
    try:
        page = context.new_page()
        page.goto(lab.url("lab", reset=""))
        labels = menu_bar(page)
        assert {"文件", "编辑", "运行"} <= set(labels), labels
        assert "Nbgrader" not in labels, labels
        for top in labels:                                   # every menu, opened: no instructor entry
            items = menu_items(page, top)
            assert items and not INSTRUCTOR_WORDS.search(" ".join(items)), (top, items)
            close_menu(page)
        palette = palette_results(page, "nbgrader")
        assert not INSTRUCTOR_WORDS.search(palette), palette
        page.keyboard.press("Escape")
        tabs = " ".join(page.locator(".lm-TabBar-tab").all_inner_texts() +
                        [t.get_attribute("title") or "" for t in page.locator(".lm-TabBar-tab").all()])
        assert not INSTRUCTOR_WORDS.search(tabs), tabs
        browser.shot(page, "pack_zh_01_lab")

        nb = Notebook(page, lab, short_exercise(lab.root))
        status, text = course_validate(page, nb, "验证", "pack_zh_02_validate")
        assert status == "not_done" and "还没有完成：练习 1。" in text, text  # the untouched chapter is not done
    finally:
        lab.stop()
    log = lab.log_text()
    for warning in ("No nbgrader_config.py", "Unwritable directory", "exchange", "formgrader"):
        assert warning not in log, f"{warning!r} in the student's JupyterLab log:\n{log[-3000:]}"
    assert "Validating" in log or "validate" in log.lower(), log[-2000:]


@needs_browser
def test_the_assignment_list_appears_where_an_exchange_is_configured(context, tmp_path, capsys, monkeypatch):
    pack = dist.assemble_pack(ROOT / "release", "zh", tmp_path / "pack")
    link_environment(pack)
    (tmp_path / "exchange").mkdir()
    monkeypatch.setenv("COURSE_EXCHANGE", str(tmp_path / "exchange"))
    lab = StudentLab(pack, tmp_path / "home")
    lab.start(capsys)
    try:
        page = context.new_page()
        page.goto(lab.url("lab", reset=""))
        assert "Nbgrader" in menu_bar(page)
        items = menu_items(page, "Nbgrader")
        assert items == ["Assignment List"], items                # and nothing for instructors
        page.locator(".lm-Menu-itemLabel", has_text="Assignment List").click()
        page.get_by_text("Released assignments").wait_for()
        browser.shot(page, "pack_zh_03_assignment_list_with_exchange")
    finally:
        lab.stop()
    assert "Unwritable directory" not in lab.log_text()


# ------------------------------------------------------------------ feedback maths


def feedback_html(nb_doc) -> str:
    """The notebook as the course's feedback step writes it (the course's
    template, allow-list and output steps, as nbgrader_config.py configures
    them), with every graded cell scored 0."""
    from coursekit.grade import feedback
    from coursekit.report import score

    configured = (ROOT / "nbgrader_config.py").read_text(encoding="utf-8")
    assert "coursekit.grade.feedback.CourseFrame" in configured and "coursekit.grade.feedback.StudentOutputs" in configured
    cells = [score.CellScore(c.metadata["nbgrader"]["grade_id"], float(c.metadata["nbgrader"]["points"]), 0.0, None)
             for c in nb_doc.cells if c.metadata.get("nbgrader", {}).get("grade")]
    return feedback.page(nb_doc, score.Standing("ann", CH01, cells), CH01)


@needs_browser
def test_feedback_page_draws_its_maths_with_the_network_blocked(context, tmp_path):
    nb_doc = nbformat.read(ROOT / "release" / CH01 / f"{CH01}.ipynb", as_version=4)
    formulas = sum(len(mathml.MATH.findall(c.source)) for c in nb_doc.cells if c.cell_type == "markdown")
    assert formulas > 10
    path = tmp_path / "feedback.html"
    path.write_text(feedback_html(nb_doc), encoding="utf-8")
    blocked = []

    def offline(route):
        if route.request.url.startswith("file:"):
            return route.continue_()
        blocked.append(route.request.url)
        return route.abort()

    context.route("**/*", offline)
    page = context.new_page()
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    found = page.evaluate("""() => [...document.querySelectorAll('math')].map(m => {
        const r = m.getBoundingClientRect(); return [r.width, r.height]; })""")
    assert len(found) == formulas, (len(found), formulas)
    assert all(w > 0 and h > 0 for w, h in found), found[:10]
    fractions = page.evaluate("() => [...document.querySelectorAll('mfrac')].map(f => f.getBoundingClientRect().height)")
    line = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('.text_cell_render p')).lineHeight)")
    assert fractions and max(fractions) > line, (fractions, line)        # a fraction is drawn stacked
    prose = " ".join(page.locator(".text_cell_render").all_inner_texts())
    assert "$" not in prose, prose[prose.index("$") - 80:prose.index("$") + 80]
    assert blocked == [], blocked                                        # the page asks the network for nothing
    page.locator("math").nth(3).scroll_into_view_if_needed()
    browser.shot(page, "feedback_offline_maths")


# ------------------------------------------------------------------ the conversion


def test_every_chapters_maths_converts_with_no_unknown_command():
    for path in sorted((ROOT / "release").glob("*/*.ipynb")):
        unknown = []
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                out = mathml.markdown_math(cell.source, unknown)
                assert not mathml.MATH.search(out), (path.name, out[:300])
                # browsers draw no mathvariant but "normal": a bold or double-struck letter is its Unicode character
                assert not re.search(r'mathvariant="(?!normal")', out), (path.name, out[:300])
        assert unknown == [], f"{path.name}: commands latex2mathml does not know: {sorted(set(unknown))}"


def test_conversion_builds_the_structure_of_each_construct():
    as_ml = mathml.tex_to_mathml
    assert "<mfrac><mi>a</mi><mi>b</mi></mfrac>" in as_ml(r"\frac ab")
    assert "<mfrac><mn>2</mn><mn>3</mn></mfrac>" in as_ml(r"\frac23")
    assert "<msqrt><msub><mi>d</mi><mi>k</mi></msub></msqrt>" in as_ml(r"\sqrt{d_k}")
    assert "<msubsup><mi>x</mi><mi>i</mi><mn>2</mn></msubsup>" in as_ml("x_i^2")
    assert '<mi mathvariant="normal">softmax</mi>' in as_ml(r"\mathrm{softmax}(x)")
    assert "<mtext>blk</mtext>" in as_ml(r"j\in\text{blk}")
    assert "<mi>ℝ</mi>" in as_ml(r"\mathbb R") and "<mi>𝔼</mi>" in as_ml(r"\mathbb E")
    assert as_ml(r"\begin{pmatrix}1&2\\3&4\end{pmatrix}").count("<mtr>") == 2
    assert "<mo>−</mo>" in as_ml("a-b") and "<mo>≤</mo>" in as_ml(r"j\le i")
    # what the layer around latex2mathml adds: upright names and letters, styled letters as Unicode, TeX escapes in text
    assert '<msub><mi>d</mi><mi mathvariant="normal">model</mi></msub>' in as_ml(r"d_{\mathrm{model}}")
    assert '<mi mathvariant="normal">d</mi><mi>x</mi>' in as_ml(r"\mathrm{d}x")
    assert "<mi>𝐖</mi>" in as_ml(r"\mathbf{W}") and "<mi>𝜶</mi>" in as_ml(r"\boldsymbol{\alpha}")
    assert "<mtext>max&#95;steps</mtext>" in as_ml(r"\text{max\_steps}")
    cases = as_ml(r"\begin{cases}a & b\\[2mm] c & d\end{cases}")
    assert cases.count("<mtr>") == 2 and "2mm" not in cases.split("<annotation")[0]
    assert "<semantics>" in as_ml("x") and '<math display="block">' in as_ml("x", display=True)
    unknown = []
    out = as_ml(r"\weird x", unknown=unknown)
    assert unknown == [r"\weird"] and "weird" in out             # shown, never silently dropped


def test_markdown_keeps_code_and_prices_as_they_are():
    text = "cost \\$5 and `$x$` and $a$ and\n```\n$b$\n```\nand $$c$$"
    out = mathml.markdown_math(text)
    assert "`$x$`" in out and "\n$b$\n" in out and "\\$5" in out
    assert out.count("<math") == 2 and '<math display="block">' in out
    assert mathml.markdown_math("between $5 and $6") == "between $5 and $6"


def test_a_students_broken_tex_never_stops_the_feedback():
    """Written answers go through the same conversion: any TeX, however
    broken, gives a <math> element or is left as written."""
    import random
    rng = random.Random(20)
    pieces = list("ab1_^{}[]&'\\ ()-") + [r"\frac", r"\sqrt", r"\left", r"\right", r"\begin{pmatrix}",
                                          r"\end{pmatrix}", r"\text", r"\mathbf", r"\\", r"\big", r"\hat"]
    for _ in range(3000):
        tex = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 14)))
        out = mathml.markdown_math(f"x ${tex}$ y")
        assert out.startswith("x <math") or out == f"x ${tex}$ y", (tex, out)


# ------------------------------------------------------------------ the course's Validate

WRONG_SOFTMAX = "def softmax(x, dim=-1):\n    e = torch.exp(x)\n    return e / e.sum(dim=dim, keepdim=True)\n"
RIGHT_SOFTMAX = ("def softmax(x, dim=-1):\n    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n"
                 "    return e / e.sum(dim=dim, keepdim=True)\n")
SAYS = {"zh": {"button": "验证", "not_done": "还没有完成：练习 1。", "wrong": "的 nan/inf 和期望不同",
               "hint": "诊断：没有先减去每行的最大值", "passed": "✓ 全部 1 个练习的测试都通过了：练习 1"},
        "en": {"button": "Validate", "not_done": "Not done yet: exercise 1.", "wrong": "differ in nan/inf from the expected",
               "hint": "Diagnosis: you did not subtract the row maximum first",
               "passed": "✓ The exercise passes its tests: exercise 1"}}
NBGRADER_WORDS = re.compile(r"Validation Results|The following cell failed|Success! Your notebook|"
                            r"You did not provide a response|Traceback|expect_close\(|from helpers\.checks")


def course_validate(page, nb, label: str, shot: str) -> tuple[str, str]:
    """Press the course's Validate; return (status, text) of its dialog once it has answered."""
    nb.toolbar_button(label).click()
    body = page.locator(".course-validate-dialog .course-validate")
    page.wait_for_function("() => document.querySelector('.jp-Dialog')", timeout=60_000)
    other = page.locator(".jp-Dialog:not(.course-validate-dialog)")
    if other.count():   # JupyterLab's own question first (a save crossing its autosave): keep the student's text
        other.locator(".jp-Dialog-button.jp-mod-accept").last.click()
    body.wait_for()
    page.wait_for_function("() => { const b = document.querySelector('.course-validate-dialog .course-validate');"
                           " return b && b.dataset.status !== 'running'; }", timeout=180_000)
    status, text = body.get_attribute("data-status"), body.inner_text()
    browser.shot(page, shot)
    page.locator(".course-validate-dialog .jp-Dialog-button").last.click()
    body.wait_for(state="detached")
    return status, text


def validate_three_ways(page, lab, lang: str, where: str) -> None:
    """The first exercise untouched, then wrong, then right: what the course's
    Validate says each time, in ``lang``, with no test source and nothing of
    nbgrader's English dialog."""
    says = SAYS[lang]
    path = short_exercise(lab.root)
    answer = answer_cell(nbformat.read(lab.root / path, as_version=4))
    nb = Notebook(page, lab, path)
    status, text = course_validate(page, nb, says["button"], f"{where}_validate_1_not_done")
    assert status == "not_done" and says["not_done"] in text and not NBGRADER_WORDS.search(text), text
    nb.type_into(answer, WRONG_SOFTMAX)
    status, text = course_validate(page, nb, says["button"], f"{where}_validate_2_wrong")
    assert status == "failed" and not NBGRADER_WORDS.search(text), text
    first = text.index(says["wrong"])
    assert first < text.index(says["hint"]) and text.splitlines()[0].strip() and "softmax" in text[:first], text
    assert ("练习 1：数值稳定的 softmax" if lang == "zh" else "Exercise 1: a numerically stable softmax") in text
    nb.type_into(answer, RIGHT_SOFTMAX)
    status, text = course_validate(page, nb, says["button"], f"{where}_validate_3_passed")
    assert status == "passed" and says["passed"] in text and not NBGRADER_WORDS.search(text), text
    assert page.locator(".jp-Toolbar .jp-ToolbarButtonComponent-label", has_text="Validate").count() \
        == (1 if lang == "en" else 0), "nbgrader's own Validate button is switched off"


@needs_browser
def test_validate_in_the_workspace_speaks_the_course_zh(context, tmp_path, capsys):
    course = clone_of_the_course(tmp_path / "course")
    lab = StudentLab(course, tmp_path / "home")
    lab.start(capsys)
    try:
        validate_three_ways(context.new_page(), lab, "zh", "workspace_zh")
    finally:
        lab.stop()


def en_release(work) -> Path:
    """Chapter 1 built in English and released (what the en pack holds of it)."""
    from coursekit.author import build, release
    work.mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", work / "nbgrader_config.py")
    build.write_source(CH01, "en", course_root=work)
    release.generate_releases([CH01], course_root=work)
    return work / "release"


@needs_browser
def test_validate_in_the_en_pack_speaks_the_course_en(context, tmp_path, capsys):
    pack = dist.assemble_pack(en_release(tmp_path / "build"), "en", tmp_path / "pack")
    link_environment(pack)
    lab = StudentLab(pack, tmp_path / "home")
    lab.start(capsys)
    try:
        validate_three_ways(context.new_page(), lab, "en", "pack_en")
    finally:
        lab.stop()


def widget_chapter(workspace) -> str:
    """Chapter 9 cut to what its head-explorer widget needs (setup, the model,
    the two score exercises answered, their tests) and the widget cell: the
    cell that shows an ipywidgets Output, after which a kernel's reply used to
    be missed for the cell's whole time limit."""
    ch = "ch09_inside_gpt"
    doc = nbformat.read(workspace / ch / f"{ch}.ipynb", as_version=4)
    src = nbformat.read(ROOT / "source" / ch / f"{ch}.ipynb", as_version=4)
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in src.cells
               if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"}
    keep = []
    for cell in doc.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in ("prev_token_score", "induction_score"):
            cell.source = answers[gid]
        wanted = ("import ", "set_language", "TinyGPT(", "train_toy(", "repeated_batch(", "model.attention(x)",
                  "head_explorer(")
        if cell.cell_type == "code" and (gid in ("prev_token_score", "induction_score", "test_prev_token_score",
                                                 "test_induction_score")
                                         or gid is None and any(s in cell.source for s in wanted)):
            keep.append(cell)
    assert any("head_explorer(" in c.source and "figure" not in c.source for c in keep)
    doc.cells = keep
    nbformat.write(doc, workspace / ch / "widget_cell.ipynb")
    return f"{ch}/widget_cell.ipynb"


def post(lab, path: str, body: dict) -> dict:
    import urllib.request
    req = urllib.request.Request(f"{lab.base}/{path}", data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"token {lab.token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def test_validate_of_a_widget_chapter_finishes_within_30_s_each_time(tmp_path, capsys):
    """The student's JupyterLab server validates with the kernel polled in
    one-second slices (helpers/lab/shell_poll.py), as the grader does: chapter
    9's widget cell never holds Validate for the cell's time limit (120 s).
    The suite validates three times in a row (a stall came about one run in
    three); bench/validate_repeat.py runs the same test ten times
    (COURSE_VALIDATE_RUNS=10) and keeps the times in bench/results."""
    import time
    runs = int(os.environ.get("COURSE_VALIDATE_RUNS", "3"))
    pack = dist.assemble_pack(ROOT / "release", "zh", tmp_path / "pack")
    link_environment(pack)
    lab = StudentLab(pack, tmp_path / "home")
    lab.start(capsys)
    took = []
    try:
        path = widget_chapter(lab.root)
        for _ in range(runs):
            start = time.monotonic()
            result = post(lab, "course/validate", {"path": path})
            took.append(round(time.monotonic() - start, 2))
            assert result["status"] == "passed", result
    finally:
        lab.stop()
    if os.environ.get("COURSE_VALIDATE_TIMES"):
        Path(os.environ["COURSE_VALIDATE_TIMES"]).write_text(json.dumps({"runs": runs, "seconds": took,
                                                                        "load": os.getloadavg()}))
    assert max(took) < 30, took


@needs_browser
def test_a_graded_feedback_page_shows_the_chapters_figures(context, tmp_path):
    """ch01 graded through the real pipeline: its feedback page shows the data-flow
    diagram and the d_k figure as pictures, each described in the chapter's
    language, with the network blocked."""
    from harness import grading_course, make_submission, submit

    from coursekit.grade import pipeline
    from coursekit.grade.sandbox import sandbox_available
    root = tmp_path / "course"
    rel, src = grading_course(root, CH01)
    submit(root, "ann", CH01, make_submission(rel, src, None))
    pipeline.grade(root, sandbox=sandbox_available()[0], quiet=True, report=False)
    page = context.new_page()
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    page.goto((root / "feedback" / "ann" / CH01 / f"{CH01}.html").as_uri())
    images = page.locator("img[src^='data:image/png']")
    alts = [images.nth(i).get_attribute("alt") for i in range(images.count())]
    flow = next(i for i, a in enumerate(alts) if a.startswith("数据流图"))
    dk = next(i for i, a in enumerate(alts) if a.startswith("三幅图，d_k = 128"))
    for i, name in ((flow, "feedback_ch01_qkv_flow"), (dk, "feedback_ch01_dk_figure")):
        img = images.nth(i)
        img.scroll_into_view_if_needed()
        size = img.evaluate("e => [e.naturalWidth, e.naturalHeight]")
        assert size[0] > 600 and size[1] > 150, size                 # a real picture, drawn
        browser.shot(img, name)
