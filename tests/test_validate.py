"""The course's Validate (helpers/lab/validate.py), read from notebooks that
have run: what a student is told first, in the notebook's language, with no
test source, no traceback and no exception class."""
from __future__ import annotations

import nbformat
import pytest

from helpers.lab.validate import read_result


def notebook(lang: str, *cells):
    nb = nbformat.v4.new_notebook()
    nb.metadata["course"] = {"lang": lang}
    nb.cells = list(cells)
    return nb


def heading(text: str):
    return nbformat.v4.new_markdown_cell(f"## {text}")


def graded_cell(grade_id: str, *outputs, source="with exercise(1, 'softmax'):\n    expect_close(...)\n"):
    cell = nbformat.v4.new_code_cell(source, metadata={"nbgrader": {"grade": True, "grade_id": grade_id,
                                                                     "points": 3, "solution": False,
                                                                     "locked": True}})
    cell.outputs = list(outputs)
    return cell


def error(ename: str, evalue: str, traceback=None):
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue,
                                  traceback=traceback or [f"\x1b[31m{ename}\x1b[0m: {evalue}"])


WRONG = "softmax([[1000, 1000]])：结果里出现了 nan 或 inf。\n  期望：[[0.5 0.5]]\n  实际：[[nan nan]]\n  提示：先减去每行的最大值。"


def chapter(lang="zh"):
    return notebook(
        lang,
        heading("练习 1：数值稳定的 softmax" if lang == "zh" else "Exercise 1: a stable softmax"),
        graded_cell("test_softmax", error("CheckFailed", WRONG)),
        heading("练习 2：方差" if lang == "zh" else "Exercise 2: variance"),
        graded_cell("test_score_variance", nbformat.v4.new_output("stream", name="stdout", text="✓ ok\n")),
        heading("练习 3：注意力" if lang == "zh" else "Exercise 3: attention"),
        graded_cell("test_attention", error("NotDoneYet", "还没有完成：练习 3（scaled_dot_product_attention）。")),
        heading("练习 4（人工评分）：推导" if lang == "zh" else "Exercise 4 (by hand): derivation"),
        nbformat.v4.new_markdown_cell("在这里写下你的答案。", metadata={"nbgrader": {
            "grade": True, "solution": True, "grade_id": "derivation", "points": 3,
            "checksum": __import__("nbgrader.utils", fromlist=["x"]).compute_checksum(
                nbformat.v4.new_markdown_cell("在这里写下你的答案。", metadata={"nbgrader": {
                    "grade": True, "solution": True, "grade_id": "derivation", "points": 3}}))}}))


def test_the_first_failure_comes_first_with_the_courses_message_and_nothing_else():
    r = read_result(chapter(), "zh")
    assert r.status == "failed" and r.title == "验证结果" and r.close == "关闭"
    assert r.summary == "有 1 个练习的测试没有通过，先看第一个：练习 1：数值稳定的 softmax。"
    first = r.items[0]
    assert (first.exercise, first.status, first.message) == ("练习 1：数值稳定的 softmax", "failed", WRONG)
    assert [i.status for i in r.items] == ["failed", "not_done", "unanswered", "passed"]
    shown = " ".join([r.summary] + [i.message for i in r.items])
    assert "CheckFailed" not in shown and "expect_close" not in shown and "Traceback" not in shown


def test_an_unfinished_exercise_is_not_done_yet_and_a_passing_notebook_says_what_passed():
    nb = chapter("en")
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="✓ passed\n")]
    r = read_result(nb, "en")
    assert r.status == "not_done" and r.summary == "Not done yet: exercise 3. The other 2 exercises pass their tests."
    nb.cells[5].outputs = []
    r = read_result(nb, "en")
    assert r.status == "passed" and r.summary == "✓ All 3 exercises pass their tests: exercise 1, 2, 3."
    assert [i.status for i in r.items if i.status != "passed"] == ["unanswered"]


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_a_raw_error_or_stderr_is_said_in_the_chapters_words(lang):
    trace = ["\x1b[0;31m---------\x1b[0m", "Cell \x1b[0;32mIn[4], line 3\x1b[0m",
             "\x1b[0;32m----> 3\x1b[0m out = weights @ v", "RuntimeError: shapes cannot be multiplied"]
    nb = notebook(lang, heading("练习 1" if lang == "zh" else "Exercise 1"),
                  graded_cell("t1", error("RuntimeError", "shapes cannot be multiplied", trace)),
                  heading("练习 2" if lang == "zh" else "Exercise 2"),
                  graded_cell("t2", nbformat.v4.new_output("stream", name="stderr", text="UserWarning: x\n")))
    r = read_result(nb, lang)
    assert [i.status for i in r.items] == ["failed", "failed"]
    said = r.items[0].message
    assert ("你的代码抛出了 RuntimeError" if lang == "zh" else "your code raised RuntimeError") in said
    assert "out = weights @ v" in said and "\x1b" not in said
    assert ("stderr" in r.items[1].message) and ("nbgrader 会把它算作失败" if lang == "zh" else "counts as a failure") \
        in r.items[1].message


WRONG_SOFTMAX = "def softmax(x, dim=-1):\n    e = torch.exp(x)\n    return e / e.sum(dim=dim, keepdim=True)\n"


def real_messages(lang: str) -> str:
    """What a student with chapter 1's classic mistake (no max subtracted) really
    reads: the visible test's message (Validate) and the hidden checks' (feedback),
    as the feedback step shows them."""
    import contextlib
    import io
    import re

    import test_grading_inprocess as inproc

    from coursekit.grade.feedback import for_student
    from helpers import set_language
    set_language(lang)
    ns = inproc.solution_namespace("ch01_attention", {"softmax": WRONG_SOFTMAX})
    said = []
    from coursekit.author.build import build_chapter
    nb = build_chapter("ch01_attention", lang)
    visible = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_softmax")
    code = re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\n", "", visible.source, flags=re.S)
    exec(next(c.source for c in nb.cells if c.cell_type == "code"), ns)     # the chapter's imports
    for run in (lambda: exec(code, ns), lambda: inproc.run_check("ch01_attention", "test_softmax", ns),
                lambda: inproc.run_check("ch01_attention", "test_attention", ns)):
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                run()
        except Exception as exc:  # noqa: BLE001 - the failure's message is what the student reads
            said.append(str(exc))
        said.append(out.getvalue())
    titles = [c.source.splitlines()[0].lstrip("# ") for c in nb.cells
              if c.cell_type == "markdown" and c.source.startswith("## ")]
    return for_student("\n".join(said + titles))


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_the_student_readme_shows_messages_a_student_really_gets(lang):
    """Every example in the student README's Validate and feedback sections is
    what the course prints for chapter 1's classic mistake (in the zh build's
    notebook language for the zh README), line for line, with no internal word."""
    import re

    from harness import ROOT
    from student_text import internal_words

    readme = (ROOT / "coursekit" / "student" / f"README.{lang}.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```\n(.*?)```", readme[readme.index("**" + ("验证" if lang == "zh" else "Validate")):],
                        re.S)
    assert len(blocks) >= 4, blocks
    said = {" ".join(line.split()) for line in real_messages(lang).splitlines()}
    status = re.compile(r"（没有通过）$| \(failed\)$")
    for block in blocks:
        assert internal_words(block) == [], block
        for line in block.splitlines():
            line = " ".join(status.sub("", line).split())
            if line:
                assert line in said, (line, sorted(said)[:40])
