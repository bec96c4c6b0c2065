"""The course's Validate: run a notebook's visible tests the way nbgrader's
Validate does, and say what happened the way the course talks to a student.

nbgrader's dialog is English and shows each failed test cell's source before
its error. Here the answer is, in the notebook's language: the first exercise
that failed with the course's own message (what was expected, what came back,
the hint), no test source; "not done yet: exercise N" for an unfinished one;
a success line naming what passed; and a word on written answers left blank.

Only what the student has runs: a release notebook holds no hidden test.
The result is data (``Result``), which the JupyterLab extension
(helpers/lab/labextension) shows in a dialog and the tests read directly.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..i18n import t
from ..outline import exercise_number, exercise_titles

ANSI = re.compile(r"\x1b\[[0-9;]*m")
COURSE_ERRORS = ("CheckFailed", "GradingFailure")
NOT_DONE = ("NotDoneYet",)


@dataclass
class Item:
    exercise: str        # the exercise's heading ("练习 1：数值稳定的 softmax（从零实现）")
    status: str          # passed, failed, not_done, changed, unanswered
    message: str = ""    # what the student reads under it


@dataclass
class Result:
    lang: str
    status: str                      # passed, failed, not_done, changed, error
    title: str
    summary: str
    items: list[Item] = field(default_factory=list)
    close: str = ""

    def as_json(self) -> dict:
        return asdict(self)


def _words(lang: str):
    from ..i18n import get_language, set_language
    before = get_language()
    set_language(lang)
    return before


def _message(cell) -> tuple[str, str]:
    """(status, message) of a graded test cell after it ran."""
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    stderr = [o for o in cell.get("outputs", []) if o.get("output_type") == "stream" and o.get("name") == "stderr"]
    if errors:
        err = errors[0]
        text = ANSI.sub("", str(err.get("evalue", ""))).strip()
        if err.get("ename") in NOT_DONE:
            return "not_done", text
        if err.get("ename") in COURSE_ERRORS:
            return "failed", text
        if err.get("ename") == "NotImplementedError":
            return "not_done", t("这个练习还是 raise NotImplementedError()：先写完答案单元格。",
                                 "this exercise still raises NotImplementedError(): write its answer cell first.")
        line = _failing_line(err)
        where = t(f"\n  出错的一行：{line}", f"\n  failing line: {line}") if line else ""
        return "failed", t(f"测试运行时你的代码抛出了 {err.get('ename')}: {text}{where}",
                           f"your code raised {err.get('ename')}: {text}{where}")
    if stderr:
        text = ANSI.sub("", "".join(o.get("text", "") for o in stderr)).strip()
        return "failed", t(f"这个测试单元格往 stderr 写了内容，nbgrader 会把它算作失败：\n{text[:600]}",
                           f"this test cell wrote to stderr, which nbgrader counts as a failure:\n{text[:600]}")
    return "passed", ""


def _failing_line(err) -> str:
    """The last line of the student's own code in a traceback (shown as 'failing line')."""
    lines = [ANSI.sub("", line) for line in err.get("traceback", [])]
    code = [m.group(1).strip() for line in lines for m in re.finditer(r"^-*> *\d+ (.*)$", line, re.M)]
    return code[-1] if code else ""


def _changed_cells(nb) -> list:
    from nbgrader import utils
    return [c for c in nb.cells
            if utils.is_locked(c) and "checksum" in c.metadata.get("nbgrader", {})
            and c.metadata["nbgrader"]["checksum"] != utils.compute_checksum(c)]


def _unanswered(nb) -> list:
    from nbgrader import utils
    return [c for c in nb.cells if utils.is_solution(c) and utils.is_grade(c) and c.cell_type == "markdown"
            and c.metadata["nbgrader"].get("checksum") == utils.compute_checksum(c)]


def read_result(nb, lang: str) -> Result:
    """What Validate says about a notebook that has run (its outputs present)."""
    before = _words(lang)
    try:
        return _read(nb, lang)
    finally:
        _words(before)


