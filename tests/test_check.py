"""`python course.py check --chapter chNN_name` (`make check CHAPTER=…`): every
check of one chapter in one command, one line per part, the failures' own
messages last. Run here on copies of the course in which one chapter has been
broken the way an instructor's edit breaks it: a rule that lost its breaking
case, a visible test that no longer holds."""
from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys

import pytest
from harness import ROOT

from coursekit.author import check

CHAPTER = "ch06_param_count"     # small and quick: three exercises, no training
IGNORE = shutil.ignore_patterns(".venv", ".git", "__pycache__", ".pytest_cache", ".cache", ".grading", "autograded",
                                "submitted", "feedback", "artifacts", "_site", "dist", "workspace", "gradebook.db*")


def course_copy(tmp_path):
    dest = tmp_path / "course"
    shutil.copytree(ROOT, dest, ignore=IGNORE, symlinks=True)
    return dest


def edit(path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path.name}: {old!r} found {text.count(old)} times"
    path.write_text(text.replace(old, new), encoding="utf-8")


def run_check(root, parts) -> tuple[int, list[str]]:
    out = io.StringIO()
    rc = check.check(CHAPTER, only=parts, root=root, out=out)
    text = out.getvalue()
    print(text)
    return rc, [line for line in text.splitlines() if line.strip()]


def no_framework_noise(lines: list[str]) -> None:
    text = "\n".join(lines)
    for noise in ("Traceback", "INFO", "distributed.", "def test_", "===", "short test summary", "E   "):
        assert noise not in text, f"{noise!r} in the output:\n{text}"


def a_rule_broken_by_single_rule_answers(catalogue: str) -> str:
    """A rule of the catalogue that only wrong answers breaking it alone name (`breaks=("id",)`)."""
    alone = re.findall(r'breaks=\("([^"]+)",\)', catalogue)
    return next(r for r in sorted(set(alone)) if catalogue.count(f'"{r}"') == alone.count(r))


def test_a_rule_that_loses_its_breaking_case_fails_with_the_ledgers_words_last(tmp_path):
    root = course_copy(tmp_path)
    path = root / "tests" / "catalogue" / f"{CHAPTER}.py"
    catalogue = path.read_text(encoding="utf-8")
    rule = a_rule_broken_by_single_rule_answers(catalogue)
    path.write_text(catalogue.replace(f', breaks=("{rule}",)', ""), encoding="utf-8")   # every answer breaking it
    assert f'"{rule}"' not in path.read_text(encoding="utf-8")
    rc, lines = run_check(root, ["ledgers"])
    assert rc == 1
    assert lines[1].startswith("✗ rule and claims ledgers") and re.search(r"  1 of \d+ failed", lines[1]), lines[1]
    assert lines[2].startswith(f"✗ {CHAPTER}: 1 of 1 part failed (rule and claims ledgers) in "), lines[2]
    # the last lines: which test, then the ledger's own report of that one rule, nothing after it
    assert lines[-3] == f"── tests/test_rules.py::test_every_marked_rule_has_a_wrong_answer_that_breaks_it[{CHAPTER}]"
    assert lines[-2] == "1 problems with the rule ledger:"
    assert lines[-1].startswith(f"{CHAPTER}: rule {rule!r} has no wrong answer in the catalogue that breaks it "
                                "(and no waiver): "), lines[-1]
    no_framework_noise(lines)


# a line an edit could leave in a visible test: it fails, with the course's own check and words
BROKEN = 'expect_true(1 + 1 == 3, t("一加一不等于三。", "one and one do not make three."))'


def test_a_visible_test_that_breaks_fails_in_both_languages_with_its_message_last(tmp_path):
    root = course_copy(tmp_path)
    path = root / "notebooks" / f"{CHAPTER}.md"
    text = path.read_text(encoding="utf-8")
    end = "### END HIDDEN TESTS\n"            # the visible part of the chapter's first test cell starts here
    assert end in text
    path.write_text(text.replace(end, f"{end}from helpers.checks import expect_true\n{BROKEN}\n", 1), encoding="utf-8")
    rc, lines = run_check(root, ["visible"])
    assert rc == 1
    summary = {line[2:].split("  ")[0]: line for line in lines[1:3]}
    for lang in ("zh", "en"):   # the one broken test cell fails; with the model answers the others pass
        assert summary[f"visible tests, {lang}"].startswith("✗"), summary
        assert int(re.search(r"  1 of (\d+) failed", summary[f"visible tests, {lang}"]).group(1)) >= 2, summary
    zh = lines.index(next(line for line in lines if line.startswith("✗ visible tests, zh: 1 failure")))
    assert lines[zh + 1].startswith("── ") and lines[zh + 2] == "一加一不等于三。", lines[zh:zh + 3]
    # the English part reports last (the parts' order): its exercise, then the test's own message
    assert lines[-3].startswith("✗ visible tests, en: 1 failure"), lines[-3:]
    assert lines[-2].startswith("── ") and lines[-1] == "one and one do not make three.", lines[-3:]
    no_framework_noise(lines)


