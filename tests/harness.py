"""Drive the real nbgrader on synthetic submissions.

A chapter's catalogue (tests/catalogue/<chapter>.py) lists Variants: the code
that replaces a student's answer cells, which test cells must then lose their
points, and the words the feedback must contain. ``grade_class`` builds a
throw-away course in a temporary folder, writes one submission per variant
(plus the untouched release), runs ``nbgrader autograde`` once for all of them
and reads back scores from the gradebook and feedback text from the
autograded notebooks.
"""
from __future__ import annotations

import csv
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from dataclasses import replace as copied
from pathlib import Path

import nbformat

from coursekit.base.nbgrader_run import nbgrader

ROOT = Path(__file__).resolve().parent.parent
GIVEN = ROOT / "notebooks" / "given"     # files a chapter hands out beside its notebook: importable as
if str(GIVEN) not in sys.path:           # they are there (from block_attention import ...), in-process too
    sys.path.append(str(GIVEN))
UNTOUCHED = "untouched_release"
SOLUTION = "full_solution"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def asked_chapters() -> list[str]:
    """The chapters whose own checks were asked for (COURSE_CHAPTERS=ch01_attention,ch02_causal_mask,
    as `make check` sets it); empty: the whole course's."""
    return [c for c in os.environ.get("COURSE_CHAPTERS", "").split(",") if c]


def catalogued_chapters() -> list[str]:
    """Chapters that have a known-bug catalogue in tests/catalogue/."""
    return sorted(p.stem for p in (Path(__file__).parent / "catalogue").glob("ch[0-9][0-9]_*.py"))


FULL_CATALOGUE = os.environ.get("COURSE_FULL_CATALOGUE") == "1"
CHAINS, CORRECT_SAMPLED = 2, 2    # per chapter, in the sample


def catalogue(chapter: str):
    import importlib
    return importlib.import_module(f"catalogue.{chapter}")


def catalogue_sample(chapter: str, whole_when_asked: bool = False) -> list:
    """The catalogue entries of ``chapter`` that the suite runs through its costlier paths (real
    nbgrader, both ways of replay): for each test cell the first wrong answer that loses it, the
    first wrong answers whose feedback speaks of a later exercise (the chains), and the first
    correct variants. Every entry where the whole catalogue is asked for (COURSE_FULL_CATALOGUE=1)
    or, with ``whole_when_asked``, the chapter's own checks are (COURSE_CHAPTERS, as
    `make check CHAPTER=` sets it)."""
    cat = catalogue(chapter)
    if FULL_CATALOGUE or whole_when_asked and chapter in asked_chapters():
        return cat.BUGS + cat.CORRECT
    names: list[str] = []
    for gid in dict.fromkeys(g for v in cat.BUGS for g in v.lose):          # each test cell a bug can cost
        names.append(next(v.name for v in cat.BUGS if gid in v.lose))
    names += [v.name for v in cat.BUGS if any(g not in v.lose for g in v.said)][:CHAINS]
    names += [v.name for v in cat.CORRECT][:CORRECT_SAMPLED]
    return [v for v in cat.BUGS + cat.CORRECT if v.name in set(names)]


def processes_whose(variable: str, matches) -> list:
    """The live processes whose environment has ``variable`` with a value ``matches`` accepts
    (what a test started, found by a mark it put in their environment)."""
    import psutil
    out = []
    for p in psutil.process_iter():
        try:
            if matches(p.environ().get(variable)):
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


@dataclass(frozen=True)
class Variant:
    """One synthetic submission.

    name     -- student id (letters, digits, underscores)
    replace  -- grade id of an answer cell -> the code the student wrote there
    lose     -- grade ids of test cells that must score below full marks; every
                other auto-graded cell must keep its full marks (an earlier
                exercise's mistake is not charged again to a later one)
    words    -- strings the feedback of those cells must contain (zh build)
    said     -- grade id of a cell that keeps its marks -> strings its feedback
                must contain (zh build): "correct given a correct softmax"
    breaks   -- the ids of the rules this wrong answer breaks, as the chapter
                marks them in notebooks/ (the rule ledger, tests/test_rules.py);
                its ``words`` are then what names the rule
    """
    name: str
    replace: dict[str, str]
    lose: tuple[str, ...] = ()
    words: tuple[str, ...] = ()
    said: dict[str, tuple[str, ...]] = field(default_factory=dict)
    breaks: tuple[str, ...] = ()


@dataclass
class Result:
    scores: dict[str, tuple[float, float]] = field(default_factory=dict)  # grade id -> (score, max)
    feedback: dict[str, str] = field(default_factory=dict)               # grade id -> text of outputs
    feedback_html: str = ""                                              # what nbgrader hands back
    exported: dict[str, str] = field(default_factory=dict)               # the row of grades_by_exercise.csv
    others_lose: frozenset = frozenset()   # the cells the other wrong answers handed in with it must lose

    def total(self) -> tuple[float, float]:
        return (sum(s for s, _ in self.scores.values()), sum(m for _, m in self.scores.values()))


