"""Lecture cells marked ``replay`` (coursekit.author.replay and replay_sync, coursekit.grade.replay and recorder).

- The build refuses a mark it can prove wrong, naming the cell and the name.
- replay/<chapter>.json holds the marked cells of today's build, both languages.
- Grading replays a marked cell only on a submission where that is safe: the
  cell's source is the course's, it reads nothing the student defines, and
  nothing after it reads what it defines.
- Both ways: for every chapter with marks, the model answer and the catalogue's
  sample (every entry, BUGS and CORRECT, under COURSE_FULL_CATALOGUE=1 or the
  chapter's own checks) are run in-process as nbgrader would run them
  (NBGRADER_EXECUTION set), once with the marked cells executed and once with
  them replayed (left out, per the grading side's own plan for that
  submission); each test cell must end the same way with the same words.
- One real ``nbgrader autograde`` of a chapter's model answer with replay on:
  full marks, and the feedback page shows the recorded output of a replayed cell.
"""
from __future__ import annotations

import contextlib
import html
import importlib
import io
import json
import linecache
import os
import textwrap

import nbformat
import pytest
from harness import ROOT, UNTOUCHED, catalogue_sample, catalogued_chapters, make_submission, output_text

from coursekit.author import build, replay, replay_sync
from coursekit.grade import replay as grade_replay

FRONT = ("---\njupytext:\n  text_representation:\n    format_name: myst\n"
         "kernelspec:\n  name: python3\n  display_name: Python 3\n---\n\n")


def chapter_text(*cells: str) -> str:
    """A tiny chapter: a heading in both languages, then code cells."""
    out = [FRONT, '+++ {"lang": "zh"}\n\n# 标题\n\n+++ {"lang": "en"}\n\n# Title\n\n']
    for src in cells:
        out.append(src.strip("\n") + "\n\n")
    return "".join(out)


def code(src: str, meta: str = "") -> str:
    return f"```{{code-cell}} ipython3\n{meta}{textwrap.dedent(src).strip()}\n```"


MARK = ":tags: [replay]\n\n"
ANSWER = "---\nnbgrader: {grade_id: f_answer, solution: true}\n---\n"
TEST = "---\nnbgrader: {grade_id: test_f, grade: true, points: 1}\n---\n"
ANSWER_CELL = code("def f(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION", ANSWER)


def build_text(tmp_path, text: str):
    (tmp_path / "ch99_demo.md").write_text(text, encoding="utf-8")
    return build.build_chapter("ch99_demo", "zh", root=tmp_path)


# ------------------------------------------------------------------ the build refuses a wrong mark

@pytest.mark.parametrize("cells,words", [
    # reads what an answer cell defines
    ((ANSWER_CELL, code("print(f(3))", MARK)), ("f", "answer cell")),
    # ... or what a cell that read an answer defines
    ((ANSWER_CELL, code("y = f(3) + 1"), code("print(y)", MARK)), ("y", "answer cell")),
    # defines a name a later cell reads (the test cell here)
    ((code("scale = 3", MARK), ANSWER_CELL, code("assert f(scale) == 6", TEST)), ("scale", "later cell")),
    # ... through a function a later cell calls
    ((code("def helper(v):\n    return v + 1", MARK), code("print(helper(1))")), ("helper", "later cell")),
    # changes an object an earlier cell made, or the global random state
    ((code("xs = [1, 2]"), code("xs.append(3)", MARK), code("print(xs)")), ("xs", ".append")),
    ((code("import torch"), code("torch.manual_seed(0)", MARK)), ("torch", "manual_seed")),
    ((code("import torch"), code("print(torch.randn(2))", MARK)), ("torch", "random")),
    ((code("table = {}"), code("table['a'] = 1", MARK)), ("table", "assigns")),
    # a later cell that reads every name
    ((code("secret = 1", MARK), code("print(sorted(globals()))")), ("secret", "later cell")),
])
def test_the_build_refuses_a_mark_it_can_prove_wrong(tmp_path, cells, words):
    with pytest.raises(build.BuildError) as err:
        build_text(tmp_path, chapter_text(*cells))
    msg = str(err.value)
    # the cell is named by the line of its fence in the chapter text
    marked = next(i for i, c in enumerate(cells) if MARK in c)
    starts = [n for n, text in enumerate(chapter_text(*cells).splitlines(), 1) if text.startswith("```{code-cell}")]
    assert "replay" in msg and "ch99_demo.md" in msg and f"(line {starts[marked]})" in msg, msg
    for word in words:
        assert word in msg, f"{word!r} missing from: {msg}"