def test_failure_messages_keep_the_assertions_words_and_drop_pytests():
    text = ('def test_x():\n>       assert not found, msg\nE       AssertionError: 2 problems:\n'
            'E           a: rule has no wrong answer\nE       assert not [\'a\']\n\ntest_x.py:6: AssertionError')
    assert check.failure_message("", text) == "2 problems:\n  a: rule has no wrong answer"   # as the assert wrote it
    bare = "def test_y():\n>       assert [1, 2] == [1, 3]\nE       assert [1, 2] == [1, 3]\nE         At index 1 diff"
    assert check.failure_message("", bare).startswith("assert [1, 2] == [1, 3]")      # nothing else to say
    chained = ("E       ValueError: inner\n\ntest_x.py:2: ValueError\n\nThe above exception was the direct cause "
               "of the following exception:\n\n>   raise RuntimeError('outer') from e\nE   RuntimeError: outer\n")
    assert check.failure_message("", chained) == "RuntimeError: outer"


def test_each_part_selects_what_exists():
    parts = check.parts("ch02_causal_mask", ROOT, ROOT / ".grading" / "unused")
    assert [p.key for p in parts] == ["build", "ledgers", "unit", "visible", "visible", "hidden", "nbgrader",
                                      "content", "browser", "lint"]
    for part in parts:
        for arg in part.argv:
            if arg.startswith("tests/"):
                assert (ROOT / arg).is_file(), arg
    browser = (ROOT / "tests" / "test_browser.py").read_text(encoding="utf-8")
    for chapter, names in check.BROWSER_TESTS.items():
        assert all(f"def {name}(" in browser for name in names), chapter
    assert "grading/ch02_causal_mask.py" in check.lint_files("ch02_causal_mask")


def test_the_parts_processes_keep_dask_quiet():
    """The grading pipeline runs on Dask: its INFO lines would bury a failure's message."""
    probe = "import logging, distributed; print(logging.getLogger('distributed.scheduler').getEffectiveLevel())"
    env = check.environment(ROOT, check.Part("x", "x", []))
    quiet = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    env.pop("DASK_LOGGING__DISTRIBUTED", None)
    loud = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert (int(quiet.stdout), int(loud.stdout)) == (40, 20)


def test_make_check_and_course_py_check_reach_the_command():
    from coursekit import cli
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^check:.*\n\t(.*)\n", makefile, re.M).group(1)
    assert "course.py check" in recipe and "$(CHAPTER)" in recipe and "$(PARTS)" in recipe
    args = cli.parser().parse_args(["check", "--chapter", "ch02_causal_mask", "--parts", "visible,ledgers"])
    assert args.fn is cli.cmd_check and args.parts == "visible,ledgers"
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["check"])           # a chapter must be named
    with pytest.raises(check.BuildError, match="the parts: build, ledgers"):
        check.check("ch02_causal_mask", only=["visibel"], out=io.StringIO())
    with pytest.raises(check.BuildError, match="no chapter 'ch99_nothing'"):
        check.check("ch99_nothing", out=io.StringIO())


def test_parts_side_by_side_give_pytorch_their_share_of_the_cores(monkeypatch):
    """Two parts at a time on two cores: each part's PyTorch gets one thread (two each
    spun for cores the other part held); a value the shell sets is kept."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    probe = "import torch; print(torch.get_num_threads())"
    env = check.environment(ROOT, check.Part("x", "x", []), threads=1)
    assert subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert check.environment(ROOT, check.Part("x", "x", []), threads=1)["OMP_NUM_THREADS"] == "3"
