"""An exercise is a specification, and the answer ships nowhere a student works.

* Every exercise of ch01-ch11, in both languages, shows its difficulty and the
  minutes it should take (``{{exercise: level=N, minutes=M}}`` under its
  heading) and at least two ordered, folded hints (``<details>`` whose summary
  is "提示 1…", "提示 2…" / "Hint 1…", "Hint 2…"), before its answer cell.
* No student-facing text (a release notebook in either language, helpers/,
  the student README) names a file or a command the student pack lacks
  (``bench/``, ``tests/``, ``make bench``, ``python course.py grade``...).
* No line of a model answer (at least 12 characters once whitespace is
  removed, not a comment, not an import or ``super().__init__()``) appears in
  a student's notebook outside a folded hint, nor in ``helpers/`` or any other
  file that every chapter's release carries. A later chapter's own folder
  (notebooks/given/, named in the instructor guide) may carry an earlier answer.
"""
from __future__ import annotations

import functools
import io
import re
import tokenize

import pytest
from harness import ROOT

from coursekit.author import build

CHAPTERS = [c for c in build.chapters() if c != "ch12_quiz"]     # the quiz's questions are not exercises
HEADING = re.compile(r"^#{2,3}\s+(?:练习|Exercise)\s*(\d+)", re.M)
DETAILS = re.compile(r"<details>\s*<summary>(.*?)</summary>(.*?)</details>", re.S)
META = {"zh": re.compile(r"\*\*难度\*\* [★☆]{3}　\*\*建议用时\*\* 约 \d+ 分钟"),
        "en": re.compile(r"\*\*Difficulty\*\* [★☆]{3} · \*\*Time\*\* about \d+ minutes")}
HINT = {"zh": "提示 {}", "en": "Hint {}"}
BOILERPLATE = ("super().__init__()",)
MIN_CHARS = 12


# ------------------------------------------------------------------ the statements

def statements(nb) -> dict[int, str]:
    """Exercise number -> the markdown from its heading to its first answer cell."""
    out, current, text = {}, None, []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "markdown" and not meta.get("solution"):
            m = HEADING.search(cell.source)
            if m:
                if current is not None and current not in out:
                    out[current] = "\n".join(text)
                current, text = int(m.group(1)), []
            if current is not None:
                text.append(cell.source)
        elif meta.get("solution") and current is not None and current not in out:
            out[current] = "\n".join(text)
    return out


def problems_of(statement: str, lang: str) -> list[str]:
    found = []
    metas = META[lang].findall(statement)
    if len(metas) != 1:
        found.append(f"{len(metas)} difficulty/time lines (want one: {{{{exercise: level=N, minutes=M}}}})")
    summaries = [s.strip() for s, _ in DETAILS.findall(statement)]
    hints = [s for s in summaries if re.match(HINT[lang].format(r"\d+"), s)]
    if len(hints) < 2:
        found.append(f"{len(hints)} folded hints (want at least 2: <details><summary>{HINT[lang].format(1)}…)")
    for i, s in enumerate(hints, 1):
        if not s.startswith(HINT[lang].format(i)):
            found.append(f"hint {i} is headed {s!r}: hints are numbered in order")
            break
    return found


@pytest.mark.parametrize("lang", build.LANGS)
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_exercise_shows_its_difficulty_its_minutes_and_ordered_folded_hints(chapter, lang):
    nb = build.build_chapter(chapter, lang)
    found = statements(nb)
    assert found, f"{chapter} ({lang}): no exercise heading found"
    bad = {n: p for n, s in found.items() if (p := problems_of(s, lang))}
    assert not bad, f"{chapter} ({lang}): " + "; ".join(f"exercise {n}: {', '.join(p)}" for n, p in bad.items())