def test_a_right_mark_is_kept_out_of_the_build(tmp_path):
    text = chapter_text(code("import math"), code("print(math.pi)  # a lecture aside", MARK),
                        ANSWER_CELL, code("assert f(2) == 4", TEST))
    nb = build_text(tmp_path, text)
    assert not any("tags" in c.metadata for c in nb.cells), "the mark leaked into the build"
    kept = build.build_chapter("ch99_demo", "en", root=tmp_path, keep_marks=True)
    assert [c.source for c in kept.cells if replay.is_marked(c)] == ["print(math.pi)  # a lecture aside"]


def test_a_mark_on_a_graded_or_one_language_cell_is_refused(tmp_path):
    marked_answer = ANSWER.replace("solution: true}\n", "solution: true}\ntags: [replay]\n")
    with pytest.raises(build.BuildError, match="shared lecture code cell"):
        build_text(tmp_path, chapter_text(code("def f(x):\n    ### BEGIN SOLUTION\n    return x\n    "
                                               "### END SOLUTION", marked_answer)))
    one_language = code('set_language("zh")', ":lang: zh\n:tags: [replay]\n\n") + "\n\n" + \
        code('set_language("en")', ":lang: en\n\n")
    with pytest.raises(build.BuildError, match="shared lecture code cell"):
        build_text(tmp_path, chapter_text(one_language))


# ------------------------------------------------------------------ the record and the grading side's plan

def _has_marks(chapter: str) -> bool:
    """A cheap look at the chapter text (the build, below, is the judge)."""
    text = (build.NOTEBOOKS / f"{chapter}.md").read_text(encoding="utf-8")
    return any(line.startswith(":tags:") and replay.MARK in line or
               line.startswith("tags:") and replay.MARK in line for line in text.splitlines())


MARKED = [ch for ch in build.chapters() if _has_marks(ch)]


def test_a_chapter_without_marks_has_no_record():
    recorded = sorted(p.stem for p in (ROOT / "replay").glob("*.json"))
    assert set(recorded) <= set(MARKED), f"replay/ holds records of chapters that mark no cell: {recorded}"


@pytest.mark.parametrize("chapter,lang", [(ch, lang) for ch in build.chapters() if ch not in MARKED
                                          for lang in build.LANGS])
def test_a_chapter_that_marks_nothing_is_graded_one_way_only(chapter, lang):
    """Both ways for the chapters that mark no cell: their build has no mark, no record
    exists, and the grading side's plan for the model answer replays nothing (its Execute
    step runs every cell, as it would with replay off): one way, the same run."""
    assert not replay_sync.marked_cells(chapter, lang)
    assert replay.load(chapter) == {} and not replay.record_path(chapter).exists()
    nb = build.build_chapter(chapter, lang)
    ours = {c.source for c in nb.cells if c.cell_type == "code" and not c.metadata.get("nbgrader", {}).get("solution")}
    assert grade_replay.plan(nb, replay.load(chapter).get(lang) or {}, ours) == {}


