"""`make check CHAPTER=chNN_name`: everything an instructor must pass after
editing one chapter, in one command.

The parts, each restricted to the chapter (``--parts`` picks some of them):

  build     the build and the committed source/ and release/ (tests/test_build.py,
            test_sync.py, test_release_clean.py)
  ledgers   the rule and claims ledgers (tests/test_rules.py, test_claims.py)
  unit      the chapter's own unit tests (tests/test_chNN_*.py)
  visible   the visible tests, as the course's Validate runs them, on the
            release of each language with the model answers filled in: every
            visible test cell must pass (one line per language)
  hidden    the hidden checks in-process, both languages, every catalogued
            wrong answer and correct variant (tests/test_grading_inprocess.py)
  nbgrader  a sample of the catalogue through the real grading pipeline
            (tests/test_autograde.py)
  content   what the prose says is what the chapter runs; its figures
            (tests/test_content.py, test_accessibility.py)
  browser   the chapter's browser tests (tests/test_browser.py); skipped,
            with a line that says so, where Chromium is missing
  lint      ruff over the chapter's own Python files

Each part runs in a process of its own (pytest with its output captured, or
this module for the visible tests), several side by side. The command prints
one line per part as it ends (✓/✗, its name, what ran, seconds), then the
total time, then the failing parts' own messages (the assertion's text, not
pytest's report or a library's logging), and exits non-zero when a part fails.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from .build import LANGS, ROOT, BuildError, chapters, given_manifest

# tests of tests/test_browser.py about one chapter whose names do not carry the chapter's
# (the others are selected by the chapter's name in their parameters)
BROWSER_TESTS = {"ch02_causal_mask": ("test_student_fills_runs_steps_the_calculator_and_validates",)}
# messages shown per failing part; the rest are counted (its rerun line shows them all)
SHOWN_PER_PART = 3
SHOWN_LINES = 40        # lines of one message
# the level of Dask's loggers in the parts' processes (the grading pipeline runs on Dask)
QUIET_LOGGING = {"DASK_LOGGING__DISTRIBUTED": "error"}
RUFF = [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format=concise"]
LINT_ARGS = len(RUFF)


@dataclass
class Part:
    key: str                  # what --parts names
    name: str                 # what the summary line says
    argv: list[str]           # the command, run in the course folder
    env: dict[str, str] = field(default_factory=dict)
    weight: float = 1.0       # rough seconds it takes (ch02, ch03): the longest start first
    kind: str = "pytest"      # pytest, visible or ruff: how its result is read
    result: Path | None = None   # where it writes its result: pytest's junit XML, the visible part's JSON
    alone: str = ""           # the command that runs it alone, when not its own argv

    def rerun(self) -> str:
        """The command line that runs this part alone."""
        if self.alone:
            return self.alone
        env = " ".join(f"{k}={v}" for k, v in self.env.items() if k not in QUIET_LOGGING)
        shown = [a for a in self.argv if not a.startswith(("--junitxml", "--basetemp"))]
        shown = ["python" if a == sys.executable else a for a in shown]
        return " ".join(filter(None, [env, " ".join(_quote(a) for a in shown)]))


@dataclass
class Outcome:
    part: Part
    seconds: float
    cpu: float | None = None            # seconds of CPU its processes used
    ran: int = 0                        # tests (or exercises) that ran
    failures: list[tuple[str, str]] = field(default_factory=list)   # (where, message)
    skipped: list[str] = field(default_factory=list)                 # reasons

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def all_skipped(self) -> bool:
        return self.ok and self.ran == 0 and bool(self.skipped)


def _quote(arg: str) -> str:
    return arg if re.fullmatch(r"[\w@%+=:,./-]+", arg) else "'" + arg.replace("'", "'\\''") + "'"


def short(chapter: str) -> str:
    """ch02_causal_mask -> ch02_ (what test names and parameter ids of the chapter contain)."""
    return chapter.split("_", 1)[0] + "_"


def parts(chapter: str, root: Path, scratch: Path) -> list[Part]:
    """The chapter's parts, in the order the summary reports them (their reports go to ``scratch``)."""
    root, scratch = Path(root), Path(scratch)
    only = {"COURSE_CHAPTERS": chapter}
    k = short(chapter)

    def pytest(key, name, files, select=None, env=None, weight=1.0):
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                "-o", "junit_logging=no", f"--junitxml={scratch / key}.xml", f"--basetemp={scratch / key}-tmp",
                *files, *(["-k", select] if select else [])]
        return Part(key, name, argv, dict(env or {}), weight, result=scratch / f"{key}.xml")

    unit = sorted(f"tests/{p.name}" for p in (root / "tests").glob(f"test_{k}*.py"))
    browser = " or ".join([chapter, *BROWSER_TESTS.get(chapter, ())])
    out = [
        pytest("build", "build and sync", ["tests/test_build.py", "tests/test_sync.py", "tests/test_release_clean.py"],
               f"{k} or test_build.py", only, weight=10),
        pytest("ledgers", "rule and claims ledgers", ["tests/test_rules.py", "tests/test_claims.py"],
               f"{k} or instructor_guides", weight=8),        # the guides' counted tables follow the ledger
        pytest("unit", f"unit tests ({', '.join(Path(u).name for u in unit) or 'none'})", unit, weight=4)
        if unit else None,
        *[Part("visible", f"visible tests, {lang}",
               [sys.executable, "-m", "coursekit.author.check", "visible", chapter, lang, str(scratch / f"visible-{lang}")],
               weight=18, kind="visible", result=scratch / f"visible-{lang}" / "result.json",
               alone=f"python course.py check --chapter {chapter} --parts visible") for lang in LANGS],
        pytest("hidden", "hidden checks in-process, zh and en", ["tests/test_grading_inprocess.py"], None, only,
               weight=70),
        pytest("nbgrader", "a sample through nbgrader", ["tests/test_autograde.py"], chapter, weight=40),
        pytest("content", "content and figures", ["tests/test_content.py", "tests/test_accessibility.py"], k,
               weight=45),
        pytest("browser", "browser", ["tests/test_browser.py"], browser, only, weight=60),
        Part("lint", "lint (ruff)", [*RUFF, *lint_files(chapter, root)], weight=1, kind="ruff"),
    ]
    return [p for p in out if p is not None]