def _read(nb, lang: str) -> Result:
    titles = exercise_titles(nb)
    items, failed, not_done, passed = [], [], [], []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        name = titles.get(meta["grade_id"]) or meta["grade_id"]
        status, message = _message(cell)
        items.append(Item(name, status, message))
        {"passed": passed, "failed": failed, "not_done": not_done}[status].append(name)
    for cell in _unanswered(nb):
        items.append(Item(titles.get(cell.metadata["nbgrader"]["grade_id"]) or cell.metadata["nbgrader"]["grade_id"],
                          "unanswered", t("这道书面题还没有作答（评分时算 0 分）。",
                                          "this written answer is still as it came (it scores 0 when graded).")))
    order = {"failed": 0, "not_done": 1, "unanswered": 2, "passed": 3}
    items.sort(key=lambda i: order[i.status])     # the first thing to fix comes first
    if failed:
        status = "failed"
        summary = t(f"有 {len(failed)} 个练习的测试没有通过，先看第一个：{failed[0]}。",
                    f"{_count(len(failed), 'exercise')} failed {'its' if len(failed) == 1 else 'their'} tests; "
                    f"start with the first: {failed[0]}.")
    elif not_done:
        status = "not_done"
        summary = t(f"还没有完成：{_numbers(not_done)}。", f"Not done yet: {_numbers(not_done)}.")
        if passed:
            summary += t(f"其余 {len(passed)} 个练习的测试都通过了。",
                         f" The other {_count(len(passed), 'exercise')} pass{'es' if len(passed) == 1 else ''} "
                         f"{'its' if len(passed) == 1 else 'their'} tests.")
    else:
        status = "passed"
        summary = t(f"✓ 全部 {len(passed)} 个练习的测试都通过了：{_numbers(passed)}。",
                    f"✓ All {_count(len(passed), 'exercise')} pass their tests: {_numbers(passed)}." if len(passed) > 1
                    else f"✓ The exercise passes its tests: {_numbers(passed)}.")
    return Result(lang, status, t("验证结果", "Validation"), summary, items, t("关闭", "Close"))


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _numbers(names: list[str]) -> str:
    nums = [exercise_number(n) for n in names]
    if all(nums):
        return t("练习 ", "exercise ") + t("、", ", ").join(str(n) for n in nums)
    return t("；", "; ").join(names)


def changed_result(nb, lang: str) -> Result:
    """A notebook whose read-only cells were edited: say which, before running anything."""
    before = _words(lang)
    try:
        titles = exercise_titles(nb)
        items = [Item(titles.get(c.metadata["nbgrader"].get("grade_id"), "") or c.metadata["nbgrader"].get("grade_id"),
                      "changed", t("这个单元格是只读的，改动会在评分时被换回原样：请撤销你的改动。",
                                   "this cell is read-only and is put back as released when graded: undo your "
                                   "change."))
                 for c in _changed_cells(nb)]
        return Result(lang, "changed", t("验证结果", "Validation"),
                      t(f"你改动了 {len(items)} 个不该改的单元格。", f"You changed {len(items)} read-only cell(s)."),
                      items, t("关闭", "Close"))
    finally:
        _words(before)


def validate(path: Path, config=None) -> Result:
    """Run the notebook at ``path`` as nbgrader's Validate runs it (a fresh
    kernel, NBGRADER_EXECUTION=validate, nbgrader's time limits) and say what
    happened."""
    import nbformat
    from nbgrader import utils
    from nbgrader.preprocessors import CheckCellMetadata, ClearOutput, Execute
    from nbgrader.validator import Validator

    from . import shell_poll
    from .private_kernel import PrivateKernelManager
    shell_poll.install()       # a reply after a widget is never missed for a cell's whole time limit
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    lang = nb.metadata.get("course", {}).get("lang", "en")
    if _changed_cells(nb):
        return changed_result(nb, lang)
    validator = Validator(config=config) if config is not None else Validator()
    resources: dict = {}
    with utils.chdir(str(path.parent)), utils.setenv(NBGRADER_VALIDATING="1", NBGRADER_EXECUTION="validate"):
        for step in (CheckCellMetadata, ClearOutput, Execute):    # what nbgrader's Validate runs
            # its kernel on IPC sockets of its own: no TCP port another process can take (private_kernel.py)
            extra = {"kernel_manager_class": PrivateKernelManager} if step is Execute else {}
            nb, resources = step(parent=validator, **extra).preprocess(nb, resources)
    return read_result(nb, lang)