@pytest.mark.parametrize("chapter", MARKED)
def test_record_holds_the_marked_cells_of_the_build(chapter):
    assert any(replay_sync.marked_cells(chapter, "zh")), f"{chapter}: the text has a mark the build does not see"
    assert replay_sync.in_sync(chapter) == []
    record = replay.load(chapter)
    for lang in build.LANGS if record else ():
        for cid, rec in record[lang].items():
            assert rec["outputs"], f"{chapter} ({lang}) {cid}: a marked cell with no recorded output"
            assert not any(o.get("output_type") == "error" for o in rec["outputs"])


def _submission(chapter: str, edit: dict[str, str] | None = None, extra: str | None = None):
    """The model answer as a student hands it in (the zh release), ``edit``: cell id -> new source,
    ``extra``: a cell of the student's own at the end."""
    release = nbformat.read(ROOT / "release" / chapter / f"{chapter}.ipynb", as_version=4)
    source = nbformat.read(ROOT / "source" / chapter / f"{chapter}.ipynb", as_version=4)
    nb = make_submission(release, source, None)
    for cell in nb.cells:
        if edit and cell.id in edit:
            cell.source = edit[cell.id]
    if extra is not None:
        nb.cells.append(nbformat.v4.new_code_cell(extra))
    return nb


def _plan(chapter, nb):
    return grade_replay.plan(nb, replay.load(chapter)["zh"], grade_replay.course_sources(ROOT, chapter))


@pytest.mark.skipif(not MARKED, reason="no chapter marks a cell")
def test_grading_replays_only_where_the_submission_allows_it():
    chapter = MARKED[0]
    marked = replay_sync.marked_cells(chapter, "zh")
    first = marked[0]
    ids = [c.id for c in _submission(chapter).cells]
    plan = _plan(chapter, _submission(chapter))
    assert sorted(ids[i] for i in plan) == sorted(c.id for c in marked), "the model answer replays every mark"
    # an edited marked cell runs (the student's code there is never replaced by the record)
    plan = _plan(chapter, _submission(chapter, edit={first.id: first.source + "\nprint('mine')"}))
    assert first.id not in {ids[i] for i in plan}
    # a cell of the student's own that reads what a marked cell defines makes that cell run
    defined = sorted(replay.names(first.source).defines)
    if defined:
        plan = _plan(chapter, _submission(chapter, extra=f"print({defined[0]})"))
        assert first.id not in {ids[i] for i in plan}
    # a marked cell that reads a name the student redefines runs
    read = sorted(n for n in replay.names(first.source).reads if n.isidentifier() and n not in dir(__builtins__))
    if read:
        nb = _submission(chapter)
        at = next(i for i, c in enumerate(nb.cells) if c.id == first.id)
        nb.cells.insert(at, nbformat.v4.new_code_cell(f"{read[0]} = None"))
        assert first.id not in {c.id for i, c in enumerate(nb.cells) if i in _plan(chapter, nb)}
    # the untouched release (answers unfinished) still replays: the marks read no answer
    release = nbformat.read(ROOT / "release" / chapter / f"{chapter}.ipynb", as_version=4)
    assert sorted(ids[i] for i in _plan(chapter, release)) == sorted(c.id for c in marked)


# ------------------------------------------------------------------ both ways, in-process

def needed(nb, marked: set[int]) -> set[int]:
    """The code cells a run needs: the answer and test cells, ``marked``, and, walking
    back, every cell that defines a name a needed cell after it reads, or that
    changes something it did not make (a seed, an object, the random state).
    The other lecture cells (those only the pictures and printouts of the text
    depend on) are the same in both ways and are left out of both."""
    need: set[int] = set()
    reads: set[str] = set()
    for i in reversed(range(len(nb.cells))):
        cell = nb.cells[i]
        if cell.cell_type != "code":
            continue
        n = replay.names(cell.source)
        if (i in marked or "nbgrader" in cell.metadata or n.changes
                or replay.EVERYTHING in reads or set(n.defines) & reads or replay.EVERYTHING in n.defines):
            need.add(i)
            reads |= set(n.reads)
    return need


