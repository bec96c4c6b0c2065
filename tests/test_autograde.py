"""The real nbgrader on synthetic submissions: the solution scores full marks,
the untouched release scores zero, known bugs lose points with feedback that
names it, and correct variants keep full marks.

Every variant of every catalogue is proven in-process, zh and en in turn, each in
both where one chapter's checks or the full catalogue are asked for
(test_grading_inprocess.py: its diagnosis, and what a later exercise that
keeps its marks says). Through the real pipeline the suite grades a sample of
each catalogue that reaches every graded cell a bug can cost: for each test cell the first wrong answer
that loses it, the first wrong answers whose feedback speaks of a later
exercise (the chains), and the first correct variants, handed in together where they
can be, as a student who makes several mistakes at once would (harness.packed: each
group's answers in different cells, wrong and correct never mixed). COURSE_FULL_CATALOGUE=1
grades every variant through nbgrader."""
from __future__ import annotations

import re

import pytest
from harness import (
    SOLUTION,
    UNTOUCHED,
    auto_graded_ids,
    catalogue,
    catalogue_sample,
    catalogued_chapters,
    grade_classes,
    hidden_test_lines,
)

CHAPTERS = catalogued_chapters()
_cache: dict[str, dict] = {}
GROUP = "autograde"     # graded together: every test of this module on one worker


def graded(chapter, request) -> dict:
    """The chapter's results. The first test asking grades, in one run, every chapter this
    session tests here (one class handing in each of them: one warm kernel factory, one
    gradebook and one export for all, as `make grade` grades a class)."""
    if chapter not in _cache:
        here = {item.callspec.params["chapter"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")}
        todo = sorted(here - set(_cache) | {chapter})
        base = request.getfixturevalue("tmp_path_factory").mktemp("class")
        _cache.update(grade_classes({ch: catalogue_sample(ch) for ch in todo}, base))
    return _cache[chapter]


def cases(attr):
    out = []
    for ch in CHAPTERS:
        chosen = {v.name for v in catalogue_sample(ch)}
        for v in getattr(catalogue(ch), attr):
            if v.name in chosen:
                out.append(pytest.param(ch, v, id=f"{ch}-{v.name}", marks=pytest.mark.xdist_group(GROUP)))
    return out


def test_the_sample_reaches_every_test_cell_a_bug_can_cost_and_both_kinds():
    for ch in CHAPTERS:
        cat, chosen = catalogue(ch), catalogue_sample(ch)
        costs = {g for v in cat.BUGS for g in v.lose}
        assert {g for v in chosen for g in v.lose} == costs, ch
        assert any(v in cat.CORRECT for v in chosen) or not cat.CORRECT, ch


@pytest.mark.parametrize("chapter", [pytest.param(c, marks=pytest.mark.xdist_group(GROUP)) for c in CHAPTERS])
def test_solution_full_marks_and_release_zero(chapter, request):
    res = graded(chapter, request)
    import nbformat
    from harness import ROOT
    ids = auto_graded_ids(nbformat.read(ROOT / "source" / chapter / f"{chapter}.ipynb", as_version=4))
    assert ids, "chapter has no auto-graded cells"
    for gid in ids:
        score, max_score = res[SOLUTION].scores[gid]
        assert score == max_score > 0, f"solution lost points on {gid}: {res[SOLUTION].feedback[gid]}"
        assert res[UNTOUCHED].scores[gid][0] == 0, f"untouched release scored on {gid}"
        # the per-exercise export says the same, in a column named by exercise and grade id
        (column,) = [c for c in res[SOLUTION].exported if c.startswith(f"{chapter}/{gid} (")]
        assert float(res[SOLUTION].exported[column]) == max_score, column
        assert float(res[UNTOUCHED].exported[column]) == 0, column


@pytest.mark.parametrize("chapter,variant", cases("BUGS"))
def test_known_bug_loses_points_and_is_named(chapter, variant, request):
    res = graded(chapter, request)[variant.name]
    assert variant.lose, "a bug variant must say which test cell it fails"
    for gid in variant.lose:
        score, max_score = res.scores[gid]
        assert score < max_score, f"{variant.name} kept full marks on {gid}"
        text = res.feedback[gid]
        for word in variant.words:
            assert word in text, f"feedback of {gid} for {variant.name} lacks {word!r}:\n{text}"
    # a wrong answer costs its own points once: every other auto-graded cell keeps full marks
    # (but those the wrong answers handed in with it must lose: harness.packed)
    import nbformat
    from harness import ROOT
    for gid in auto_graded_ids(nbformat.read(ROOT / "source" / chapter / f"{chapter}.ipynb", as_version=4)):
        if gid not in variant.lose and gid not in res.others_lose:
            score, max_score = res.scores[gid]
            assert score == max_score, f"{variant.name} also lost points on {gid}:\n{res.feedback[gid]}"
    for gid, words in variant.said.items():
        for word in words:
            assert word in res.feedback[gid], f"feedback of {gid} for {variant.name} lacks {word!r}:\n{res.feedback[gid]}"


@pytest.mark.parametrize("chapter,variant", cases("CORRECT"))
def test_correct_variant_keeps_full_marks(chapter, variant, request):
    res = graded(chapter, request)[variant.name]
    import nbformat
    from harness import ROOT
    ids = auto_graded_ids(nbformat.read(ROOT / "source" / chapter / f"{chapter}.ipynb", as_version=4))
    for gid in ids:
        score, max_score = res.scores[gid]
        assert score == max_score, f"{variant.name} lost points on {gid}:\n{res.feedback[gid]}"


@pytest.mark.parametrize("chapter", [pytest.param(c, marks=pytest.mark.xdist_group(GROUP)) for c in CHAPTERS])
def test_feedback_never_shows_hidden_tests(chapter, request):
    import html
    import re

    import nbformat
    from harness import ROOT
    res = graded(chapter, request)
    secret = hidden_test_lines(nbformat.read(ROOT / "source" / chapter / f"{chapter}.ipynb", as_version=4))
    assert secret, "the chapter has no hidden tests"
    checked = 0
    for name, r in res.items():
        assert r.feedback_html, f"no feedback generated for {name}"
        text = html.unescape(re.sub(r"<[^>]+>", "", r.feedback_html))
        for line in secret:
            assert line not in text, f"feedback of {name} shows hidden test line {line!r}"
        assert "HIDDEN TESTS" not in text
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize("chapter", [pytest.param(c, marks=pytest.mark.xdist_group(GROUP)) for c in CHAPTERS])
def test_feedback_has_no_internal_word_and_speaks_the_chapters_language(chapter, request):
    """Every feedback page of the chapter's catalogue (right, wrong, broken and
    unfinished answers): no verdict or bug token, no exception class, no
    seal; the page declares its language, and in the zh build the course's
    words (the frame, the checks' messages, errors) hold no English sentence
    outside code, maths, quoted errors and the titles of works."""
    from student_text import english_sentences, internal_words, page_text
    res = graded(chapter, request)
    for name, r in res.items():
        text = page_text(r.feedback_html)
        assert internal_words(text) == [], (name, internal_words(text))
        said = page_text(r.feedback_html, printed=False)     # a demo's printout may be data (Shakespeare)
        assert english_sentences(said) == [], (name, english_sentences(said)[:5])
        assert '<html lang="zh-CN">' in r.feedback_html
        images = re.findall(r"<img [^>]*>", r.feedback_html)
        assert all('alt="' in img for img in images), name