def lint_files(chapter: str, root: Path = ROOT) -> list[str]:
    """The chapter's own Python files: its helpers, hidden checks, catalogue, unit tests
    and the code it hands out."""
    k = short(chapter)
    found = [root / "helpers" / f"{chapter}.py", root / "helpers" / chapter, root / "grading" / f"{chapter}.py",
             root / "tests" / "catalogue" / f"{chapter}.py", *sorted((root / "tests").glob(f"test_{k}*.py"))]
    given = given_manifest(root / "notebooks").get(chapter, [])
    found += [root / "notebooks" / "given" / n for n in given if n.endswith(".py")]
    return [str(p.relative_to(root)) for p in found if p.exists()]


# ------------------------------------------------------------------ running the parts

def environment(root: Path, part: Part, threads: int | None = None) -> dict[str, str]:
    """The part's environment: this course's code first on the path (a copy of the
    course checks its own files), the venv's programs on PATH, Dask quiet, and
    PyTorch on ``threads`` threads (the part's share of the cores, unless the shell
    says otherwise): parts run side by side, and threads spinning for a core
    another part holds cost more than they bring."""
    env = dict(os.environ)
    if threads:
        env.setdefault("OMP_NUM_THREADS", str(threads))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH", "")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("PYTHONUTF8", "1")
    env.update(QUIET_LOGGING)
    env.update(part.env)
    return env


