"""Hostile and broken submissions through the real grading pipeline (make grade):
the run completes, nobody gains undeserved points, other students' results,
the gradebook and the course files stay intact, and the summary says why a
submission was flagged."""
from __future__ import annotations

import hashlib
import html
import json
import re
from pathlib import Path

import nbformat
import pytest
from harness import ROOT, auto_scores, graded_cell_text, grading_course, hidden_test_lines, make_submission

from coursekit.grade import pipeline
from coursekit.grade.sandbox import sandbox_available
from coursekit.report.flags import Flag

CH = "ch01_attention"
WRONG_SOFTMAX = "def softmax(x, dim=-1):\n    return x\n"
SANDBOX, WHY = sandbox_available()
pytestmark = [pytest.mark.skipif(not SANDBOX, reason=f"no sandbox here: {WHY}"), pytest.mark.xdist_group("hostile")]


def sm(code: str) -> dict:
    return {"softmax": code}


HOSTILE = {
    "good": None,
    "infinite_loop": sm("while True:\n    pass\n"),
    "memory_bomb": sm("blob = bytearray(64 * 2**30)\n" + WRONG_SOFTMAX),
    "os_exit": sm("import os\nos._exit(3)\n"),
    "fork_bomb": sm("import os, time\nkids = 0\nfor _ in range(5000):\n    try:\n        pid = os.fork()\n"
                    "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n"
                    "    kids += 1\nprint('forked', kids)\n" + WRONG_SOFTMAX),
    "reader": sm("import glob\nfor pattern in ['{root}/source/*/*', '{root}/gradebook.db', '{root}/submitted/*/*/*',"
                 " '{code}/source/*/*']:\n    for path in glob.glob(pattern):\n"
                 "        print('LEAK', path, open(path, 'rb').read()[:2000])\n" + WRONG_SOFTMAX),
    "writer": sm("import os\nfor path in ['{root}/gradebook.db', '{root}/source/{ch}/{ch}.ipynb', "
                 "'{root}/release/{ch}/planted.py', '{root}/submitted/good/{ch}/{ch}.ipynb']:\n    try:\n"
                 "        open(path, 'w').write('owned')\n        print('WROTE', path)\n    except OSError as e:\n"
                 "        print('blocked', path, type(e).__name__)\n" + WRONG_SOFTMAX),
    "patch_allclose": sm("import torch\ntorch.allclose = lambda *a, **k: True\n" + WRONG_SOFTMAX),
    "patch_assert_close": sm("import torch\ntorch.testing.assert_close = lambda *a, **k: None\n" + WRONG_SOFTMAX),
    "patch_numpy_testing": sm("import numpy.testing\nnumpy.testing.assert_allclose = lambda *a, **k: None\n"
                              + WRONG_SOFTMAX),
    "patch_helpers": sm("import helpers.checks\nhelpers.checks.expect_close = lambda *a, **k: None\n"
                        "helpers.checks.passed = lambda *a, **k: None\nexpect_close = helpers.checks.expect_close\n"
                        + WRONG_SOFTMAX),
    "patch_builtins": sm("import builtins\nbuiltins.round = lambda *a, **k: 0\nbuiltins.sorted = lambda x, **k: x\n"
                         + WRONG_SOFTMAX),
    # this one breaks the kernel itself (it stops answering): it ends at the time limit, with no points
    "patch_isinstance": sm("import builtins\nbuiltins.isinstance = lambda *a: True\n" + WRONG_SOFTMAX),
    # passes every visible test, fails the hidden ones; the check itself is replaced by a fake
    # a softmax the visible tests pass (a row's own maximum): what is left to catch is the patched check
    "patch_check": sm("import grading.ch01_attention as g\n"
                      "g.check_softmax = lambda f: print('✓ softmax：9 项隐藏检查全部通过')\n"
                      "def softmax(x, dim=-1):\n    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n"
                      "    return e / e.sum(dim=dim, keepdim=True)\n"),
    "borrow_reference": sm("from grading.ch01_attention import ref_softmax\ndef softmax(x, dim=-1):\n"
                           "    return ref_softmax(x, dim).to(x.dtype)\n"),
    "huge_output": sm("print('x' * 5_000_000)\n" + WRONG_SOFTMAX),
}
BROKEN = ("delete_cell", "edit_cell", "duplicate_cell", "renamed", "invalid_json")
# markup a student wrote: a written answer and an answer cell's output that try to run in whoever opens the page
MARKUP_TEXT = ("My derivation: $E[q\\cdot k] = 0$ <script>alert('md')</script> <img src=x onerror=\"alert('img')\"> "
               "<a href=\"javascript:alert('a')\">link</a> <b onclick=\"alert('b')\">bold</b>")