def auto_graded_ids(nb) -> list[str]:
    """Grade ids of auto-graded test cells (code cells with points)."""
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")]


def make_submission(release_nb, source_nb, replace: dict[str, str] | None, fill: bool = True):
    """The release notebook as a student would hand it in: answer cells filled
    with the model solution (``fill``), then any cell in ``replace`` swapped."""
    sol = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source_nb.cells
           if c.metadata.get("nbgrader", {}).get("solution")}
    nb = nbformat.from_dict(release_nb)
    replace = dict(replace or {})
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in replace:
            cell.source = replace.pop(gid)
        elif fill and gid in sol:
            cell.source = _strip_markers(sol[gid])
    if replace:
        raise KeyError(f"no such answer cell(s): {sorted(replace)}")
    return nb


def _strip_markers(src: str) -> str:
    return "\n".join(l for l in src.splitlines() if l.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))


def solution_editor(chapter: str):
    """``edit(grade_id, (old, new), ...)``: the model solution of one answer cell
    of ``chapter`` with each (old, new) replaced exactly once, as a Variant's
    ``replace`` dict (the catalogues write wrong answers as small edits)."""
    nb = nbformat.read(ROOT / "source" / chapter / f"{chapter}.ipynb", as_version=4)
    solutions = {c.metadata["nbgrader"]["grade_id"]: _strip_markers(c.source) for c in nb.cells
                 if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"}

    def edit(grade_id: str, *pairs: tuple[str, str]) -> dict:
        src = solutions[grade_id]
        for old, new in pairs:
            assert src.count(old) == 1, f"{grade_id}: {old!r} found {src.count(old)} times"
            src = src.replace(old, new)
        return {grade_id: src}
    return edit


def hidden_test_lines(source_nb) -> set[str]:
    """Lines between the hidden-test markers of a source notebook."""
    lines, inside = set(), False
    for cell in source_nb.cells:
        for line in cell.source.splitlines():
            if "### BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "### END HIDDEN TESTS" in line:
                inside = False
            elif inside and line.strip():
                lines.add(line.strip())
    return lines


def grading_course(root: Path, chapter: str):
    """A course folder to grade in: the nbgrader config and one chapter's
    source and release. Returns the chapter's (release, source) notebooks."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    for part in ("source", "release"):
        shutil.copytree(ROOT / part / chapter, root / part / chapter)
    copy_replay(root, chapter)
    return (nbformat.read(root / "release" / chapter / f"{chapter}.ipynb", as_version=4),
            nbformat.read(root / "source" / chapter / f"{chapter}.ipynb", as_version=4))


def copy_replay(root: Path, chapter: str) -> None:
    """The recorded outputs of the chapter's cells marked ``replay`` (replay/<chapter>.json),
    which grading puts in place of running them (coursekit.grade.replay), if it has any."""
    record = ROOT / "replay" / f"{chapter}.json"
    if record.exists():
        (root / "replay").mkdir(parents=True, exist_ok=True)
        shutil.copy(record, root / "replay" / record.name)


def submit(root: Path, student: str, chapter: str, nb) -> None:
    """Put a notebook where `make grade` looks: submitted/<student>/<chapter>/."""
    d = root / "submitted" / student / chapter
    d.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, d / f"{chapter}.ipynb")


def auto_scores(root: Path, chapter: str, student: str) -> dict[str, float]:
    """Score per graded cell in the course's SQLite gradebook (ungraded = 0)."""
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        sub = gb.find_submission_notebook(chapter, chapter, student)
        return {g.name: (g.score or 0.0) for g in sub.grades}


def graded_cell_text(root: Path, chapter: str, student: str, grade_id: str) -> str:
    """What a cell of the autograded notebook printed (streams and error messages)."""
    nb = nbformat.read(root / "autograded" / student / chapter / f"{chapter}.ipynb", as_version=4)
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return "".join(o.get("text", "") + o.get("evalue", "") for o in c.get("outputs", []))
    return ""


def setup_course(workdir: Path, chapter: str) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "nbgrader_config.py", workdir / "nbgrader_config.py")
    shutil.copytree(ROOT / "source" / chapter, workdir / "source" / chapter, dirs_exist_ok=True)
    copy_replay(workdir, chapter)
    nbgrader(["generate_assignment", chapter, "--force", "--log-level=ERROR"], workdir)
    return workdir


def output_text(cell) -> str:
    parts = []
    for o in cell.get("outputs", []):
        if o.output_type == "stream":
            parts.append(o.text)
        elif o.output_type == "error":
            parts.append(f"{o.ename}: {o.evalue}")
            parts.extend(o.traceback)
        elif "text/plain" in o.get("data", {}):
            parts.append(o["data"]["text/plain"])
    return ANSI.sub("", "\n".join(parts))