def _run_cell(cell, ns: dict, outcomes: dict) -> None:
    """One code cell in ``ns`` as the grading kernel runs it (an error is its outcome and
    the run goes on); a test cell's outcome (what it raised, what it printed) goes to ``outcomes``."""
    from IPython.core.inputtransformer2 import TransformerManager
    src = TransformerManager().transform_cell(cell["source"])
    name = f"/tmp/ipykernel_course/{cell['id']}.py"          # like IPython: a file name with the source
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    buf = io.StringIO()
    raised = None
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        try:
            exec(compile(src, name, "exec", dont_inherit=True), ns)
        except Exception as e:  # noqa: BLE001 (a cell's error is its outcome, as in the kernel)
            raised = (type(e).__name__, str(e))
    if cell["test"]:
        outcomes[cell["test"]] = (raised, buf.getvalue())


def run_shared(runs: dict, lang: str) -> dict:
    """Run many cell sequences (key -> list of cells: id, source, test grade id or None),
    each in its own namespace, and return key -> the outcomes of its test cells.

    The sequences of a chapter share long beginnings (the same lecture cells; the
    model answer of every exercise but the one a variant edits), so they are run as
    a tree: a shared beginning runs once, and the process forks where sequences part
    (each branch in a child, one after another). A run that costs a whole notebook
    per sequence costs, this way, one notebook plus what differs."""
    import pickle
    root: dict = {"leaves": [], "kids": {}}
    for key, cells in runs.items():
        node = root
        for cell in cells:
            edge = (cell["id"], cell["source"])
            node = node["kids"].setdefault(edge, {"cell": cell, "leaves": [], "kids": {}})
        node["leaves"].append(key)

    def walk(node, ns, outcomes, fd):
        for key in node["leaves"]:
            data = pickle.dumps((key, outcomes))
            os.write(fd, len(data).to_bytes(8, "little"))
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        kids = list(node["kids"].values())
        for j, kid in enumerate(kids):
            if j == len(kids) - 1:          # the last branch goes on in this process
                _run_cell(kid["cell"], ns, outcomes)
                walk(kid, ns, outcomes, fd)
                return
            pid = os.fork()
            if pid == 0:
                try:
                    mine = dict(outcomes)
                    _run_cell(kid["cell"], ns, mine)
                    walk(kid, ns, mine, fd)
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)

    import torch
    torch.set_num_threads(1)                # one thread: forking a process with an idle thread pool is safe
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            from helpers import set_language
            set_language(lang)
            walk(root, {"__name__": "__main__"}, {}, w)
        finally:
            os._exit(0)
    os.close(w)
    raw = b""
    with os.fdopen(r, "rb") as f:
        raw = f.read()
    os.waitpid(pid, 0)
    out, at = {}, 0
    while at < len(raw):
        n = int.from_bytes(raw[at:at + 8], "little")
        key, outcomes = pickle.loads(raw[at + 8:at + 8 + n])
        out[key] = outcomes
        at += 8 + n
    return out


def _variants(chapter):
    """The model answer and the chapter's catalogue sample (harness.catalogue_sample: every
    test cell a wrong answer can cost, the chains, correct variants; the whole catalogue under
    COURSE_FULL_CATALOGUE=1 or the chapter's own checks)."""
    return [("model_answer", {})] + [(v.name, v.replace) for v in catalogue_sample(chapter, whole_when_asked=True)]


BOTH_WAYS = [ch for ch in MARKED if ch in catalogued_chapters()]


def _en_build(chapter: str):
    """The chapter's English source build (answers and hidden tests in place)."""
    return nbformat.from_dict(json.loads(build.dumps(build.build_chapter(chapter, "en"))))


