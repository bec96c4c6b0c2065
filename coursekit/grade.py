"""Grade a class: every submission in submitted/<student>/<chapter>/.

One command runs small steps, each testable alone:

    intake     fix what stock nbgrader trips over (renamed or broken notebooks), noting it
    autograde  nbgrader autograde, one student at a time per worker, workers over the cores;
               each kernel is forked in the sandbox from a warm process that imported torch
               once (coursekit.zygote), with the guard booted and no network
    seals      a test cell keeps its points only if each hidden check left a valid seal
    feedback   nbgrader generate_feedback (hidden tests, their tracebacks and the seals removed)
    export     grades.csv (nbgrader export)
    report     reports/class_report.html and a summary table

Reruns are safe: a student graded twice keeps one result, and manual grades
entered in the formgrader stay.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .build import ROOT
from .nbgrader_run import env_with_bin

STATE = ".grading"
CHECK_RE = re.compile(r"\b(check_\w+)\(")
COURSE_ID = "transformer"  # nbgrader_config.py's course id: the gradebook row it already has
MAX_OUTPUT_CHARS = 200_000
# What a gradebook says when another grader got there first: SQLite's lock, and the
# unique-key or serialisation errors of a database server (PostgreSQL) when two graders
# add the same student or course at once. The notebook is graded again, alone.
BUSY_SIGNS = ("database is locked", "UniqueViolation", "duplicate key value", "IntegrityError",
              "could not serialize access", "deadlock detected")


@dataclass
class Job:
    chapter: str
    student: str
    flags: list[str] = field(default_factory=list)
    seconds: float = 0.0
    ok: bool = True


# ------------------------------------------------------------------ discovery

def discover(root: Path, chapter: str | None = None, student: str | None = None) -> list[Job]:
    jobs = []
    sub = root / "submitted"
    if not sub.exists():
        return jobs
    for sdir in sorted(p for p in sub.iterdir() if p.is_dir()):
        if student and sdir.name != student:
            continue
        for cdir in sorted(p for p in sdir.iterdir() if p.is_dir()):
            if chapter and cdir.name != chapter:
                continue
            if not (root / "source" / cdir.name / f"{cdir.name}.ipynb").exists():
                continue
            jobs.append(Job(cdir.name, sdir.name))
    return jobs


# ------------------------------------------------------------------ intake

def intake(root: Path, job: Job) -> None:
    """Make the submission gradable by nbgrader, noting each repair."""
    folder = root / "submitted" / job.student / job.chapter
    expected = folder / f"{job.chapter}.ipynb"
    if not expected.exists():
        others = sorted(folder.glob("*.ipynb"))
        if len(others) == 1:
            shutil.copy(others[0], expected)
            job.flags.append(f"renamed notebook ({others[0].name}); graded as {expected.name}")
        else:
            job.flags.append("no notebook found" if not others else f"{len(others)} notebooks, none named {expected.name}")
            _write_release_copy(root, job.chapter, expected)
            return
    try:
        nb = nbformat.read(expected, as_version=4)
    except Exception as exc:  # noqa: BLE001 (any unreadable file)
        expected.rename(expected.with_suffix(".ipynb.unreadable"))
        _write_release_copy(root, job.chapter, expected)
        job.flags.append(f"not a valid notebook ({type(exc).__name__}); scored as empty")
        return
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    dupes = sorted({i for i in ids if i and ids.count(i) > 1})
    if dupes:  # stock nbgrader would score the whole notebook zero (nbgrader #1083)
        job.flags.append(f"duplicated cells {', '.join(dupes)} (graded once)")
        nb = _deduplicate(nb)
        nbformat.write(nb, expected)
        ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    source = nbformat.read(root / "source" / job.chapter / f"{job.chapter}.ipynb", as_version=4)
    locked = {c.metadata["nbgrader"]["grade_id"] for c in source.cells
              if c.metadata.get("nbgrader", {}).get("locked")}
    missing = sorted(locked - set(ids))
    if missing:
        job.flags.append(f"deleted read-only cells {', '.join(missing)} (restored)")
        _restore_cells(nb, source, missing)
        nbformat.write(nb, expected)


def _deduplicate(nb):
    """Keep the first cell of each grade id: a later copy of a read-only cell
    is dropped, a later copy of an answer cell stays as plain code. Cell ids
    are made unique too."""
    seen, cells = set(), []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        gid = meta.get("grade_id")
        if gid and gid in seen:
            if meta.get("locked") or meta.get("grade") and not meta.get("solution"):
                continue
            cell.metadata.pop("nbgrader", None)
        if gid:
            seen.add(gid)
        cells.append(cell)
    used = set()
    for i, cell in enumerate(cells):
        if getattr(cell, "id", None) in used or not getattr(cell, "id", None):
            cell.id = f"dedup-{i}"
        used.add(cell.id)
    nb.cells = cells
    return nb


def _write_release_copy(root: Path, chapter: str, dest: Path) -> None:
    rel = root / "release" / chapter / f"{chapter}.ipynb"
    if rel.exists():
        shutil.copy(rel, dest)


def _restore_cells(nb, source, missing: list[str]) -> None:
    """Put deleted read-only cells back, after the cell that preceded them in the source."""
    order = [c.metadata.get("nbgrader", {}).get("grade_id") for c in source.cells]
    for gid in missing:
        idx = order.index(gid)
        cell = nbformat.from_dict(source.cells[idx])
        prev = next((order[j] for j in range(idx - 1, -1, -1) if order[j]), None)
        pos = len(nb.cells)
        for i, c in enumerate(nb.cells):
            if prev and c.metadata.get("nbgrader", {}).get("grade_id") == prev:
                pos = i + 1
        nb.cells.insert(pos, cell)


# ------------------------------------------------------------------ autograde

def kernel_spec(state: Path) -> Path:
    kdir = state / "kernels" / "kernels" / "python3"
    kdir.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [sys.executable, "-m", "coursekit.sandbox", "{connection_file}"],
            "display_name": "Python 3 (graded)", "language": "python", "interrupt_mode": "message"}
    text = json.dumps(spec, indent=1)
    path = kdir / "kernel.json"
    # every notebook's start reads this file: replace it whole, never truncate it under a reader
    if not path.exists() or path.read_text() != text:
        _write_atomically(path, lambda tmp: tmp.write_text(text))
    return state / "kernels"


def _uid(job: Job) -> int:
    """An unprivileged uid of this notebook's own (not in /etc/passwd)."""
    import zlib
    return 200_000 + zlib.crc32(f"{job.chapter}/{job.student}".encode()) % 100_000


