"""What students and instructors see: JupyterLab in a real browser.

One JupyterLab (from the project's environment, on a throw-away copy of the
course) and one headless Chromium serve every test here; xdist keeps them on
one worker. Screenshots of each step go to tests/artifacts/browser/.

- the student path in chapter 2: fill the answer cells by typing, run all,
  step the calculator through its five stages and toggle the mask (the numbers
  on the page must equal ``helpers.ch02_causal_mask.calculator``), then nbgrader's Validate;
- the untouched release fails Validate;
- a hint stays folded until opened, and a wrong answer's visible test shows its
  evidence and names the mistake in the grader's words;
- every chapter's main widget renders, with no JavaScript error from widget code;
- the instructor path: the formgrader lists the course's assignments, and the
  Create Assignment panel shows a source cell's nbgrader metadata.
"""
from __future__ import annotations

import importlib
import re
import shutil

import browser
import nbformat
import pytest
from catalogue.ch02_causal_mask import check_stage
from harness import ROOT, asked_chapters, make_submission

pytestmark = [pytest.mark.xdist_group("browser"),
              pytest.mark.skipif(browser.skip_reason() is not None, reason=str(browser.skip_reason()))]

CH02 = "ch02_causal_mask"
CHAPTERS = sorted(p.name for p in (ROOT / "release").iterdir() if p.is_dir() and p.name.startswith("ch"))


def catalogue(chapter: str):
    return importlib.import_module(f"catalogue.{chapter}")


def read_nb(kind: str, chapter: str):
    return nbformat.read(ROOT / kind / chapter / f"{chapter}.ipynb", as_version=4)


