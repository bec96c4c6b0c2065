"""Run All on an untouched release: every cell runs or says which exercise it
waits for; nothing else about a cell changes (helpers/run_all.py).

The guard is first tested on small cells in an in-process IPython shell, then
every release notebook is run top to bottom, untouched, in a real kernel, as a
student's Run All would (ch09 is left out: its toy model trains for a minute
whatever the student has written).
"""
from __future__ import annotations

import contextlib
import io
import sys

import nbformat
import pytest
from harness import ROOT

from coursekit.author import build
from helpers import run_all, set_language

UNTOUCHED = [ch for ch in build.chapters() if ch != "ch09_inside_gpt"]


@pytest.fixture
def shell(monkeypatch):
    """An IPython shell with the guard, as a student's kernel has it after `import helpers`.
    The shell takes over ``sys.modules["__main__"]`` and its reset empties it (no ``__spec__``
    left, which multiprocessing needs): the test process gets its own back afterwards."""
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    ip = InteractiveShell.instance()
    ip.reset(new_session=False)
    ip.user_ns[run_all.GUARD] = run_all.Guard()
    guard = run_all.GuardCells()
    ip.ast_transformers.append(guard)
    set_language("en")
    try:
        yield ip
    finally:
        ip.ast_transformers.remove(guard)
        set_language("zh")


def run(ip, source: str):
    """(result, what the cell printed)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = ip.run_cell(source, store_history=False)
    return result, out.getvalue()


STUB = "def softmax(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n"


def test_a_cell_calling_a_stub_says_which_exercise_and_succeeds(shell):
    run(shell, STUB)
    run(shell, "from helpers.checks import exercise\nwith exercise(1, 'softmax'):\n    softmax(1)")
    result, said = run(shell, "w = softmax(2)\nprint('weights', w)")
    assert result.success, result.error_in_exec
    assert "not done yet: this cell needs exercise 1 (softmax)" in said, said
    assert "weights" not in said                       # the rest of the cell did not run


def test_a_cell_needing_what_a_stopped_cell_made_is_skipped_until_that_cell_runs(shell):
    run(shell, STUB)
    run(shell, "w = softmax(2)")
    result, said = run(shell, "print('weights', w)")
    assert result.success and "skipped: this cell needs `w`" in said and "weights" not in said, said
    run(shell, "def softmax(x):\n    return x * 10")   # the student finishes the exercise
    result, said = run(shell, "print('weights', w)")
    assert "skipped" in said                           # w is still the old cell's: run on from there
    run(shell, "w = softmax(2)")
    result, said = run(shell, "print('weights', w)")
    assert result.success and said == "weights 20\n", said


def test_a_name_only_a_function_uses_as_its_own_is_no_reason_to_skip(shell):
    run(shell, STUB)
    run(shell, "x = softmax(1)")
    result, said = run(shell, "def double(x):\n    return 2 * x\nprint(double(4))")
    assert result.success and said == "8\n", said


def test_the_last_expression_is_still_the_cells_value(shell):
    result, _ = run(shell, "a = 3\na * 14")
    assert result.result == 42
    result, _ = run(shell, STUB + "softmax(1)")
    assert result.success and result.result is None


def test_other_errors_are_raised_as_before(shell, tmp_path, monkeypatch):
    result, _ = run(shell, "x = 1\nraise ValueError('a real mistake')")
    assert isinstance(result.error_in_exec, ValueError)
    # a NotImplementedError from a library (PyTorch raises it for an operation a device lacks) is no stub
    (tmp_path / "somelib.py").write_text("def op():\n    raise NotImplementedError('not on this device')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    result, said = run(shell, "import somelib\nsomelib.op()")
    assert isinstance(result.error_in_exec, NotImplementedError) and "not done yet" not in said
    result, _ = run(shell, "print(undefined_name)")  # a NameError not after an empty answer cell
    assert isinstance(result.error_in_exec, NameError)
    sys.modules.pop("somelib", None)


def test_an_empty_answer_cell_and_the_test_after_it(shell):
    result, said = run(shell, "# YOUR CODE HERE\nraise NotImplementedError()")
    assert result.success and "this is an exercise's answer cell" in said, said
    result, said = run(shell, "print(q01_sqrt_dk)")
    assert result.success and "the answer cell above is not written yet (q01_sqrt_dk" in said, said


def test_under_nbgrader_an_unfinished_exercise_still_fails(shell, monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    run(shell, STUB)
    result, said = run(shell, "softmax(1)")
    assert isinstance(result.error_in_exec, NotImplementedError) and "not done yet" not in said
    assert run_all.install() is False


# ------------------------------------------------------------------ the chapters


def untouched_release(chapter: str, lang: str):
    if lang == "zh":                                   # the committed release (test_sync proves it current)
        return nbformat.read(ROOT / "release" / chapter / f"{chapter}.ipynb", as_version=4)
    from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions
    nb = build.build_chapter(chapter, lang)
    nb, _ = ClearSolutions().preprocess(nb, {})
    nb, _ = ClearHiddenTests().preprocess(nb, {})
    return nb


# a demo that needs no exercise, placed after one, and what it prints
DEMOS_AFTER_AN_EXERCISE = {"ch04_positions": "1024", "ch06_param_count": "150,994,944",
                           "ch10_llama_block": "791,040"}


@pytest.mark.parametrize("chapter,lang", [(ch, "zh") for ch in UNTOUCHED] + [("ch01_attention", "en"),
                                                                              ("ch12_quiz", "en")])
def test_run_all_on_an_untouched_release_reaches_the_end(chapter, lang, tmp_path):
    from nbclient import NotebookClient

    from helpers.lab import shell_poll
    from helpers.lab.private_kernel import PrivateKernelManager
    shell_poll.install()   # as the grader and Validate do: a reply pyzmq's poller missed costs a second, not 300 s
    nb = untouched_release(chapter, lang)
    env_path = ROOT / "release" / chapter
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=False,
                   kernel_manager_class=PrivateKernelManager,   # no TCP port another process can take
                   resources={"metadata": {"path": str(env_path)}}).execute()   # raises at a stopped cell
    texts = ["".join(o.get("text", "") for o in c.outputs if o.output_type == "stream") if c.cell_type == "code"
             else "" for c in nb.cells]
    said = "\n".join(texts)
    assert "Traceback" not in said
    for cell, text in zip(nb.cells, texts):            # each test of an exercise says it waits for it
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            assert text.startswith("… ") and "✓" not in text, (meta["grade_id"], text[:300])
    first = next(i for i, x in enumerate(texts) if x.startswith("… "))
    if chapter in DEMOS_AFTER_AN_EXERCISE:
        assert any(DEMOS_AFTER_AN_EXERCISE[chapter] in x for x in texts[first:]), said[-2000:]
