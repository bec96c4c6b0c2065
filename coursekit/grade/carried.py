"""Grading jobs that carry their inputs and return their outputs (no shared filesystem).

A worker of a grading engine (coursekit.grade.engine) that shares nothing with
the grader gets each notebook as a job that holds it: the bytes of the scratch
copy the pipeline made (the notebook and its folder, ``timestamp.txt``
included), and what the run's rules need (chapter, student, flags, time
limits, sandbox, warm kernels) with the digests of the grader's grading code,
environment and chapter. The worker:

* grades in a private folder of its own (``home``): an nbgrader course folder
  built from *its own* installed course (found from its own ``coursekit``
  import, at any path: the image of deploy/, a pinned install), with its own
  gradebook in which each chapter's assignment is generated once (``prepare``);
* refuses a job whose digests are not its own (the job is a fault of the
  machine, never a score), runs the same autograde (sandbox, warm forked
  kernel) there, and checks the seals there: the per-job seal key never leaves
  the worker;
* returns the graded notebook's folder, the scores and comments nbgrader
  wrote for that submission, the seal result, the flags, the log, the seconds
  and the failure's kind.

The grader alone writes ``autograded/``, the gradebook (``accept``: the
returned rows through nbgrader's Gradebook API, as nbgrader's own autograde
would have written them: the student, the submission with its timestamp, each
grade's ``auto_score`` and ``needs_manual_grade``, each comment's
``auto_comment``, the late penalty) and the ledger; the steps after autograde
(figures, feedback, export, report, manual grading) see what a local autograde
writes.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from grading import protocol

from ..base.chapters import ROOT
from .jobs import MACHINERY, code_digest, environment_digest

SHARED_FS_ENV = "COURSE_SHARED_FS"   # "1": the workers see the course folder; "0": jobs carry their files
MAX_BYTES = 256 * 2**20              # what one submission's folder may hold to be carried
LOG_CHARS = 200_000                  # the tail of a job's log that comes back


def wanted(remote: bool, processes: bool) -> bool:
    """Whether the engine's jobs carry their files: by default on a remote cluster (a
    worker shares nothing with the grader) and not on this machine; COURSE_SHARED_FS
    says otherwise (=1: a cluster on a shared filesystem; =0: local worker processes
    graded as remote ones would be). A cluster inside the grading process shares it."""
    value = os.environ.get(SHARED_FS_ENV, "").strip().lower()
    if not (remote or processes):
        return False
    if value in ("1", "yes", "true"):
        return False
    if value in ("0", "no", "false"):
        return True
    return remote


# ------------------------------------------------------------------ in the grader

def chapter_digest(root: Path, chapter: str) -> str:
    """A chapter's source and release (its points, test cells and stubs) and its replay record
    (the outputs its replayed lecture cells show), by names and bytes."""
    from .reuse import digest_paths
    return digest_paths([Path(root) / "source" / chapter, Path(root) / "release" / chapter,
                         Path(root) / "replay" / f"{chapter}.json"])


def pack(run, job) -> dict[str, bytes]:
    """The scratch copy of ``job``'s submission folder: relative path -> bytes (links left out)."""
    folder = run.scratch / job.student / job.chapter
    files, size = {}, 0
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        size += len(data)
        if size > MAX_BYTES:
            raise ValueError(f"the submission folder of {job.student}/{job.chapter} holds more than "
                             f"{MAX_BYTES // 2**20} MiB")
        files[path.relative_to(folder).as_posix()] = data
    return files


