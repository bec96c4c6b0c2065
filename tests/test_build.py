"""The build: chapter texts -> nbgrader source notebooks, and the rules it enforces."""
from __future__ import annotations

import textwrap

import pytest

from coursekit import build

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
    assert build.chapters(), "no chapters found in notebooks/"
    for ch in build.chapters():
        for lang in build.LANGS:
            nb = build.build_chapter(ch, lang)
            assert nb.cells