def test_the_format_check_sees_a_statement_without_hints_or_meta():
    good = ("## 练习 1：x\n\n**难度** ★★☆　**建议用时** 约 10 分钟\n\n写 f。\n\n"
            "<details><summary>提示 1：思路</summary>\n\n想一想。\n\n</details>\n\n"
            "<details><summary>提示 2：用哪些运算</summary>\n\ntorch.tril\n\n</details>\n")
    assert problems_of(good, "zh") == []
    assert problems_of(good.replace("**难度** ★★☆　**建议用时** 约 10 分钟", ""), "zh")
    assert problems_of(good.replace("提示 2", "提示 3"), "zh")
    assert problems_of(good.split("<details><summary>提示 2")[0], "zh")
    assert problems_of("Hint: use torch.tril.", "en")


def test_the_build_renders_the_difficulty_and_time_in_each_language():
    assert META["zh"].fullmatch(build.exercise_meta_line(2, 10, "zh"))
    assert META["en"].fullmatch(build.exercise_meta_line(3, 25, "en"))
    assert build.exercise_meta_line(1, 5, "en").count("★") == 1


# ------------------------------------------------------------------ no answer where the student works

def _code_line(tokens) -> str:
    return "".join(tok.string for tok in tokens if tok.type not in (
        tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER))


def significant(source: str) -> set[str]:
    """The lines of ``source`` a reader could recognise: whitespace and comments
    removed, at least MIN_CHARS long, imports and boilerplate left out."""
    lines: dict[int, list] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            lines.setdefault(tok.start[0], []).append(tok)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return {re.sub(r"\s+", "", line) for line in source.splitlines()
                if len(re.sub(r"\s+", "", line)) >= MIN_CHARS and not line.strip().startswith("#")}
    out = set()
    for toks in lines.values():
        text = _code_line(toks)
        if len(text) >= MIN_CHARS and not text.startswith(("import", "from")) and text not in BOILERPLATE:
            out.add(text)
    return out


@functools.lru_cache(maxsize=None)
def answer_lines(chapter: str) -> frozenset[str]:
    """The significant lines of the chapter's model answers (between the solution marks)."""
    found = set()
    for lang in build.LANGS:
        for cell in build.build_chapter(chapter, lang).cells:
            if cell.cell_type != "code":
                continue
            m = re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cell.source, re.S)
            for region in m:
                found |= significant(_dedent(region))
    return frozenset(found)


def _dedent(text: str) -> str:
    import textwrap
    return textwrap.dedent(text)


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


@functools.lru_cache(maxsize=None)
def student_texts(chapter: str, lang: str, folded: bool = False) -> list[tuple[str, str]]:
    """(where, text) of what a student's notebook shows outside folded hints
    (``folded``: the hints too)."""
    from coursekit.author import site
    nb = site.student_notebook(chapter, lang)
    out = []
    for i, cell in enumerate(nb.cells):
        text = DETAILS.sub("", cell.source) if cell.cell_type == "markdown" and not folded else cell.source
        out.append((f"release/{chapter} ({lang}) cell {i}", text))
    return out


def carried_by_every_release() -> list[tuple[str, str]]:
    """Every text file a student pack holds besides the chapters' own folders."""
    paths = [p for p in (ROOT / "helpers").rglob("*") if p.is_file() and p.suffix in (".py", ".json", ".md", ".txt")]
    paths += [ROOT / "course.py", ROOT / "coursekit" / "student" / "workspace.py"]
    paths += sorted((ROOT / "coursekit" / "student").glob("README.*.md"))
    return [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in paths]


def leaks(lines, texts) -> list[str]:
    squeezed = [(where, _squeezed(text)) for where, text in texts]
    return [f"{where}: {line}" for line in sorted(lines) for where, text in squeezed if line in text]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_model_answer_line_in_the_students_notebook_outside_a_folded_hint(chapter):
    lines = answer_lines(chapter)
    assert len(lines) >= 3, f"{chapter}: only {len(lines)} answer lines to look for: are the marks found?"
    found = leaks(lines, [x for lang in build.LANGS for x in student_texts(chapter, lang)])
    assert not found, f"{chapter}: model answer lines the student sees:\n  " + "\n  ".join(found)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_model_answer_line_in_what_every_release_carries(chapter):
    found = leaks(answer_lines(chapter), carried_by_every_release())
    assert not found, f"{chapter}: model answer lines in files every release carries:\n  " + "\n  ".join(found)