# zh: the untouched release, the model answer and the catalogue's sample; en: the model
# answer and the correct variants (the same code cells, the other language's record)
@pytest.mark.parametrize("chapter,lang", [(ch, lang) for ch in BOTH_WAYS for lang in build.LANGS])
def test_every_catalogue_entry_grades_the_same_with_marks_run_or_replayed(chapter, lang, monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    if lang == "zh":
        release = nbformat.read(ROOT / "release" / chapter / f"{chapter}.ipynb", as_version=4)
        source = nbformat.read(ROOT / "source" / chapter / f"{chapter}.ipynb", as_version=4)
        ours = grade_replay.course_sources(ROOT, chapter)
        entries = [(UNTOUCHED, None), *_variants(chapter)]
    else:
        release = source = _en_build(chapter)
        ours = {c.source for c in source.cells
                if c.cell_type == "code" and not c.metadata.get("nbgrader", {}).get("solution")}
        correct = {v.name for v in importlib.import_module(f"catalogue.{chapter}").CORRECT}
        entries = [(n, r) for n, r in _variants(chapter) if n == "model_answer" or n in correct]
    recorded = replay.load(chapter)[lang]
    # the graded cells restored as nbgrader restores them (the hidden tests are in the test cells)
    tests = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source.cells
             if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"}
    runs, replayed = {}, {}
    for name, replace in entries:
        nb = make_submission(release, source, replace, fill=replace is not None)
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if gid in tests:
                cell.source = tests[gid]
        skip = set(grade_replay.plan(nb, recorded, ours))
        replayed[name] = len(skip)
        run = needed(nb, {i for i, c in enumerate(nb.cells) if c.get("id") in recorded})
        cells = [{"id": c.id, "source": c.source,
                  "test": c.metadata.get("nbgrader", {}).get("grade_id") if c.metadata.get("nbgrader", {}).get("grade")
                  else None} for c in nb.cells]
        runs[(name, "ran")] = [cells[i] for i in sorted(run)]
        runs[(name, "replayed")] = [cells[i] for i in sorted(run - skip)]
    got = run_shared(runs, lang)
    assert set(got) == set(runs), f"runs that never finished: {sorted(set(runs) - set(got))}"
    differ = [f"{name}: {gid}: {got[(name, 'ran')][gid]!r} vs {got[(name, 'replayed')].get(gid)!r}"
              for name, _ in entries
              for gid in got[(name, "ran")] if got[(name, "ran")][gid] != got[(name, "replayed")].get(gid)]
    assert not differ, "\n".join(differ)
    assert replayed["model_answer"] == len(recorded), f"{chapter}: the model answer did not replay every mark"
    assert len(got[("model_answer", "ran")]) == len(tests)
    if lang == "zh":
        assert any(o[0] for o in got[(UNTOUCHED, "ran")].values()), "the untouched release should fail its tests"


# ------------------------------------------------------------------ one real autograde, replay on

@pytest.mark.skipif(not MARKED, reason="no chapter marks a cell")
def test_real_autograde_replays_a_marked_cell_and_the_page_shows_its_recorded_output(tmp_path):
    from harness import setup_course, submit

    from coursekit.grade import pipeline
    from coursekit.grade.sandbox import sandbox_available
    chapter = "ch08_efficiency" if "ch08_efficiency" in MARKED else MARKED[0]
    work = setup_course(tmp_path / "course", chapter)
    assert (work / "replay" / f"{chapter}.json").exists()      # the course's record goes with its source
    release = nbformat.read(work / "release" / chapter / f"{chapter}.ipynb", as_version=4)
    source = nbformat.read(work / "source" / chapter / f"{chapter}.ipynb", as_version=4)
    submit(work, "ann", chapter, make_submission(release, source, None))
    os.environ.pop(grade_replay.ENV, None)
    pipeline.grade(work, chapter=chapter, sandbox=sandbox_available()[0], quiet=True, report=False)

    from harness import auto_scores
    points = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"] for c in source.cells
              if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"}
    assert auto_scores(work, chapter, "ann") == pytest.approx({g: float(p) for g, p in points.items()})
    graded = nbformat.read(work / "autograded" / "ann" / chapter / f"{chapter}.ipynb", as_version=4)
    record = replay.load(chapter)["zh"]
    page = (work / "feedback" / "ann" / chapter / f"{chapter}.html").read_text(encoding="utf-8")
    shown = 0
    for cell in graded.cells:
        if cell.get("id") in record:
            assert "execution" not in cell.metadata, f"{cell.id} ran: it should have been replayed"
            assert output_text(cell) == output_text(nbformat.from_dict({"outputs": record[cell.id]["outputs"]}))
            for out in record[cell.id]["outputs"]:       # the page shows what was recorded
                png = out.get("data", {}).get("image/png")
                if png:
                    assert png.replace("\n", "")[:200] in page.replace("\n", ""), f"{cell.id}: picture not on the page"
                    shown += 1
                elif out.get("output_type") == "stream":
                    line = next(x for x in out["text"].splitlines() if x.strip())
                    assert html.escape(line.strip(), quote=False) in page, f"{cell.id}: {line!r} not on the page"
                    shown += 1
    assert shown >= len(record), "a replayed cell shows nothing on the page"


def test_both_ways_catches_a_mark_whose_effect_the_analysis_cannot_see():
    """A cell that builds a layer draws from the global random generator without
    naming it: the analysis lets it through, the both-ways comparison does not."""
    import torch
    lecture = {"id": "demo", "source": "layer = torch.nn.Linear(2, 2)\nprint(layer)", "test": None}
    before = {"id": "setup", "source": "import torch\ntorch.manual_seed(0)", "test": None}
    test = {"id": "t", "source": "print(torch.rand(1).item())", "test": "t"}
    assert not replay.problems([replay.Cell("setup", before["source"], False, False),
                                replay.Cell("demo", lecture["source"], False, True),
                                replay.Cell("t", test["source"], False, False)])
    got = run_shared({"ran": [before, lecture, test], "replayed": [before, test]}, "zh")
    assert got["ran"]["t"] != got["replayed"]["t"]
    assert torch.get_num_threads() >= 1


def test_a_new_record_makes_the_chapters_pages_graded_again(tmp_path):
    """The recorded outputs are on the feedback pages: a result kept from before a
    record changed would show the old ones (coursekit.grade.reuse)."""
    from coursekit.grade import intake, reuse
    (tmp_path / "source" / "ch99_demo").mkdir(parents=True)
    (tmp_path / "source" / "ch99_demo" / "ch99_demo.ipynb").write_text("{}")
    jobs = [intake.Job("ch99_demo", "ann")]
    before = reuse.Keys.of(tmp_path, jobs, {}).chapters["ch99_demo"]
    (tmp_path / "replay").mkdir()
    (tmp_path / "replay" / "ch99_demo.json").write_text("{}")
    after = reuse.Keys.of(tmp_path, jobs, {}).chapters["ch99_demo"]
    (tmp_path / "replay" / "ch99_demo.json").write_text('{"zh": {}}')
    assert len({before, after, reuse.Keys.of(tmp_path, jobs, {}).chapters["ch99_demo"]}) == 3


def test_the_record_goes_stale_when_the_cell_or_what_it_reads_from_changes(tmp_path):
    def fingerprint(setup: str, other: str, marked: str) -> str:
        text = chapter_text(code(setup), code(other), code(marked, MARK), ANSWER_CELL, code("assert f(2) == 4", TEST))
        (tmp_path / "ch99_demo.md").write_text(text, encoding="utf-8")
        return replay_sync.marked_inputs("ch99_demo", "zh", tmp_path)["ch99-003"]["inputs_sha"]
    base = fingerprint("n = 3", "m = 1", "print(n * 2)")
    assert fingerprint("n = 3", "m = 2", "print(n * 2)") == base          # a cell it does not read from
    assert fingerprint("n = 4", "m = 1", "print(n * 2)") != base          # a cell it reads from
    assert fingerprint("n = 3", "m = 1", "print(n * 3)") != base          # the cell itself