def nbgrader_meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def index_of(nb, needle: str) -> int:
    """The index of the (first) code cell whose source contains ``needle``."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and needle in cell.source:
            return i
    raise LookupError(f"no code cell contains {needle!r}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lab")
    server = browser.Lab(browser.course_copy(tmp / "course"), tmp / "home")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def chromium():
    from playwright.sync_api import sync_playwright

    shutil.rmtree(browser.ARTIFACTS, ignore_errors=True)   # this run's screenshots only
    with sync_playwright() as pw:
        b = browser.launch_chromium(pw)
        yield b
        b.close()


@pytest.fixture
def page(chromium, lab, request):
    context = chromium.new_context(viewport={"width": 1500, "height": 1000}, locale="zh-CN")
    context.set_default_timeout(30_000)
    pg = context.new_page()
    pg.console = browser.Console(pg)
    yield pg
    context.close()
    lab.shutdown_kernels()
    pg.console.save(request.node.name)


# --------------------------------------------------------------------- student


def test_student_fills_runs_steps_the_calculator_and_validates(page, lab):
    release, source = read_nb("release", CH02), read_nb("source", CH02)
    solved = make_submission(release, source, None)
    answers = [i for i, c in enumerate(release.cells) if nbgrader_meta(c).get("solution")]
    path = f"release/{CH02}/{CH02}.ipynb"
    nb = browser.Notebook(page, lab, path)
    assert nb.cells.count() == len(release.cells)
    browser.shot(page, "ch02_01_opened")

    for i in answers:                                   # the student writes the answers
        nb.type_into(i, solved.cells[i].source)
    nb.save()
    on_disk = browser.read_saved(lab.root / path)
    for i in answers:
        assert on_disk.cells[i].source == solved.cells[i].source, f"cell {i} was not typed in as written"

    not_run = nb.run_all(timeout_ms=180_000)
    assert nb.error_outputs() == [] and not_run == [], (nb.error_outputs(), not_run)
    for i, cell in enumerate(release.cells):
        if nbgrader_meta(cell).get("grade") and "passed(" in cell.source:
            assert "✓" in nb.output_text(i), f"visible test in cell {i} did not pass:\n{nb.output_text(i)}"
    browser.shot(page, "ch02_02_ran_all")

    calc = nb.cell(index_of(release, "calculator_view.step_through()"))
    widget = calc.locator(".jupyter-widgets.widget-vbox").first
    view = widget.locator(".course-calculator .widget-html-content")
    prev, nxt = widget.get_by_role("button", name="◀ 上一步"), widget.get_by_role("button", name="下一步 ▶")
    mask = widget.locator(".widget-toggle-button")
    assert mask.inner_text().strip() == "因果掩码"

    def go(number: int, causal: bool, shot: str):
        page.wait_for_function("([v, n]) => v.textContent.includes(`(${n}/5,`)", arg=[view.element_handle(), number])
        tables = check_stage(view, number, causal)
        browser.shot(widget, shot)
        return tables

    go(1, True, "ch02_03_stage1")
    assert prev.is_disabled() and not nxt.is_disabled()
    nxt.click()
    go(2, True, "ch02_04_stage2")
    nxt.click()
    masked = go(3, True, "ch02_05_stage3_mask_on")[0]["rows"]
    for i, row in enumerate(masked):                    # −∞ exactly above the diagonal
        assert [v == "−∞" for v in row[1:]] == [j > i for j in range(len(row) - 1)], row

    mask.click()                                        # mask off: every score finite
    page.wait_for_function("v => v.textContent.includes('因果掩码：关')", arg=view.element_handle())
    unmasked = go(3, False, "ch02_06_stage3_mask_off")[0]["rows"]
    assert all(v != "−∞" for row in unmasked for v in row[1:])
    nxt.click()
    off = go(4, False, "ch02_07_stage4_mask_off")[0]["rows"]
    assert off[0][1] != "1.00" and off[0][1:].count("0.00") < len(off[0]) - 2   # row 1 sees later tokens

    mask.click()                                        # mask on again: first row is 1.00 0.00 ...
    page.wait_for_function("v => v.textContent.includes('因果掩码：开')", arg=view.element_handle())
    on = go(4, True, "ch02_08_stage4_mask_on")[0]["rows"]
    assert on[0][1:] == ["1.00"] + ["0.00"] * (len(on[0]) - 2)
    nxt.click()
    go(5, True, "ch02_09_stage5")
    assert nxt.is_disabled() and not prev.is_disabled()
    prev.click()
    go(4, True, "ch02_10_back_to_stage4")

    dialog = validate(page, nb)
    browser.shot(page, "ch02_11_validate_solution")
    assert dialog.locator(".validation-success").count() == 1, dialog.inner_text()
    assert "Success! Your notebook passes all the tests." in dialog.inner_text()
    assert page.console.from_widgets() == [], page.console.from_widgets()


def validate(page, nb):
    """Press nbgrader's Validate button; return its result dialog."""
    button = nb.toolbar_button("Validate")
    button.click()
    dialog = page.locator(".jp-Dialog", has=page.locator("#validation-message"))
    dialog.wait_for(timeout=180_000)
    assert "Validation Results" in dialog.locator(".jp-Dialog-header").inner_text()
    return dialog


def test_untouched_release_fails_validate(page, lab):
    nb = browser.Notebook(page, lab, _untouched_copy(lab))
    dialog = validate(page, nb)
    browser.shot(page, "ch02_12_validate_untouched_release")
    text = dialog.inner_text()
    assert dialog.locator(".validation-failed").count() == 1, text
    assert "Success" not in text
    assert "The following cell failed:" in text and "NotImplementedError" in text