def run_part(part: Part, root: Path, log: Path, threads: int | None = None) -> Outcome:
    start = time.monotonic()
    cpu = None
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(part.argv, cwd=root, env=environment(root, part, threads), stdout=out,
                                stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        if hasattr(os, "wait4"):      # the CPU time of the part's processes, whatever else the machine runs
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = rc = os.waitstatus_to_exitcode(status)
            cpu = usage.ru_utime + usage.ru_stime
        else:
            rc = proc.wait()
    outcome = Outcome(part, time.monotonic() - start, cpu=cpu)
    text = log.read_text(encoding="utf-8", errors="replace")
    {"ruff": read_ruff, "visible": read_json, "pytest": read_junit}[part.kind](outcome, rc, text)
    return outcome


def _tail(text: str, n: int = 15) -> str:
    lines = [line for line in text.rstrip().splitlines() if line.strip()]
    return "\n".join(lines[-n:])


def read_junit(outcome: Outcome, rc: int, log: str) -> None:
    xml = outcome.part.result
    if rc == 5:
        outcome.failures.append(("", "no test selected: the part's selection matches nothing in this course"))
        return
    if not xml.exists():
        outcome.failures.append(("", f"pytest stopped (exit status {rc}) before it wrote its report:\n{_tail(log)}"))
        return
    for case in ET.parse(xml).getroot().iter("testcase"):
        module = case.get("classname", "")
        where = f"{module.replace('.', '/')}.py::{case.get('name')}" if module else case.get("name", "")
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        skip = case.find("skipped")
        if bad is not None:
            outcome.failures.append((where, failure_message(bad.get("message", ""), bad.text or "")))
        elif skip is not None:
            outcome.skipped.append(skip.get("message", ""))
        else:
            outcome.ran += 1
    if rc != 0 and not outcome.failures:
        outcome.failures.append(("", f"pytest ended with exit status {rc}:\n{_tail(log)}"))


# what pytest's assertion rewriting appends to a message: "assert x == y", "+  where ...", "-  ..."
_EXPLANATION = re.compile(r"^(assert |\s*[+-] |\s*where |\s*and |\s*Full diff|\s*At index |\s*Omitting |"
                          r"\s*Use -v|\s*\.\.\.Full output)")


def failure_message(message: str, text: str) -> str:
    """The failure's own words: the exception's message as pytest's report shows it
    (the ``E`` lines of its last exception), without pytest's explanation of the
    assert statement when the assert gave a message of its own."""
    last = re.split(r"\n(?:The above exception was the direct cause of the following exception:|"
                    r"During handling of the above exception, another exception occurred:)\n", text)[-1]
    errors = [line[1:] for line in last.splitlines() if line.startswith("E") and line[1:2] in (" ", "")]
    indent = min((len(e) - len(e.lstrip()) for e in errors if e.strip()), default=0)
    lines = [e[indent:] for e in errors] or (message or _tail(text)).splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if lines and lines[0].startswith("AssertionError: "):
        lines[0] = lines[0][len("AssertionError: "):]
        cut = next((i for i, line in enumerate(lines) if i > 0 and _EXPLANATION.match(line)), len(lines))
        if lines[0].strip():
            lines = lines[:cut]
            # the rewritten assert indents the lines of its message after the first by two spaces
            if all(line.startswith("  ") for line in lines[1:] if line.strip()):
                lines = lines[:1] + [line[2:] for line in lines[1:]]
    if len(lines) > SHOWN_LINES:
        lines = lines[:SHOWN_LINES] + [f"… ({len(lines) - SHOWN_LINES} more lines)"]
    return "\n".join(lines)


def read_ruff(outcome: Outcome, rc: int, log: str) -> None:
    if rc == 0:
        outcome.ran = 1
        return
    found = [line for line in log.splitlines() if re.match(r"^\S+:\d+:\d+: ", line)]
    outcome.failures.append(("ruff", "\n".join(found) or _tail(log)))


def read_json(outcome: Outcome, rc: int, log: str) -> None:
    path = outcome.part.result
    if not path.exists():
        outcome.failures.append(("", f"the part stopped (exit status {rc}) before it said anything:\n{_tail(log)}"))
        return
    said = json.loads(path.read_text(encoding="utf-8"))
    outcome.ran = said["ran"]
    outcome.failures += [(f["where"], f["message"]) for f in said["failures"]]


# ------------------------------------------------------------------ the visible tests

def fill_answers(release_nb, source_nb):
    """The release notebook with every answer cell holding the model answer of the source."""
    import nbformat
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source_nb.cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    nb = nbformat.from_dict(release_nb)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = "\n".join(line for line in answers[gid].splitlines()
                                    if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))
    return nb


def student_config():
    """nbgrader's configuration as a student's Validate reads it (coursekit.student.workspace)."""
    from traitlets.config import Config

    from ..student.workspace import STUDENT_NBGRADER_CONFIG
    config = Config()
    exec(STUDENT_NBGRADER_CONFIG, {"get_config": lambda: config})
    return config