def accept(run, job, outputs: dict, gb, tries: int = 3) -> None:
    """What a worker returned for ``job``, written by the grader: its log, and when it
    graded the notebook, the graded folder under ``autograded/`` and the rows of the
    gradebook (``job.sealed``: the worker checked the seals). A gradebook that stays busy
    leaves nothing written and the job ``gradebook_busy`` (graded again here, alone)."""
    for suffix, text in (outputs.get("logs") or {}).items():
        if suffix in (".log", ".failed.log"):
            run.log(job, suffix).write_text(text)
    files = outputs.get("files")
    if not files:
        return
    dest = run.graded_path(job).parent
    dest.parent.mkdir(parents=True, exist_ok=True)
    incoming = Path(tempfile.mkdtemp(prefix=f".{dest.name}.incoming-", dir=dest.parent))
    for rel, data in files.items():
        path = incoming / _safe(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    os.chmod(incoming, 0o755)
    for attempt in range(tries):
        try:
            import_rows(gb, job, outputs["rows"])
            break
        except Exception:  # noqa: BLE001 (a gradebook another process holds)
            gb.db.rollback()
            if attempt == tries - 1:
                shutil.rmtree(incoming, ignore_errors=True)
                job.ok, job.failure = False, "gradebook_busy"
                return
            time.sleep(1 + attempt)
    if dest.exists():
        shutil.rmtree(dest)
    os.rename(incoming, dest)
    job.sealed = bool(outputs.get("sealed"))


def import_rows(gb, job, rows: dict) -> None:
    """The rows nbgrader's autograde wrote for one submission on the worker, into the
    grader's gradebook, as its own autograde writes them (nbgrader.converters.autograde,
    preprocessors SaveAutoGrades and AssignLatePenalties): a manual score entered here
    stays, and marks its cell for review."""
    import warnings
    gb.update_or_create_student(job.student)
    with warnings.catch_warnings():   # SQLAlchemy's autoflush notes while nbgrader builds a new submission
        warnings.simplefilter("ignore")
        if rows.get("timestamp"):
            sub = gb.update_or_create_submission(job.chapter, job.student, timestamp=rows["timestamp"])
        else:
            sub = gb.update_or_create_submission(job.chapter, job.student)
    nb = gb.find_submission_notebook(job.chapter, job.chapter, job.student)
    grades = {g.name: g for g in nb.grades}
    comments = {c.name: c for c in nb.comments}
    for row in rows["grades"]:
        grade = grades.get(row["name"])
        if grade is None:
            raise KeyError(f"the worker graded a cell {row['name']!r} this gradebook does not have")
        grade.auto_score = row["auto_score"]
        grade.needs_manual_grade = bool(row["needs_manual_grade"]) or grade.manual_score is not None
    for row in rows["comments"]:
        if row["name"] in comments:
            comments[row["name"]].auto_comment = row["auto_comment"]
    nb.late_submission_penalty = None
    if sub.total_seconds_late > 0:
        from nbgrader.plugins import LateSubmissionPlugin
        penalty = LateSubmissionPlugin().late_submission_penalty(job.student, nb.score, sub.total_seconds_late)
        if penalty is not None:
            nb.late_submission_penalty = min(max(penalty, 0), nb.score)
    gb.db.commit()


def record_line(run, job, worker) -> None:
    """A line of .grading/engine/autograded.jsonl: which worker graded it, written by the grader."""
    folder = run.state / "engine"
    folder.mkdir(exist_ok=True)
    line = json.dumps({"chapter": job.chapter, "student": job.student, "worker": worker, "pid": os.getpid(),
                       "at": time.time(), "carried": True})
    fd = os.open(folder / "autograded.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _safe(rel: str) -> Path:
    path = Path(rel)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ValueError(f"a carried file's name holds a path: {rel!r}")
    return path


# ------------------------------------------------------------------ on a worker

_LOCK = threading.Lock()
_HOME: dict[str, Path] = {}
_READY: set[str] = set()


def home(chapters: list[str]) -> Path:
    """This worker's private course folder (one per process, made once): the nbgrader
    config, and the source, release and replay record of ``chapters`` from the worker's own installed
    course; its gradebook is its own (never COURSE_DB_URL: the grader's)."""
    with _LOCK:
        h = _HOME.get("path")
        if h is None:
            os.environ.pop(protocol.DB_URL_ENV, None)
            h = Path(tempfile.mkdtemp(prefix="course-worker-")).resolve()
            shutil.copy(ROOT / "nbgrader_config.py", h / "nbgrader_config.py")
            for sub in ("source", "release", "replay"):
                (h / sub).mkdir()
            atexit.register(shutil.rmtree, h, True)
            _HOME["path"] = h
        for ch in chapters:
            if (ROOT / "source" / ch).is_dir() and not (h / "release" / ch).exists():
                shutil.copytree(ROOT / "source" / ch, h / "source" / ch)
                shutil.copytree(ROOT / "release" / ch, h / "release" / ch)
                record = ROOT / "replay" / f"{ch}.json"
                if record.exists():   # the replayed cells' outputs (coursekit.grade.replay)
                    shutil.copy(record, h / "replay" / record.name)
        return h


def prepare(h: Path, chapters: list[str]) -> None:
    """Each chapter's assignment in this worker's own gradebook, generated once per worker."""
    from ..author.release import generate_assignments
    with _LOCK:
        todo = [ch for ch in chapters if ch not in _READY]
        if not todo:
            return
        missing = [ch for ch in todo if not (h / "source" / ch).is_dir()]
        if missing:
            raise RuntimeError(f"this worker's course has no chapter {', '.join(missing)}")
        for sub in ("logs", "scratch"):
            (h / ".grading" / sub).mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="release-", dir=h / ".grading"))
        log = h / ".grading" / "logs" / "generate_assignment.log"
        try:
            failed = generate_assignments(todo, h, scratch, log, gradebook=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if failed:
            raise RuntimeError(f"nbgrader generate_assignment failed on this worker for {', '.join(failed)}: "
                               + log.read_text(errors="replace")[-1500:])
        _READY.update(todo)


def mismatch(spec: dict) -> list[tuple[str, str]]:
    """How this worker's course differs from the grader's (its grading code, environment,
    and the chapters' source, release and replay record): [(kind, detail)], empty when it is the same."""
    problems = []
    if spec.get("code") and _cached("code", code_digest) != spec["code"]:
        problems.append(("code", f"its grading code ({ROOT}) is not the grader's"))
    if spec.get("env") and _cached("env", environment_digest) != spec["env"]:
        problems.append(("environment", "its Python or installed packages are not the grader's"))
    for ch, digest in sorted((spec.get("chapter_digests") or {}).items()):
        if _cached(f"chapter:{ch}", lambda ch=ch: chapter_digest(ROOT, ch)) != digest:
            problems.append(("code", f"its chapter {ch} (source/, release/, replay/ in {ROOT}) is not the grader's"))
    return problems


_DIGESTS: dict[str, str] = {}


def _cached(name: str, make) -> str:
    """A digest of this worker's own installed course, made once per process (it does not change under it)."""
    if name not in _DIGESTS:
        _DIGESTS[name] = make()
    return _DIGESTS[name]


def run_job(spec: dict, job, grader, where: str, factory) -> dict:
    """The job on this worker: its files written into a scratch folder of the worker's own
    course folder, the same autograde (``grader.grade``) and seal check (``grader.seal``)
    as on the grader's machine, and what came of it (see the module's doc). A worker
    whose course is not the grader's grades nothing (a fault of the machine).
    ``factory()``: this worker's kernel factory (its socket folder, its socket, how many
    kernels it runs at once), asked for once the course folder is ready."""
    from nbgrader.api import Gradebook

    problems = mismatch(spec)
    if problems:
        return {"ok": False, "failure": MACHINERY, "seconds": 0.0, "worker": where, "flags": [],
                "error": "; ".join(d for _, d in problems)}
    h = home(spec["chapters"])
    prepare(h, [job.chapter])
    base, socket, workers = factory()
    scratch = Path(tempfile.mkdtemp(prefix="job-", dir=h / ".grading" / "scratch"))
    try:
        folder = scratch / "submitted" / job.student / job.chapter
        folder.mkdir(parents=True)
        for rel, data in spec["files"].items():
            path = folder / _safe(rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        run = grader.grade({**spec, "root": str(h), "scratch": str(scratch / "submitted")}, job, base, socket,
                           workers)
        outputs: dict = {"logs": {}, "sealed": False}
        graded = run.graded_path(job)
        try:
            if graded.exists():
                with Gradebook(f"sqlite:///{h / 'gradebook.db'}", protocol.COURSE_ID) as gb:
                    grader.seal(run, job, gb)          # the key stays here
                    outputs["rows"] = rows(gb, job)
                stamp = spec["files"].get("timestamp.txt", b"").decode(errors="replace").strip()
                outputs["rows"]["timestamp"] = stamp or None   # as nbgrader reads it from the submission
                outputs["sealed"] = job.sealed
                outputs["files"] = {p.relative_to(graded.parent).as_posix(): p.read_bytes()
                                    for p in sorted(graded.parent.rglob("*")) if p.is_file() and not p.is_symlink()}
            for suffix in (".log", ".failed.log"):
                log = run.log(job, suffix)
                if log.exists():
                    outputs["logs"][suffix] = log.read_text(errors="replace")[-LOG_CHARS:]
        finally:
            run.key_file(job).unlink(missing_ok=True)
            shutil.rmtree(graded.parent, ignore_errors=True)
            for suffix in (".log", ".failed.log"):
                run.log(job, suffix).unlink(missing_ok=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"ok": job.ok, "failure": job.failure, "seconds": job.seconds, "worker": where,
            "flags": [f.to_json() for f in job.flags], "outputs": outputs}


def rows(gb, job) -> dict:
    """What nbgrader's autograde wrote in this worker's gradebook for ``job``'s submission
    (after the seal check: a check without its seal is 0 here already)."""
    sub = gb.find_submission(job.chapter, job.student)
    nb = gb.find_submission_notebook(job.chapter, job.chapter, job.student)
    return {"timestamp": sub.timestamp.isoformat() if sub.timestamp else None,
            "grades": [{"name": g.name, "auto_score": g.auto_score, "needs_manual_grade": g.needs_manual_grade}
                       for g in nb.grades if type(g.cell).__name__ != "TaskCell"],   # autograde leaves tasks alone
            "comments": [{"name": c.name, "auto_comment": c.auto_comment} for c in nb.comments]}