# nbgrader itself takes ~2 s to import; a fork server imports it once and forks a
# fresh process for each nbgrader command (a private state for each notebook,
# and a process group that can be killed as a whole).
_NB_PRELOAD = ["nbgrader.apps.nbgraderapp", "nbgrader.apps.autogradeapp", "nbgrader.apps.generatefeedbackapp",
               "nbgrader.apps.generateassignmentapp", "nbgrader.apps.exportapp", "nbgrader.converters",
               "nbgrader.api", "nbgrader.preprocessors", "nbconvert", "nbclient", "jupyter_client",
               "coursekit.feedback"]
_CTX = None


def _context():
    global _CTX
    if _CTX is None:
        import multiprocessing as mp
        _CTX = mp.get_context("forkserver")
        _CTX.set_forkserver_preload(_NB_PRELOAD)
    return _CTX


def _nbgrader_main(args: list[str], root: str, env: dict, log_path: str) -> None:
    """A forked nbgrader command: its own session, output to ``log_path``."""
    os.setsid()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.chdir(root)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["nbgrader", *args]
    code = 0
    try:
        from nbgrader.apps.nbgraderapp import NbGraderApp
        NbGraderApp.launch_instance(argv=args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _without_db(env: dict) -> dict:
    """An environment for code that runs student code: no gradebook address (it may hold a password)."""
    return {k: v for k, v in env.items() if k != "COURSE_DB_URL"}


def run_nbgrader(args: list[str], root: Path, env: dict, log: Path, timeout: float | None = None) -> int | None:
    """Run one nbgrader command in a process forked from the warm fork server;
    returns its exit code, or None when it ran past ``timeout`` (then its whole
    process group, kernel launcher included, is killed)."""
    import signal
    proc = _context().Process(target=_nbgrader_main, args=(args, str(root), env, str(log)), daemon=False)
    proc.start()
    proc.join(timeout)
    if proc.is_alive():
        for kill in (lambda: os.killpg(proc.pid, signal.SIGKILL), lambda: os.kill(proc.pid, signal.SIGKILL)):
            try:
                kill()
            except OSError:
                pass
        proc.join()
        return None
    return proc.exitcode


def autograde_one(root: Path, state: Path, job: Job, sandbox: bool, timeout: int, cell_timeout: int,
                  extra_env: dict | None = None) -> Job:
    keys = state / "keys"
    key = secrets.token_bytes(32)
    key_file = keys / f"{job.chapter}__{job.student}.key"
    key_file.write_bytes(key)
    os.chmod(key_file, 0o600)
    warm = bool((extra_env or {}).get("COURSE_ZYGOTE"))
    if warm:  # the kernel's sockets are files here (IPC), in the folder the zygote sees; it has no network
        # a short path: a Unix socket's path may not exceed 107 bytes
        runtime = Path(extra_env["COURSE_ZYGOTE"]).parent.parent / "spool" / f"rt{_uid(job)}"
        runtime.mkdir(parents=True, exist_ok=True)
        os.chmod(runtime, 0o700)
        if os.geteuid() == 0:
            os.chown(runtime, _uid(job), _uid(job))
    else:
        runtime = state / "runtime" / f"{job.chapter}__{job.student}"
        runtime.mkdir(parents=True, exist_ok=True)
    env = env_with_bin({
        "COURSE_ROOT": str(root), "COURSE_SANDBOX": "1" if sandbox else "0", "COURSE_SEAL_FILE": str(key_file),
        "JUPYTER_PATH": str(kernel_spec(state)), "JUPYTER_RUNTIME_DIR": str(runtime),
        "COURSE_CELL_TIMEOUT": str(cell_timeout), "PYTHONDONTWRITEBYTECODE": "1",
        "COURSE_SANDBOX_UID": str(_uid(job)), **(extra_env or {}),
    })
    log = state / "logs" / f"{job.chapter}__{job.student}.log"
    start = time.monotonic()
    args = ["autograde", job.chapter, f"--student={job.student}", "--force", "--log-level=WARN"]
    if warm:
        args += ["--KernelManager.transport=ipc", f"--KernelManager.ip={runtime / 'kernel'}"]
    rc = run_nbgrader(args, root, env, log, timeout)
    if rc is None:
        job.flags.append(f"notebook time limit ({timeout} s) reached")
    job.seconds = time.monotonic() - start
    text = log.read_text(errors="replace")
    if rc not in (0, None):
        job.ok = False
        if any(sign in text for sign in BUSY_SIGNS):
            job.flags.append("retry: gradebook busy")
        else:
            job.flags.append("autograde failed (see .grading/logs)")
    shutil.rmtree(runtime, ignore_errors=True)
    return job


def fallback(root: Path, state: Path, job: Job, sandbox: bool, timeout: int, cell_timeout: int,
             extra_env: dict | None = None) -> None:
    log = state / "logs" / f"{job.chapter}__{job.student}.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    if log.exists():  # the failed attempt's log stays for the instructor
        shutil.copy(log, log.with_suffix(".failed.log"))
    reason = ("kernel died" if ("Kernel died" in text or "DeadKernel" in text) else
              "notebook time limit reached" if any("time limit" in f for f in job.flags) else "autograde failed")
    job.flags = [f for f in job.flags if not f.startswith("autograde failed")]
    nb = root / "submitted" / job.student / job.chapter / f"{job.chapter}.ipynb"
    if nb.exists():
        nb.replace(nb.with_suffix(".ipynb.failed"))
    _write_release_copy(root, job.chapter, nb)
    job.flags.append(f"{reason}; scored as empty (original kept as {nb.name}.failed)")
    job.ok = True
    autograde_one(root, state, job, sandbox, timeout, cell_timeout, extra_env)


class Zygote:
    """The warm kernel factory of one grading run (coursekit.zygote), in the
    sandbox when grading is sandboxed. ``socket`` is None when it could not
    start; kernels then start one by one, as without it."""

    def __init__(self, root: Path, state: Path, sandbox: bool):
        from .sandbox import zygote_command
        self.socket = None
        self.proc = None
        # the run's socket and kernel folders: a short path of this run's own (a Unix
        # socket's path may not exceed 107 bytes; another grader may share the course folder)
        self.base = Path(tempfile.mkdtemp(prefix="course-grade-", dir="/tmp" if os.path.isdir("/tmp") else None))
        os.chmod(self.base, 0o711)
        zdir, spool = self.base / "zygote", self.base / "spool"
        for d, mode in ((zdir, 0o700), (spool, 0o711)):
            d.mkdir()
            os.chmod(d, mode)
        sock = zdir / "sock"
        # this run's own log (another grader's would truncate a shared one under wait()),
        # copied to logs/zygote.log when the factory closes
        self.log = state / "logs" / f"zygote-{os.getpid()}.log"
        self.latest = state / "logs" / "zygote.log"
        out = open(self.log, "w")
        self.proc = subprocess.Popen(zygote_command(str(root), str(self.base), sandbox), cwd=zdir,
                                     env=_without_db(env_with_bin({"COURSE_ROOT": str(root),
                                                                   "PYTHONDONTWRITEBYTECODE": "1"})),
                                     stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        self.sock = sock

    def wait(self, say=print, limit: float = 120) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and self.proc.poll() is None:
            if self.sock.exists() and "zygote: ready" in self.log.read_text(errors="replace"):
                self.socket = str(self.sock)
                return
            time.sleep(0.05)
        say(f"grade: note: the warm kernel factory did not start (see {self.log}); kernels start one by one")
        self.close()

    def close(self) -> None:
        import signal
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                self.proc.wait()
        if self.log.exists():
            self.log.replace(self.latest)
        self.proc = None
        shutil.rmtree(self.base, ignore_errors=True)


# ------------------------------------------------------------------ after autograde

def expected_checks(source_nb) -> dict[str, list[str]]:
    """grade id -> names of the hidden checks its test cell calls."""
    out = {}
    for cell in source_nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and "### BEGIN HIDDEN TESTS" in cell.source:
            hidden = cell.source.split("### BEGIN HIDDEN TESTS", 1)[1].split("### END HIDDEN TESTS", 1)[0]
            names = CHECK_RE.findall(hidden)
            if names:
                out[meta["grade_id"]] = names
    return out


def _outputs_text(cell) -> str:
    parts = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            parts.append(o.get("text", ""))
        elif o.get("output_type") == "error":
            parts.append(f"{o.get('ename')}: {o.get('evalue')}\n" + "\n".join(o.get("traceback", [])))
        else:
            parts.append(str(o.get("data", {}).get("text/plain", "")))
    return "".join(parts)


def check_seals(root: Path, state: Path, job: Job, gb) -> None:
    """Zero any auto-graded cell whose checks left no valid seal; note why."""
    from grading.guard import expected_seal

    path = root / "autograded" / job.student / job.chapter / f"{job.chapter}.ipynb"
    key_file = state / "keys" / f"{job.chapter}__{job.student}.key"
    if not path.exists():
        job.flags.append("not graded")
        return
    key = key_file.read_bytes() if key_file.exists() else None
    nb = nbformat.read(path, as_version=4)
    source = nbformat.read(root / "source" / job.chapter / f"{job.chapter}.ipynb", as_version=4)
    checks = expected_checks(source)
    texts = {c.metadata.get("nbgrader", {}).get("grade_id"): _outputs_text(c) for c in nb.cells}
    all_text = "\n".join(texts.values())
    for marker, reason in (("Timeout", "cell time limit reached"), ("MemoryError", "memory limit reached"),
                           ("DeadKernelError", "kernel died"), ("Kernel died", "kernel died"),
                           ("检测到篡改", "tampering detected"), ("tampering detected", "tampering detected"),
                           ("评分模块里的函数", "called the grading module"),
                           ("function of the grading module", "called the grading module")):
        if marker in all_text and reason not in job.flags:
            job.flags.append(reason)
    sub = gb.find_submission_notebook(job.chapter, job.chapter, job.student)
    changed = False
    for grade in sub.grades:
        names = checks.get(grade.name)
        if not names or not grade.auto_score:
            continue
        text = texts.get(grade.name, "")
        if key is None or not all(expected_seal(key, n) in text for n in names):
            grade.auto_score = 0.0
            changed = True
            job.flags.append(f"{grade.name}: passed without its checks' seal (checks bypassed); score set to 0")
    if changed:
        gb.db.commit()
    # huge outputs: cut them in the autograded copy (what feedback is made from)
    cut = False
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream" and len(o.get("text", "")) > MAX_OUTPUT_CHARS:
                o["text"] = o["text"][:MAX_OUTPUT_CHARS] + "\n… [output cut by the grader]\n"
                cut = True
    if cut:
        os.chmod(path, 0o644)
        nbformat.write(nb, path)
        job.flags.append("huge output (cut)")


# ------------------------------------------------------------------ the command

def ensure_assignments(root: Path, chapters: list[str], state: Path) -> None:
    """Record each chapter's source cells in the gradebook (needed to restore
    read-only cells and to know the points), without touching release/.

    Graders running at once in the same course folder (``make grade CHAPTER=...``
    twice) take turns here: creating a new gradebook or its course row is not
    safe to do twice at the same time. Each run has its own scratch folder."""
    with _one_at_a_time(state):
        scratch = Path(tempfile.mkdtemp(prefix="release-scratch-", dir=state))
        try:
            for ch in chapters:
                log = state / "logs" / f"generate_assignment__{ch}.log"
                rc = run_nbgrader(["generate_assignment", ch, "--force", "--log-level=ERROR",
                                   f"--CourseDirectory.release_directory={scratch}"], root, env_with_bin(), log)
                if rc != 0:
                    raise SystemExit(f"grade: nbgrader generate_assignment {ch} failed:\n"
                                     f"{log.read_text(errors='replace')}")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def _one_at_a_time(state: Path):
    """Hold the course folder's grading lock (graders in the same folder take turns)."""
    import fcntl

    with open(state / "gradebook.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _write_atomically(path: Path, write) -> None:
    """Write ``path`` through a temporary file in its folder, then rename it into
    place, so that a concurrent grader never leaves a half-written or mixed file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def grade(root: Path = ROOT, chapter: str | None = None, student: str | None = None, jobs: int | None = None,
          sandbox: bool = True, timeout: int = 600, cell_timeout: int = 120, report: bool = True,
          quiet: bool = False, warm: bool = True) -> list[Job]:
    from .sandbox import sandbox_available

    root = Path(root).resolve()
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    if sandbox:
        ok, why = sandbox_available()
        if not ok:
            raise SystemExit(f"grade: refusing to grade without a sandbox: {why}.\n"
                             "Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) or, if you accept "
                             "that submissions run with your rights, pass --unsandboxed.")
    else:
        say("grade: WARNING: grading unsandboxed — submissions run with your rights and can read source/.")
    todo = discover(root, chapter, student)
    if not todo:
        say("grade: nothing to grade under submitted/")
        return []
    state = root / STATE
    for sub in ("keys", "logs", "runtime"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(state / "keys", 0o700)
    t0 = time.monotonic()
    clock = Clock()
    chapters = sorted({j.chapter for j in todo})
    zygote = Zygote(root, state, sandbox) if warm else None   # imports torch while the gradebook is set up
    with clock("setup (gradebook, intake)"):
        ensure_assignments(root, chapters, state)
        for job in todo:
            intake(root, job)
    workers = jobs or max(1, os.cpu_count() or 1)
    if zygote:
        with clock("kernel factory start (waiting)"):
            zygote.wait(say)
    extra = {"COURSE_KERNEL_THREADS": str(max(1, (os.cpu_count() or 1) // workers))}
    if zygote and zygote.socket:
        extra["COURSE_ZYGOTE"] = zygote.socket
    say(f"grade: {len(todo)} notebooks ({len(chapters)} chapters), {workers} workers, "
        f"sandbox {'on' if sandbox else 'OFF'}, kernels {'warm (forked)' if 'COURSE_ZYGOTE' in extra else 'cold'}")
    try:
        with clock("autograde"):
            _autograde_all(root, state, todo, workers, sandbox, timeout, cell_timeout, extra, say, t0)
    finally:
        if zygote:
            zygote.close()
    _after_autograde(root, state, todo, chapters, report, say, clock)
    clock.times["total"] = time.monotonic() - t0
    _write_atomically(state / "timings.json",
                      lambda tmp: tmp.write_text(json.dumps({k: round(v, 2) for k, v in clock.times.items()}, indent=1)))
    say("grade: where the time went: " + ", ".join(f"{k} {v:.1f} s" for k, v in clock.times.items()))
    return todo


class Clock:
    """Wall time per phase of a grading run (printed, and kept in .grading/timings.json)."""

    def __init__(self):
        self.times: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        t = time.monotonic()
        try:
            yield
        finally:
            self.times[name] = self.times.get(name, 0.0) + time.monotonic() - t


def _autograde_all(root, state, todo, workers, sandbox, timeout, cell_timeout, extra, say, t0) -> None:
    done = 0
    retry: list[Job] = []
    with cf.ThreadPoolExecutor(workers) as pool:
        futures = {pool.submit(autograde_one, root, state, j, sandbox, timeout, cell_timeout, extra): j
                   for j in todo}
        for fut in cf.as_completed(futures):
            job = fut.result()
            done += 1
            if not job.ok and "retry: gradebook busy" in job.flags:
                retry.append(job)
            elapsed = time.monotonic() - t0
            eta = elapsed / done * (len(todo) - done)
            say(f"  [{done}/{len(todo)}] {job.student}/{job.chapter}  {job.seconds:.1f} s"
                f"  (elapsed {elapsed:.0f} s, about {eta:.0f} s left)")
    for job in retry:  # once more, alone
        job.flags.remove("retry: gradebook busy")
        job.ok = True
        autograde_one(root, state, job, sandbox, timeout, cell_timeout, extra)
    for job in todo:  # a notebook nbgrader could not finish is scored as empty, and says why
        if not (root / "autograded" / job.student / job.chapter / f"{job.chapter}.ipynb").exists():
            fallback(root, state, job, sandbox, timeout, cell_timeout, extra)


def _after_autograde(root, state, todo, chapters, report, say, clock) -> None:
    from nbgrader.api import Gradebook

    from . import report as report_mod

    with clock("seal check"), Gradebook(_db_url(root), COURSE_ID) as gb:
        for job in todo:
            try:
                check_seals(root, state, job, gb)
            except Exception as exc:  # noqa: BLE001  (fail closed: no verified seal, no points)
                gb.db.rollback()
                _zero_auto_scores(gb, job)
                job.flags.append(f"seals could not be checked ({type(exc).__name__}: {exc}); auto scores set to 0")
    with clock("feedback"):
        for ch in chapters:
            run_nbgrader(["generate_feedback", ch, "--force", "--log-level=ERROR"], root, env_with_bin(),
                         state / "logs" / f"generate_feedback__{ch}.log")
    for job in todo:  # only this run's keys: another grader may be running on other chapters
        (state / "keys" / f"{job.chapter}__{job.student}.key").unlink(missing_ok=True)
    # The class-wide outputs, one grader at a time: whichever grader writes them last
    # has seen every result committed before, so they end up complete.
    log = state / "logs" / "export.log"

    def export(tmp: Path) -> None:
        if run_nbgrader(["export", "--to", str(tmp), "--log-level=ERROR"], root, env_with_bin(), log):
            raise SystemExit(f"grade: nbgrader export failed:\n{log.read_text(errors='replace')}")

    with _one_at_a_time(state):
        save_flags(state, todo)
        with clock("export"):
            _write_atomically(root / "grades.csv", export)
        with clock("report"):
            if report:
                path = report_mod.write_report(root, class_jobs(root, state))
                say(f"grade: class report {path.relative_to(root)}")
    with clock("report"):
        say(report_mod.summary_table(root, todo))
    say(f"grade: done in {sum(clock.times.values()):.0f} s; grades.csv, feedback/, autograded/ updated")


def save_flags(state: Path, jobs: list[Job]) -> None:
    """Keep each notebook's flags, so a report written by a later run (another
    chapter, another student) still shows why this one was flagged."""
    folder = state / "flags"
    folder.mkdir(exist_ok=True)
    for job in jobs:
        _write_atomically(folder / f"{job.chapter}__{job.student}.json",
                          lambda tmp, job=job: tmp.write_text(json.dumps(job.flags, ensure_ascii=False)))


def class_jobs(root: Path, state: Path) -> list[Job]:
    """Every submission of the class with the flags of its latest grading: the
    class report covers the whole class, whichever part this run graded."""
    jobs = discover(root)
    for job in jobs:
        saved = state / "flags" / f"{job.chapter}__{job.student}.json"
        if saved.exists():
            try:
                job.flags = json.loads(saved.read_text())
            except ValueError:
                pass
    return jobs


def _zero_auto_scores(gb, job: Job) -> None:
    try:
        sub = gb.find_submission_notebook(job.chapter, job.chapter, job.student)
    except Exception:  # noqa: BLE001 (never graded: nothing to take away)
        return
    for grade in sub.grades:
        if grade.auto_score:
            grade.auto_score = 0.0
    gb.db.commit()


def _db_url(root: Path) -> str:
    return os.environ.get("COURSE_DB_URL") or f"sqlite:///{root / 'gradebook.db'}"