def test_a_hint_stays_folded_until_opened_and_a_wrong_answer_shows_its_evidence(page, lab):
    """The hints under an exercise are folded in JupyterLab; opening one shows it.
    A wrong answer (no 1/√d_k in exercise 4) run as a student runs it shows the
    largest difference, the rows around it and the grader's words for that mistake,
    with no internal token on the screen."""
    release, source = read_nb("release", CH02), read_nb("source", CH02)
    wrong = make_submission(release, source, {"attention": catalogue(CH02).ATT_HEAD
                                              + catalogue(CH02).ATT_OK.replace(" / math.sqrt(q.shape[-1])", "")})
    path = f"wrong/{CH02}/{CH02}.ipynb"
    (lab.root / path).parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(wrong, lab.root / path)
    nb = browser.Notebook(page, lab, path)

    hint = nb.panel.locator(".jp-RenderedMarkdown details").first
    hint.scroll_into_view_if_needed()
    summary = hint.locator("summary")
    assert summary.inner_text().startswith("提示 1"), summary.inner_text()
    body = hint.locator("p").first
    assert hint.get_attribute("open") is None and not body.is_visible()
    browser.shot(hint, "ch02_hint_folded")
    summary.click()
    page.wait_for_function("d => d.open", arg=hint.element_handle())
    assert body.is_visible() and body.inner_text().strip()
    browser.shot(hint, "ch02_hint_opened")

    nb.run_all(timeout_ms=180_000)
    test = index_of(release, 'with exercise(4, "causal_self_attention")')
    shown = nb.output_text(test)
    browser.shot(nb.cell(test), "ch02_wrong_answer_evidence")
    assert "最大的差是" in shown and "期望" in shown and "实际" in shown and "^" in shown, shown
    assert "诊断：分数没有除以 √d_k" in shown, shown
    assert "[bug:" not in shown and "CheckFailed" not in shown and "Traceback" not in shown, shown


def _untouched_copy(lab) -> str:
    """A fresh copy of the release notebook (the student-path test edits the
    original in the course copy)."""
    rel = f"untouched/{CH02}/{CH02}.ipynb"
    dest = lab.root / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes((ROOT / "release" / CH02 / f"{CH02}.ipynb").read_bytes())
    return rel


# --------------------------------------------------------------------- widgets

# Each chapter declares its main widget in its catalogue (tests/catalogue/<chapter>.py):
# ``WIDGET`` (the cell that shows it, the texts its controls must show, what stands in
# when it is not ipywidgets, the cells it needs, edits that shorten training) and,
# optionally, ``check_widget(target, text)`` for the numbers it must show.
WIDGETS = {ch: catalogue(ch).WIDGET for ch in CHAPTERS}


def widget_notebook(chapter: str):
    """The release notebook with the answers filled in, cut after the cell of
    the chapter's main widget: the setup cells, the answers, the cells listed
    in ``keep`` and the widget's cell."""
    spec = WIDGETS[chapter]
    release, source = read_nb("release", chapter), read_nb("source", chapter)
    nb = make_submission(release, source, None)
    last = index_of(nb, spec["cell"])
    code = [i for i, c in enumerate(nb.cells[:last + 1]) if c.cell_type == "code"]
    keep = set(code[:2]) | {last}
    keep |= {i for i in code if nbgrader_meta(nb.cells[i]).get("solution")}
    keep |= {i for i in code for needle in spec.get("keep", ()) if needle in nb.cells[i].source}
    for old, new in spec.get("edits", {}).items():
        hits = [i for i in keep if old in nb.cells[i].source]
        assert hits, f"{chapter}: no kept cell contains {old!r}"
        for i in hits:
            nb.cells[i].source = nb.cells[i].source.replace(old, new)
    nb.cells = [c for i, c in enumerate(nb.cells) if i in keep or c.cell_type == "markdown" and i < last]
    return nb, spec


def test_widget_notebooks_keep_the_widget_cell_last():
    for chapter in CHAPTERS:
        assert chapter in WIDGETS, f"{chapter} has no main widget listed in WIDGETS"
        nb, spec = widget_notebook(chapter)
        assert spec["cell"] in nb.cells[-1].source


# In the whole suite, a chapter whose main widget is ipywidgets is run, and its widget checked,
# in the Chinese JupyterLab of tests/test_accessibility.py (browser.widget_shows, before the
# keyboard plays it): the same notebook, cut after the widget, run once for both. Here, the chapters whose
# main picture is something else (a figure, the quiz's marks), which that run does not execute;
# every chapter where one chapter's checks are asked for (COURSE_CHAPTERS, as `make check` runs them).
@pytest.mark.parametrize("chapter", [ch for ch in CHAPTERS if asked_chapters()
                                     or not WIDGETS[ch].get("ipywidgets", True)])