def visible(chapter: str, lang: str, work: Path) -> dict:
    """Build the chapter's source and release in ``lang`` in ``work``, fill in the
    model answers and run the notebook as the course's Validate does
    (helpers.lab.validate: a fresh kernel, NBGRADER_EXECUTION=validate). Every
    visible test cell must pass."""
    import nbformat

    from helpers.lab.validate import validate

    from . import build, release
    course = work / "course"
    shutil.rmtree(course, ignore_errors=True)
    course.mkdir(parents=True)
    shutil.copy(build.ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    source = build.write_source(chapter, lang, course_root=course)
    released = release.generate_release(chapter, course_root=course)
    student = work / "student" / chapter
    shutil.rmtree(student.parent, ignore_errors=True)
    shutil.copytree(released.parent, student)
    nb = fill_answers(nbformat.read(released, as_version=4), nbformat.read(source, as_version=4))
    path = student / released.name
    nbformat.write(nb, path)
    result = validate(path, student_config())
    failures = [{"where": item.exercise, "message": item.message or item.status}
                for item in result.items if item.status in ("failed", "not_done", "changed")]
    if result.status != "passed" and not failures:
        failures = [{"where": "", "message": result.summary}]
    return {"ran": sum(1 for item in result.items if item.status != "unanswered"), "failures": failures}


def _visible_main(chapter: str, lang: str, work: str) -> int:
    work_dir = Path(work)
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        said = visible(chapter, lang, work_dir)
    except BaseException as exc:  # noqa: BLE001 - the part's failure is what the command reports
        import traceback
        traceback.print_exc()
        said = {"ran": 0, "failures": [{"where": "", "message": f"{type(exc).__name__}: {exc}".strip()}]}
    (work_dir / "result.json").write_text(json.dumps(said, ensure_ascii=False), encoding="utf-8")
    return 1 if said["failures"] else 0


# ------------------------------------------------------------------ the command

def _seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 60 else f"{int(s // 60)} min {s % 60:04.1f} s"


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except (AttributeError, OSError):
        return "?"


def summary_line(o: Outcome, width: int) -> str:
    if o.all_skipped:
        why = re.sub(r"^[\w ]*skipped: ", "", o.skipped[0])      # its own words may say "skipped" already
        return f"– {o.part.name:<{width}}  skipped: {why}"
    mark = "✓" if o.ok else "✗"
    if o.part.kind == "ruff":
        what = f"{len(o.part.argv) - LINT_ARGS} files clean" if o.ok else "problems found"
    elif o.ok:
        what = f"{o.ran} passed" + (f", {len(o.skipped)} skipped" if o.skipped else "")
    else:
        total = o.ran + len(o.failures)
        what = f"{len(o.failures)} of {total} failed" if o.ran else f"{len(o.failures)} failed"
    cpu = f"  (cpu {_seconds(o.cpu)})" if o.cpu is not None else ""
    return f"{mark} {o.part.name:<{width}}  {what:<20} {_seconds(o.seconds):>10}{cpu}"


def check(chapter: str, only: list[str] | None = None, root: Path = ROOT, jobs: int | None = None,
          out: TextIO | None = None) -> int:
    """Run the chapter's parts (``only``: their keys); print the summary; 0 when all pass."""
    out = out or sys.stdout
    root = Path(root).resolve()
    known = chapters(root / "notebooks")
    if chapter not in known:
        raise BuildError(f"no chapter {chapter!r} in {root / 'notebooks'}; the chapters: {', '.join(known)}")
    scratch = Path(tempfile.mkdtemp(prefix=f"course-check-{chapter}-"))
    try:
        todo = parts(chapter, root, scratch)
        keys = dict.fromkeys(p.key for p in todo)
        if only:
            unknown = [k for k in only if k not in keys]
            if unknown:
                raise BuildError(f"no part {', '.join(map(repr, unknown))}; the parts: {', '.join(keys)}")
            todo = [p for p in todo if p.key in only]
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        jobs = jobs or max(2, cores)
        width = max(len(p.name) for p in todo)
        lock = threading.Lock()
        load_before = _load()
        say = lambda line: (out.write(line + "\n"), out.flush())  # noqa: E731
        say(f"check {chapter}: {len(todo)} parts, up to {jobs} at a time ({cores} cores, load {load_before})")
        start = time.monotonic()
        order = sorted(range(len(todo)), key=lambda i: -todo[i].weight)
        done: dict[int, Outcome] = {}

        def one(i: int) -> None:
            o = run_part(todo[i], root, scratch / f"{todo[i].key}-{i}.log", threads=max(1, cores // jobs))
            with lock:
                done[i] = o
                say(summary_line(o, width))

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            list(pool.map(one, order))
        total = time.monotonic() - start
        outcomes = [done[i] for i in range(len(todo))]
        failed = [o for o in outcomes if not o.ok]
        skipped = [o for o in outcomes if o.all_skipped]
        cpu = sum(o.cpu for o in outcomes if o.cpu is not None)
        when = (f"in {_seconds(total)}" + (f", {_seconds(cpu)} of CPU" if cpu else "") +
                f" (load {load_before} at the start, {_load()} at the end)")
        if failed:
            say(f"✗ {chapter}: {len(failed)} of {len(outcomes)} part{'s' if len(outcomes) != 1 else ''} failed "
                f"({', '.join(o.part.name for o in failed)}) {when}")
        else:
            tail = f", {len(skipped)} skipped" if skipped else ""
            n = len(outcomes) - len(skipped)
            say(f"✓ {chapter}: {'all ' if n > 1 else ''}{n} part{'s pass' if n != 1 else ' passes'}{tail} {when}")
        for o in failed:
            say("")
            n = len(o.failures)
            shown = f" (the first {SHOWN_PER_PART} below)" if n > SHOWN_PER_PART else ""
            say(f"✗ {o.part.name}: {n} failure{'s' if n != 1 else ''}{shown}; alone: {o.part.rerun()}")
            for where, message in o.failures[:SHOWN_PER_PART]:
                say(f"── {where}" if where else "──")
                say(message)
        return 1 if failed else 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "visible":
        sys.exit(_visible_main(*sys.argv[2:]))
    sys.exit("usage: python -m coursekit.author.check visible CHAPTER LANG WORKDIR (the command: python course.py "
             "check --chapter CHAPTER)")