def grade_class(chapter: str, variants: list[Variant], workdir: Path) -> dict[str, Result]:
    """Autograde every variant (plus the untouched release and the full
    solution) in one grading run; return their results by name."""
    return grade_classes({chapter: variants}, workdir)[chapter]


def packed(variants: list[Variant]) -> list[list[Variant]]:
    """The variants handed in together, as a student who makes several mistakes at once
    hands them in: each group's answers fill different answer cells and lose different
    cells; wrong and correct answers are never mixed, and a wrong answer whose feedback
    speaks of a later exercise (``said``: its words name every earlier mistake) is handed
    in alone. Each exercise is graded on its own (an earlier exercise's
    mistake is not charged again to a later one, which tests/test_grading_inprocess.py
    proves for every entry alone), so a group scores, cell by cell, what each of its
    members scores alone; a chapter's sample takes a few notebooks instead of one each."""
    groups: list[tuple[list[Variant], set, set, bool]] = []
    for v in variants:
        touch, cells, wrong = set(v.replace), set(v.lose) | set(v.said), bool(v.lose)
        for members, touched, spoken, kind in groups:
            if kind == wrong and not v.said and not members[0].said and not touch & touched and not cells & spoken:
                members.append(v)
                touched |= touch
                spoken |= cells
                break
        else:
            groups.append(([v], touch, cells, wrong))
    return [members for members, *_ in groups]


def grade_classes(variants: dict[str, list[Variant]], workdir: Path) -> dict[str, dict[str, Result]]:
    """Autograde, for each chapter, its variants (plus the untouched release and the
    full solution) in one grading run of all the chapters, as a class that hands in
    several chapters is graded; return each chapter's results by variant name. Variants
    are handed in together where they can be (``packed``): each one's Result is its
    notebook's, with ``others_lose`` the cells its notebook-mates must lose."""
    from nbgrader.api import Gradebook

    subs: dict[str, dict] = {}
    members: dict[str, dict[str, list[Variant]]] = {}
    for chapter, chosen in variants.items():
        setup_course(workdir, chapter)
        release_nb = nbformat.read(workdir / "release" / chapter / f"{chapter}.ipynb", as_version=4)
        source_nb = nbformat.read(workdir / "source" / chapter / f"{chapter}.ipynb", as_version=4)
        subs[chapter] = {UNTOUCHED: make_submission(release_nb, source_nb, None, fill=False),
                         SOLUTION: make_submission(release_nb, source_nb, None)}
        members[chapter] = {UNTOUCHED: [], SOLUTION: []}
        if len({v.name for v in chosen} | {UNTOUCHED, SOLUTION}) != len(chosen) + 2:
            raise ValueError(f"duplicate variant names in {chapter}")
        for i, group in enumerate(packed(chosen)):
            name = group[0].name if len(group) == 1 else f"together{i}"
            answers = {gid: code for v in group for gid, code in v.replace.items()}
            subs[chapter][name] = make_submission(release_nb, source_nb, answers)
            members[chapter][name] = group
        for name, nb in subs[chapter].items():
            dest = workdir / "submitted" / name / chapter / f"{chapter}.ipynb"
            dest.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, dest)
    # the instructors' own command (make grade): sandboxed when the machine allows it,
    # warm kernels, seal check, feedback
    from coursekit.grade import pipeline
    from coursekit.grade.sandbox import sandbox_available
    only = next(iter(variants)) if len(variants) == 1 else None
    pipeline.grade(workdir, chapter=only, sandbox=sandbox_available()[0], quiet=True, report=False)

    with open(workdir / "grades_by_exercise.csv", newline="", encoding="utf-8") as f:
        exported = {row["student"]: row for row in csv.DictReader(f)}
    out: dict[str, dict[str, Result]] = {}
    with Gradebook(f"sqlite:///{workdir / 'gradebook.db'}") as gb:
        for chapter, names in subs.items():
            results = out[chapter] = {}
            for name in names:
                group = members[chapter][name]
                res = Result(exported=exported.get(name, {}), others_lose=frozenset(g for v in group for g in v.lose))
                sub = gb.find_submission_notebook(chapter, chapter, name)
                for grade in sub.grades:
                    score = grade.score if grade.score is not None else 0.0
                    res.scores[grade.name] = (score, grade.max_score)
                graded = nbformat.read(workdir / "autograded" / name / chapter / f"{chapter}.ipynb", as_version=4)
                for cell in graded.cells:
                    gid = cell.metadata.get("nbgrader", {}).get("grade_id")
                    if gid:
                        res.feedback[gid] = output_text(cell)
                html = workdir / "feedback" / name / chapter / f"{chapter}.html"
                res.feedback_html = html.read_text(encoding="utf-8") if html.exists() else ""
                for v in group:
                    results[v.name] = copied(res, others_lose=res.others_lose - set(v.lose))
                if not group:
                    results[name] = res
    return out