def test_chapter_widget_renders(page, lab, chapter):
    nb_doc, spec = widget_notebook(chapter)
    rel = f"widgets/{chapter}.ipynb"
    (lab.root / "widgets").mkdir(exist_ok=True)
    nbformat.write(nb_doc, lab.root / rel)
    from coursekit.author import build
    for given in build.given_files(chapter):      # what the chapter hands out beside its notebook
        shutil.copy(given, lab.root / "widgets" / given.name)
    nb = browser.Notebook(page, lab, rel)
    not_run = nb.run_all(timeout_ms=150_000)
    assert nb.error_outputs() == [] and not_run == [], (nb.error_outputs(), not_run)
    out = nb.cell(len(nb_doc.cells) - 1).locator(".jp-Cell-outputArea")
    if spec.get("ipywidgets", True):
        widget = out.locator(".jupyter-widgets.widget-vbox").first
        widget.wait_for()
        browser.widget_shows(page, chapter, spec, widget)
    else:
        browser.widget_shows(page, chapter, spec, out)


# ------------------------------------------------------------------ instructor


def test_formgrader_lists_the_assignments(page, lab):
    page.goto(lab.url("lab", reset=""))
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^Nbgrader$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Formgrader$")).click()
    frame = page.frame_locator("iframe").first
    for chapter in CHAPTERS:
        frame.locator("td, a", has_text=re.compile(f"^{chapter}$")).first.wait_for(timeout=60_000)
    browser.shot(page, "formgrader_manage_assignments")
    listed = frame.locator("body").inner_text()
    assert all(ch in listed for ch in CHAPTERS)


def test_create_assignment_shows_nbgrader_metadata(page, lab):
    source = read_nb("source", CH02)
    answer = next(c for c in source.cells if nbgrader_meta(c).get("grade_id") == "causal_mask")
    test = next(c for c in source.cells if nbgrader_meta(c).get("grade_id") == "test_causal_mask")
    nb = browser.Notebook(page, lab, f"source/{CH02}/{CH02}.ipynb")
    page.get_by_role("tab", name=re.compile("Create Assignment")).click()
    panel = page.locator(".nbgrader-CreateAssignmentWidget, #nbgrader-create_assignemnt").first
    panel.wait_for()
    cells = page.evaluate("""() => [...document.querySelectorAll('.nbgrader-CellWidget')].map(w => {
        const sel = w.querySelector('select');
        const id = w.querySelector('.nbgrader-CellId input');
        const pts = w.querySelector('.nbgrader-CellPoints input');
        return {type: sel ? sel.options[sel.selectedIndex].text : null,
                id: id ? id.value : null, points: pts ? pts.value : null};
    })""")
    total = page.locator(".nbgrader-TotalPointsInput").input_value()
    # Show the answer cell and its metadata side by side for the screenshot.
    page.evaluate("""() => [...document.querySelectorAll('.nbgrader-CellWidget')]
        .find(w => w.querySelector('.nbgrader-CellId input')?.value === 'causal_mask')
        .scrollIntoView({block: 'center'})""")
    nb.cell(next(i for i, c in enumerate(source.cells) if nbgrader_meta(c).get("grade_id") == "causal_mask")
            ).scroll_into_view_if_needed()
    browser.shot(page, "create_assignment_ch02_source")
    by_id = {c["id"]: c for c in cells if c["id"]}
    assert by_id["causal_mask"]["type"] == "Autograded answer", cells
    assert by_id["test_causal_mask"]["type"] == "Autograded tests", cells
    assert float(by_id["test_causal_mask"]["points"]) == nbgrader_meta(test)["points"], cells
    assert nbgrader_meta(answer)["solution"]
    graded = [c for c in source.cells if nbgrader_meta(c).get("grade_id")]
    assert sorted(by_id) == sorted(nbgrader_meta(c)["grade_id"] for c in graded)
    assert float(total) == sum(nbgrader_meta(c).get("points", 0) for c in graded)
    assert nb.cells.count() == len(source.cells)
