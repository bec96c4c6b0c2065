"""The README is a front door: what the course is, the chapters, the two commands, where
to read more, in both languages; and every command it lists still exists.

Each language's part fits on two screens and holds no measured table or figure
(those live in docs/benchmarks.md, with their records); each guide it points to
exists in both languages, and the Chinese part points to the Chinese ones.

A `make X VAR=…` is a target of the Makefile whose recipe uses each variable shown; a
`python course.py X …` is one of course.py's commands, and the options shown parse
with the command's own parser (coursekit.cli) or are the ones course.py passes on; a
`python bench/….py --opt`, in the README or a guide beside the figure it made, is a
file that defines the option. Placeholders (`FROM=…`,
`[--send]`, `path`) are read as a value of the right kind.
"""
from __future__ import annotations

import importlib.util
import re
import shlex

import pytest
from harness import ROOT

from coursekit import cli

README = (ROOT / "README.md").read_text(encoding="utf-8")
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")
SHOWN = sorted(set(re.findall(r"`((?:make|python) [^`]+)`", README)))
# the benchmark commands the README and the guides give beside the figures they made
TEXTS = [README] + [p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md"))]
BENCH = sorted({" ".join(c.split()) for text in TEXTS for c in re.findall(r"`(python bench/[^`]+)`", text)})
SCREENS = 70          # lines a language's part may take: about two screens
# a measured figure: a time, a rate or a ratio, written with its unit
MEASURED = re.compile(r"\d+(?:[.,]\d+)?\s*(?:ms|s|min|minutes?|seconds?|hours?|秒|分钟|小时|×|倍|tokens/s)(?![A-Za-z])")


def course_py():
    spec = importlib.util.spec_from_file_location("course_front_door", ROOT / "course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recipe(target: str) -> str:
    """The target's recipe and the variables it expands (one level of NAME = … definitions)."""
    m = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", MAKEFILE, re.M)
    assert m, f"the README shows `make {target}`, which the Makefile does not define"
    text = m.group(1)
    for name in set(re.findall(r"\$\(([A-Z_]+)\)", text)):
        d = re.search(rf"^{name} = (.*(?:\\\n.*)*)", MAKEFILE, re.M)
        text += d.group(1) if d else ""
    return text


def as_argv(words: list[str]) -> list[str]:
    """The README's placeholders as values: `FROM…` a path, `[--send]` the option."""
    out = []
    for w in words:
        w = w.strip("[]")
        out.append("submissions.zip" if "…" in w or w == "FROM" else w)
    return out


def test_the_readme_shows_commands_of_both_kinds():
    assert sum(c.startswith("make ") for c in SHOWN) >= 10
    assert sum(c.startswith("python course.py ") for c in SHOWN) >= 10


@pytest.mark.parametrize("shown", [c for c in SHOWN if c.startswith("make ")])
def test_each_make_command_is_a_target_using_the_variables_shown(shown):
    for part in shown.split("&&"):
        words = shlex.split(part.replace("…", "x"))[1:]
        target, variables = words[0], [w.split("=")[0] for w in words[1:] if "=" in w]
        body = recipe(target)
        for var in variables:
            name = "COURSE_LANG" if var == "LANG" else var   # LANG= on the command line becomes COURSE_LANG
            assert f"$({name})" in body or f"$(or $({name})" in body, \
                f"`{shown}`: the recipe of `{target}` does not use {var}"


@pytest.mark.parametrize("shown", [c for c in SHOWN if c.startswith("python course.py ")])
def test_each_course_py_command_exists_and_takes_the_options_shown(shown):
    words = as_argv(shlex.split(shown)[2:])
    front = course_py()
    assert words[0] in front.COMMANDS or words[0] == "help", f"`{shown}`: course.py has no command {words[0]}"
    if words[0] in ("help", "env", "lab", "instructor-lab", "test", "bench"):
        return   # course.py's own: no options to check beyond the name
    if words[0] == "bench-train":
        source = (ROOT / "bench" / "train_gpt.py").read_text(encoding="utf-8")
        assert all(f'"{w}"' in source for w in words[1:] if w.startswith("--")), shown
        return
    try:
        cli.parser().parse_args(words)
    except SystemExit as exc:
        pytest.fail(f"`{shown}`: the command's parser refuses these options ({exc})")


@pytest.mark.parametrize("shown", BENCH)
def test_each_bench_command_is_a_script_with_the_options_shown(shown):
    words = shlex.split(shown)[1:]
    script = ROOT / words[0]
    assert script.is_file(), f"`{shown}`: no {words[0]}"
    source = script.read_text(encoding="utf-8")
    for w in words[1:]:
        if w.startswith("--"):
            assert f'"{w}"' in source, f"`{shown}`: {words[0]} has no option {w}"


def test_this_test_refuses_a_command_that_is_gone():
    """The checks above fail on a README that shows a command nobody defines."""
    with pytest.raises(AssertionError):
        recipe("grade-everything")
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["grade", "--chapters", "ch01_attention"])


# ------------------------------------------------------------------ a front door, not a report


def parts(text: str = README) -> dict[str, list[str]]:
    """The README's English part (up to the rule before the Chinese section) and its Chinese part."""
    lines = text.splitlines()
    zh = lines.index("## 中文说明")
    end = max(i for i in range(zh) if lines[i].strip() == "---")
    return {"en": lines[:end], "zh": lines[zh:]}


def measured(lines: list[str]) -> list[str]:
    """Lines that hold a measured figure, or a table row of numbers."""
    found = []
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        numbers = [c for c in cells if re.fullmatch(r"[\d.,]+", c)]
        if len(numbers) >= 2 or MEASURED.search(re.sub(r"`[^`]*`", "", line)):
            found.append(line)
    return found


def test_each_language_fits_on_two_screens_and_holds_no_measured_figure():
    for lang, lines in parts().items():
        assert len(lines) <= SCREENS, f"the README's {lang} part is {len(lines)} lines (at most {SCREENS})"
        assert measured(lines) == [], f"measured figures in the README's {lang} part (docs/benchmarks.md holds them)"


def test_the_measure_finds_a_table_and_a_timing():
    assert measured(["| ch01 | 0.88 | 0.09 |", "the first build took 23 min on 2 cores", "快 4.55 倍"]) == \
        ["| ch01 | 0.88 | 0.09 |", "the first build took 23 min on 2 cores", "快 4.55 倍"]
    assert measured(["PyTorch 2.13 CPU, nbgrader 0.9.6", "| `ch01_attention` | attention |",
                     "`make bench-train TEXT=path SECONDS=92`"]) == []


def test_both_parts_list_every_chapter_and_point_to_every_guide_in_their_language():
    from coursekit.author import build
    from coursekit.author.site import GUIDES

    for lang, lines in parts().items():
        text = "\n".join(lines)
        for chapter in build.chapters():
            assert f"| `{chapter}` |" in text, f"the README's {lang} part has no row for {chapter}"
        for files in GUIDES.values():
            for f in files.values():
                assert (ROOT / "docs" / f).is_file(), f"docs/{f} is missing"
            assert f"](docs/{files[lang]})" in text, f"the README's {lang} part does not point to docs/{files[lang]}"


def test_the_suite_leaves_the_deployments_tests_to_test_system_and_ci_runs_both():
    """`course.py test` deselects the tests marked system, `--system` runs only them,
    `--all` both; tests named by path run as named. `.ci/run` runs the two parts."""
    front = course_py()
    assert front.test_selection([]) == ["-m", "not system"]
    assert front.test_selection(["-k", "ch02", "-x"]) == ["-m", "not system", "-k", "ch02", "-x"]
    assert front.test_selection(["--system", "-x"]) == ["-m", "system", "-x"]
    assert front.test_selection(["--all"]) == []
    assert front.test_selection(["tests/test_postgres.py"]) == ["tests/test_postgres.py"]
    assert front.test_selection(["tests/test_dist.py::test_pack_contains_no_solution_or_hidden_test"]) == \
        ["tests/test_dist.py::test_pack_contains_no_solution_or_hidden_test"]
    assert front.test_selection(["-m", "autograde"]) == ["-m", "autograde"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    loop = re.search(r'for part in (.*); do\n\s*python3 course.py test \$part', ci)
    assert loop and shlex.split(loop.group(1)) == ["", "--system"], ci
    assert "system:" in (ROOT / "pyproject.toml").read_text(encoding="utf-8")   # the mark is registered
