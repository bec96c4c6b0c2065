"""The build: chapter texts -> nbgrader source notebooks, and the rules it enforces."""
from __future__ import annotations

import textwrap

import pytest
from harness import asked_chapters

from coursekit.author import build

# COURSE_CHAPTERS=ch01_attention,ch02_causal_mask limits the checks that go over every chapter to those
# (python course.py check --chapter runs this file so)
CHAPTERS = [c for c in build.chapters() if not asked_chapters() or c in asked_chapters()]

HEADER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3 (ipykernel)
  language: python
  name: python3
---
"""

GOOD = HEADER + textwrap.dedent('''
    +++ {"lang": "zh"}

    # 标题

    +++ {"lang": "en"}

    # Title

    ```{code-cell} ipython3
    ---
    nbgrader: {grade_id: answer, solution: true}
    ---
    def f():
        ### BEGIN SOLUTION
        return 1
        ### END SOLUTION
    ```

    ```{code-cell} ipython3
    ---
    nbgrader: {grade_id: test_answer, grade: true, points: 2}
    ---
    assert f() == 1
    ```

    ```{code-cell} ipython3
    :lang: zh

    LABEL = "你好"
    ```

    ```{code-cell} ipython3
    :lang: en

    LABEL = "hello"
    ```
    ''')


def write(tmp_path, text, name="ch99_demo"):
    (tmp_path / f"{name}.md").write_text(text, encoding="utf-8")
    return name


@pytest.mark.parametrize("lang,word,other", [("zh", "标题", "Title"), ("en", "Title", "标题")])
def test_build_selects_one_language(tmp_path, lang, word, other):
    nb = build.build_chapter(write(tmp_path, GOOD), lang, tmp_path)
    text = "".join(c.source for c in nb.cells)
    assert word in text and other not in text
    assert nb.metadata["course"] == {"chapter": "ch99_demo", "lang": lang}
    assert sum(1 for c in nb.cells if "LABEL" in c.source) == 1


def test_build_completes_nbgrader_metadata(tmp_path):
    nb = build.build_chapter(write(tmp_path, GOOD), "zh", tmp_path)
    meta = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"] for c in nb.cells if "nbgrader" in c.metadata}
    assert meta["answer"] == {"grade": False, "grade_id": "answer", "locked": False, "schema_version": 3,
                              "solution": True, "task": False}
    assert meta["test_answer"]["locked"] is True and meta["test_answer"]["points"] == 2


def test_build_is_deterministic(tmp_path):
    name = write(tmp_path, GOOD)
    assert build.dumps(build.build_chapter(name, "zh", tmp_path)) == build.dumps(build.build_chapter(name, "zh", tmp_path))


@pytest.mark.parametrize("mutate,message", [
    (lambda s: s.replace("grade_id: test_answer", "grade_id: answer"), "duplicate grade id 'answer'"),
    (lambda s: s.replace("    ### BEGIN SOLUTION\n", ""), "no ### BEGIN SOLUTION"),
    (lambda s: s.replace("grade: true, points: 2", "grade: true"), "has no points"),
    (lambda s: s.replace('+++ {"lang": "en"}\n\n# Title\n', ""), "no 'en' counterpart"),
    (lambda s: s.replace('+++ {"lang": "zh"}\n', "+++\n"), "markdown cell has no language"),
    (lambda s: s.replace(':lang: en\n', ':lang: fr\n'), "unknown language 'fr'"),
    (lambda s: s.replace("assert f() == 1", "### BEGIN HIDDEN TESTS\nassert 1\n### END HIDDEN TESTS")
               .replace("grade: true, points: 2", "grade: false"), "hidden tests in a cell that is not graded"),
])
def test_build_rejects_broken_chapter_naming_the_cell(tmp_path, mutate, message):
    bad = mutate(GOOD)
    assert bad != GOOD, "the mutation did not apply"
    with pytest.raises(build.BuildError) as err:
        build.build_chapter(write(tmp_path, bad), "zh", tmp_path)
    assert message in str(err.value)
    assert "cell " in str(err.value) and "line " in str(err.value)


def test_every_chapter_builds_in_both_languages():
    assert CHAPTERS, "no chapters found in notebooks/ (or none of those COURSE_CHAPTERS names)"
    for ch in CHAPTERS:
        for lang in build.LANGS:
            nb = build.build_chapter(ch, lang)
            assert nb.cells


# ------------------------------------------------ one language in code cells too

CJK = __import__("re").compile(r"[\u2e80-\u9fff\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef]")


@pytest.mark.parametrize("lang,expected", [
    ("zh", 'print("分数：", s)\nx = f"共 {n} 个"\n'),
    ("en", 'print("scores:", s)\nx = f"{n} in all"\n'),
])
def test_resolve_code_keeps_only_one_language(lang, expected):
    src = 'print(t("分数：", "scores:"), s)\nx = t(f"共 {n} 个", f"{n} in all")\n'
    assert build.resolve_code(src, lang) == expected


def test_resolve_code_handles_labels_nesting_and_line_breaks():
    src = ('ax.set_title(plots.label("标题", "title"))\n'
           'msg = t(f"第 {t(\'一\', \'one\')} 个",\n'
           '        f"number {t(\'一\', \'one\')}")\n'
           'long = t("很长的"\n'
           '         "一句话", "a long "\n'
           '         "sentence")\n')
    out = build.resolve_code(src, "en")
    assert 'ax.set_title("title")' in out
    assert "msg = f\"number {t('一', 'one')}\"" in out            # inner t() is inside the chosen f-string
    assert 'long = ("a long "\n         "sentence")' in out          # brackets keep the continuation legal
    compile(out, "<cell>", "exec")


def test_resolve_code_leaves_other_calls_alone():
    src = ('t(zh_text, en_text)\nt("只有一个")\nt("甲", "A", extra=1)\nsplit("中", "x")\n'
           'obj.t("中", "x")\n%timeit t("中", "x")\n')
    assert build.resolve_code(src, "en") == src          # variables, one argument, keywords, other names, magics
    assert build.resolve_code('y = t("中", "x")', "zh") == 'y = "中"'


def test_english_build_has_no_chinese_in_any_code_cell():
    for ch in CHAPTERS:
        nb = build.build_chapter(ch, "en")
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue          # prose may quote Chinese on purpose (ch11 translates into Chinese numerals)
            hits = [line for line in cell.source.splitlines() if CJK.search(line)]
            assert not hits, f"{ch} (en) cell {i}: {hits[:2]}"


def test_chinese_build_has_no_unresolved_pair_and_its_prose_is_chinese():
    import re
    pair = re.compile(r"(?<![\w.])(t|label)\(\s*f?[\"']")
    for ch in CHAPTERS:
        nb = build.build_chapter(ch, "zh")
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                assert not pair.search(cell.source), f"{ch} (zh) cell {i} still picks its language at run time"
            elif re.search(r"[A-Za-z]{3,}\s+[a-z]{3,}\s+[a-z]{3,}\s+[a-z]{3,}", cell.source):
                assert CJK.search(cell.source), f"{ch} (zh) markdown cell {i} reads as English only"


def test_text_stub_follows_the_source_language(tmp_path):
    for lang in build.LANGS:
        nb = build.build_chapter(write(tmp_path, GOOD), lang, tmp_path)
        dest = tmp_path / "source" / "ch99_demo" / "ch99_demo.ipynb"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(build.dumps(nb), encoding="utf-8")
        assert build.text_stub("ch99_demo", tmp_path) == build.TEXT_STUBS[lang]
    assert CJK.search(build.TEXT_STUBS["zh"]) and build.TEXT_STUBS["en"] == "YOUR ANSWER HERE"