def test_the_leak_check_finds_a_dictated_line_and_ignores_a_folded_one():
    answer = significant("    q, k, v = x @ w_q, x @ w_k, x @ w_v   # (n, d)\n    import math\n    return out\n")
    assert answer == {"q,k,v=x@w_q,x@w_k,x@w_v"}
    shown = [("cell", "Compute `q, k, v = x @ w_q, x @ w_k, x @ w_v`, then the scores.")]
    folded = [("cell", DETAILS.sub("", "<details><summary>Hint 3</summary>\n\nq, k, v = x @ w_q, x @ w_k, "
                                         "x @ w_v\n</details>"))]
    assert leaks(answer, shown) == ["cell: q,k,v=x@w_q,x@w_k,x@w_v"]
    assert leaks(answer, folded) == []


# ------------------------------------------------------------------ only what the pack holds

PACK_COMMANDS = {"lab", "env", "help"}             # what `make` / `python course.py` offer in a student pack
NOT_IN_PACK = re.compile(r"(?<![\w./-])(bench|tests|grading|source|coursekit|notebooks|docs|submitted|autograded|feedback|"
                         r"deploy|replay)/[\w.*/-]*")
COMMAND = re.compile(r"(?:`make|\bcourse\.py)\s+([a-z][\w-]*)")     # a command as code, never the English verb


def outside_the_pack(text: str) -> list[str]:
    """Files and commands ``text`` names that a student pack does not have."""
    found = [m.group(0) for m in NOT_IN_PACK.finditer(text)]
    found += [m.group(0) for m in COMMAND.finditer(text) if m.group(1) not in PACK_COMMANDS]
    return found


@pytest.mark.parametrize("chapter", build.chapters())
def test_a_chapter_names_no_file_or_command_the_student_pack_lacks(chapter):
    found = [f"{where}: {hit}" for lang in build.LANGS for where, text in student_texts(chapter, lang, folded=True)
             for hit in outside_the_pack(text)]
    assert not found, f"{chapter} names what the student pack lacks:\n  " + "\n  ".join(found)


def shown_strings(source: str) -> str:
    """The string literals of a module a student may see printed or drawn (docstrings
    and comments are for whoever reads the code, not shown)."""
    import ast
    tree = ast.parse(source)
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return "\n".join(n.value for n in ast.walk(tree)
                     if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs)


def test_the_helpers_and_the_student_readme_name_nothing_the_pack_lacks():
    texts = [(p, text if not p.endswith(".py") else shown_strings(text)) for p, text in carried_by_every_release()
             if p.startswith("helpers/") or "README" in p]
    found = [f"{where}: {hit}" for where, text in texts for hit in outside_the_pack(text)]
    assert not found, "the student pack names what it lacks:\n  " + "\n  ".join(found)


def test_the_pack_check_sees_a_benchmark_file_and_an_instructor_command():
    assert outside_the_pack("kept in `bench/results/extrapolation_seeds.json`") == ["bench/results/extrapolation_seeds.json"]
    assert outside_the_pack("(`make bench` runs 512)") == ["`make bench"]
    assert outside_the_pack("make it run, then make the plot") == []
    shown = shown_strings('"""See bench/doc.py."""\ndef f():\n    """bench/doc"""\n    print("kept in bench/x.json")  # bench/c\n')
    assert outside_the_pack(shown) == ["bench/x.json"]
    assert outside_the_pack("run `make lab`, or `python course.py lab`; see helpers/plots.py") == []