MARKUP = {"derivation": MARKUP_TEXT,
          "softmax": "from IPython.display import HTML, display\n"
                     "display(HTML(\"<img src=x onerror=alert('out')><script>alert('out2')</script><i>ok</i>\"))\n"
                     "def softmax(x, dim=-1):\n    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n"
                     "    return e / e.sum(dim=dim, keepdim=True)\n"}


def _hash_tree(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    rel, src = grading_course(root, CH)
    subs = {}
    for name, rep in HOSTILE.items():
        rep = {k: v.replace("{root}", str(root)).replace("{code}", str(ROOT)).replace("{ch}", CH)
               for k, v in (rep or {}).items()}
        subs[name] = make_submission(rel, src, rep)
    subs["markup"] = make_submission(rel, src, MARKUP)
    full = make_submission(rel, src, None)
    gid = lambda c: c.metadata.get("nbgrader", {}).get("grade_id")  # noqa: E731
    subs["delete_cell"] = nbformat.from_dict(full)
    subs["delete_cell"].cells = [c for c in full.cells if gid(c) != "test_softmax"]
    subs["edit_cell"] = nbformat.from_dict(json.loads(json.dumps(full)))
    for c in subs["edit_cell"].cells:
        if gid(c) == "test_softmax":
            c.source = "pass  # nothing to test here"
    dup = nbformat.from_dict(json.loads(json.dumps(full)))
    i = next(i for i, c in enumerate(dup.cells) if gid(c) == "test_softmax")
    dup.cells.insert(i + 1, nbformat.from_dict(json.loads(json.dumps(dup.cells[i]))))
    subs["duplicate_cell"] = dup
    for name, nb in subs.items():
        d = root / "submitted" / name / CH
        d.mkdir(parents=True)
        nbformat.write(nb, d / f"{CH}.ipynb")
    d = root / "submitted" / "renamed" / CH
    d.mkdir(parents=True)
    nbformat.write(full, d / "my_homework.ipynb")
    d = root / "submitted" / "invalid_json" / CH
    d.mkdir(parents=True)
    (d / f"{CH}.ipynb").write_text('{"cells": [ this is not json')
    before = {"source": _hash_tree(root / "source"), "release": _hash_tree(root / "release"),
              "good": _hash_tree(root / "submitted" / "good"), "submitted": _hash_tree(root / "submitted")}
    jobs = pipeline.grade(root, sandbox=True, cell_timeout=10, timeout=40, quiet=True)
    return root, {j.student: j for j in jobs}, before


def scores(root: Path, student: str) -> dict[str, float]:
    return auto_scores(root, CH, student)


def cell_text(root: Path, student: str, grade_id: str) -> str:
    return graded_cell_text(root, CH, student, grade_id)


def test_the_honest_student_gets_full_auto_marks(graded):
    root, jobs, _ = graded
    s = scores(root, "good")
    assert s["test_softmax"] == 3 and s["test_score_variance"] == 2 and s["test_attention"] == 4
    assert not jobs["good"].flags


@pytest.mark.parametrize("name", [n for n in HOSTILE if n != "good"])
def test_hostile_submission_earns_nothing_for_the_attacked_exercise(graded, name):
    root, jobs, _ = graded
    s = scores(root, name)
    assert s["test_softmax"] == 0, f"{name} scored on test_softmax: {cell_text(root, name, 'test_softmax')}"


@pytest.mark.parametrize("name,reason", [
    ("infinite_loop", "cell time limit"), ("memory_bomb", "memory limit"), ("os_exit", "kernel died"),
    ("patch_allclose", "tampering"), ("patch_assert_close", "tampering"), ("patch_numpy_testing", "tampering"),
    ("patch_builtins", "tampering"), ("patch_check", "seal"), ("borrow_reference", "grading module"),
    ("huge_output", "huge output"), ("renamed", "renamed"), ("invalid_json", "not a valid notebook"),
    ("delete_cell", "deleted read-only"), ("duplicate_cell", "duplicated"),
])
def test_summary_flags_the_submission_with_the_reason(graded, name, reason):
    _, jobs, _ = graded
    assert any(reason in str(f) for f in jobs[name].flags), f"{name}: {jobs[name].flags}"


def test_sandbox_hides_source_gradebook_and_other_students(graded):
    root, _, _ = graded
    text = cell_text(root, "reader", "softmax")
    assert "LEAK" not in text, text[:500]


def test_writes_reach_neither_gradebook_nor_course_files(graded):
    root, _, before = graded
    text = cell_text(root, "writer", "softmax")
    assert "WROTE" not in text and text.count("blocked") == 4, text
    assert _hash_tree(root / "source") == before["source"]
    assert _hash_tree(root / "release") == before["release"]
    assert _hash_tree(root / "submitted" / "good") == before["good"]
    assert scores(root, "good")["test_softmax"] == 3


def test_fork_bomb_is_bounded(graded):
    """The bomb stops at the kernel's process limit and none of its processes
    outlive grading. (On a loaded machine the kernel may instead die of it or
    reach the time limit: then the notebook is scored as empty, with the reason.)"""
    from coursekit.grade.zygote import _pids_of
    root, jobs, _ = graded
    m = re.search(r"forked (\d+)", cell_text(root, "fork_bomb", "softmax"))
    if m:
        assert int(m.group(1)) < 300, cell_text(root, "fork_bomb", "softmax")[:300]
    else:
        assert any("kernel died" in str(f) or "time limit" in str(f) for f in jobs["fork_bomb"].flags), \
            jobs["fork_bomb"].flags
    assert _pids_of(pipeline.uid(jobs["fork_bomb"])) == [], "fork bomb processes outlived grading"


@pytest.mark.parametrize("name", ["delete_cell", "edit_cell", "duplicate_cell", "renamed"])
def test_broken_but_honest_notebooks_are_graded_on_their_answers(graded, name):
    root, _, _ = graded
    s = scores(root, name)
    assert s["test_softmax"] == 3 and s["test_attention"] == 4, s


def test_invalid_notebook_scores_zero_and_run_completes(graded):
    root, jobs, _ = graded
    assert sum(scores(root, "invalid_json").values()) == 0
    assert len(jobs) == len(HOSTILE) + len(BROKEN) + 1


def test_feedback_shows_no_hidden_test_and_no_seal(graded):
    root, _, _ = graded
    secret = hidden_test_lines(nbformat.read(root / "source" / CH / f"{CH}.ipynb", as_version=4))
    files = list((root / "feedback").rglob("*.html"))
    assert len(files) >= len(HOSTILE)
    for f in files:
        text = html.unescape(re.sub(r"<[^>]+>", "", f.read_text(encoding="utf-8")))
        assert "⟦seal" not in text
        for line in secret:
            assert line not in text, f"{f}: {line}"
    huge = root / "feedback" / "huge_output" / CH / f"{CH}.html"
    assert huge.stat().st_size < 2_000_000


def test_outputs_grades_csv_and_class_report(graded):
    root, _, _ = graded
    rows = (root / "grades.csv").read_text().splitlines()
    assert rows[0].startswith("assignment,") and len(rows) == 1 + len(HOSTILE) + len(BROKEN) + 1
    report = (root / "reports" / "class_report.html").read_text(encoding="utf-8")
    # flags are shown in the chapter's language (zh here)
    assert "<svg class='chart'" in report and "得分分布" in report and "被标记的作业" in report
    assert Flag("tampering").render("zh") in report and Flag("tampering").render("en") not in report


LIVE = re.compile(r"<script|<[^>]*\son\w+\s*=|<[^>]*(?:href|src)\s*=\s*[\"']?\s*javascript:", re.I)


def test_no_page_the_course_writes_runs_what_a_student_wrote(graded):
    """A written answer and an answer's output carrying scripts, event handlers
    and javascript: links: no feedback page, class report or similarity page
    holds them as live markup; the student reads them as text, and the pages
    still show the course's figures and rendered maths."""
    root, jobs, _ = graded
    pages = [*(root / "feedback").rglob("*.html"), *(root / "reports").rglob("*.html")]
    assert len(pages) > len(jobs) and any("similar" in str(p) for p in pages)
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert not LIVE.search(text), (page, LIVE.search(text).group(0), text[LIVE.search(text).start() - 200:][:400])
    mine = (root / "feedback" / "markup" / CH / f"{CH}.html").read_text(encoding="utf-8")
    assert "&lt;script&gt;alert('md')&lt;/script&gt;" in mine and "<b>bold</b>" in mine and "<i>ok</i>" in mine
    assert "<math" in mine and "<mi>q</mi>" in mine                  # the student's maths, drawn
    figures = re.findall(r"<img\b[^>]*>", mine)                        # the course's figures, described
    assert any(re.search(r'\balt="[^"]{20,}"', f) and 'src="data:image/png;base64,' in f for f in figures), figures
    assert scores(root, "markup")["test_softmax"] == 3


def test_submitted_is_byte_identical_after_dying_looping_broken_and_duplicated_notebooks(graded):
    """Every repair, retry and "score as empty" worked on a scratch copy: the
    students' files are exactly as handed in, with nothing added next to them."""
    root, jobs, before = graded
    assert _hash_tree(root / "submitted") == before["submitted"]
    assert not list((root / "submitted").rglob("*.failed")) and not list((root / "submitted").rglob("*.unreadable"))
    assert {"os_exit", "infinite_loop", "invalid_json", "duplicate_cell", "renamed", "delete_cell"} <= set(jobs)


def test_a_rerun_after_a_failure_grades_the_original_again(graded):
    root, _, before = graded
    again = {j.student: j for j in pipeline.grade(root, student="os_exit", sandbox=True, quiet=True, report=False)}
    assert any("kernel died" in str(f) and "scored as empty" in str(f) for f in again["os_exit"].flags), \
        again["os_exit"].flags
    assert _hash_tree(root / "submitted") == before["submitted"]


def test_rerun_keeps_one_result_and_manual_grades(graded):
    from nbgrader.api import Gradebook
    root, _, _ = graded
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        g = gb.find_grade("derivation", CH, CH, "good")
        g.manual_score = 2.5
        gb.db.commit()
    # graded again (not kept from the first run): autograde must leave the manual grade alone
    again = pipeline.grade(root, student="good", sandbox=True, quiet=True, report=False, regrade=True)
    assert [j.reused for j in again] == [False]
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        assert gb.find_grade("derivation", CH, CH, "good").score == 2.5
        assert len([s for s in gb.find_student("good").submissions]) == 1
    assert scores(root, "good")["test_softmax"] == 3


def test_refuses_to_grade_without_sandbox(monkeypatch, tmp_path):
    import coursekit.grade.sandbox as sb
    monkeypatch.setattr(sb, "sandbox_available", lambda: (False, "bubblewrap (bwrap) is not installed"))
    with pytest.raises(SystemExit, match="(?s)refusing to grade without a sandbox.*--unsandboxed"):
        pipeline.grade(tmp_path, sandbox=True, quiet=True)
