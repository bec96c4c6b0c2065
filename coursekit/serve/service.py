"""The grading service: feedback seconds after Submit.

``python course.py serve`` watches nbgrader's exchange for new submissions
(``<exchange>/<course>/inbound/<student>+<chapter>+<time>+<random>/``, what the
*Assignments* tab's Submit writes) and, for each one as it lands:

1. files it into the course folder as ``nbgrader collect`` would
   (``submitted/<student>/<chapter>/``, replacing an older submission of that
   student, never a newer one; owned like the course folder);
2. grades it with the course's own pipeline (coursekit.grade.pipeline): intake on a
   copy, repair, sandbox, warm kernels, seal check, feedback page, one score;
   on the grading engine (coursekit.grade.engine: a Dask cluster, local by default);
3. releases that student's feedback to that student alone (nbgrader's
   ``release_feedback`` for that student), so it appears in their
   *Assignments* tab.

What a run pays once is paid once: the kernel factory stays warm between
submissions (coursekit.grade.pipeline.Warm), and a chapter's preflight and its record
in the gradebook run again only when something they depend on changed. The
class-wide files (grades.csv, the LMS files, the class report) are written
when no submission is waiting, at most every ``--class-files-every`` seconds.

It shares the course folder with the instructor: each submission is handled
holding the pipeline's lock (coursekit.base.runner.one_at_a_time), so ``make grade``
and the service take turns on the gradebook; manual grades from the
formgrader are never overwritten (nbgrader's autograde keeps them, and
feedback pages show them). A resubmission is graded again.

The service survives its own restart: every inbound folder it handled is
recorded (``.grading/service/handled.jsonl``, by the folder's name), so what was
submitted while it was down is graded when it comes back, once; and the
engine's ledger keeps a notebook graded just before a stop from being graded
again.
"""
from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from grading import protocol

from ..base import runner
from ..base.nbgrader_run import env_with_bin
from ..grade.intake import Job

FOLDER = "service"
RECORD = "handled.jsonl"


@dataclass(frozen=True)
class Submission:
    """One folder of the exchange's inbound/."""
    name: str
    student: str
    chapter: str
    timestamp: datetime.datetime   # UTC, naive (nbgrader's parse_utc)
    path: Path

    @property
    def epoch(self) -> float:
        return self.timestamp.replace(tzinfo=datetime.timezone.utc).timestamp()


def parse(path: Path) -> Submission | None:
    """``<student>+<chapter>+<timestamp>+<random>`` (nbgrader's own split: a student id may hold '+')."""
    from nbgrader.utils import parse_utc
    parts = path.name.rsplit("+", 3)
    if len(parts) != 4:
        return None
    try:
        stamp = parse_utc(parts[2])
    except (ValueError, OverflowError):
        return None
    return Submission(path.name, parts[0], parts[1], stamp, path)


def complete(folder: Path, quiet_s: float = 10.0) -> bool:
    """Whether nbgrader's submit has finished writing ``folder``: it copies the
    notebooks first and writes submission_secret.txt last; a folder from an
    nbgrader without that file counts once nothing in it changed for ``quiet_s``."""
    try:
        if (folder / "submission_secret.txt").stat().st_size > 0:
            return True
        latest = max([folder.stat().st_mtime, *(p.stat().st_mtime for p in folder.iterdir())])
    except (OSError, ValueError):
        return False
    return time.time() - latest > quiet_s and not (folder / "submission_secret.txt").exists()


def exchange_root(root: Path) -> Path:
    """nbgrader's ``Exchange.root`` as the course folder's nbgrader sees it (its
    nbgrader_config.py and the Jupyter configuration path)."""
    from nbgrader.apps import NbGrader
    from nbgrader.exchange.default.exchange import Exchange
    here = os.getcwd()
    os.chdir(root)
    try:
        app = NbGrader()
        app.load_config_file()
        return Path(Exchange(config=app.config).root)
    finally:
        os.chdir(here)


class Service:
    """The grading service of one course folder (see the module's doc)."""

    def __init__(self, root: Path, exchange: Path | None = None, sandbox: bool = True, poll: float = 0.5,
                 class_files_every: float = 60.0, workers: int | None = None, engine=None, say=print):
        self.root = Path(root).resolve()
        self.exchange = Path(exchange) if exchange else exchange_root(self.root)
        self.course_id = protocol.COURSE_ID
        self.inbound = self.exchange / self.course_id / "inbound"
        self.sandbox, self.poll, self.class_files_every = sandbox, poll, class_files_every
        self.workers = workers or max(1, os.cpu_count() or 1)
        self.say = say
        self.state = self.root / ".grading"
        self.folder = self.state / FOLDER
        self.engine = engine
        self._own_engine = engine is None
        self.warm = None
        self.stopping = threading.Event()
        self._class_files_due = False
        self._class_files_at = 0.0
        self.rounds = 0

    # ---------------------------------------------------------------- what is waiting

    def handled(self) -> dict[str, dict]:
        """inbound folder name -> what was done with it."""
        out = {}
        try:
            lines = (self.folder / RECORD).read_text().splitlines()
        except OSError:
            return out
        for line in lines:
            try:
                rec = json.loads(line)
                out[rec["name"]] = rec
            except (ValueError, KeyError):
                continue   # a line cut short by a stop
        return out

    def _record(self, entries: list[dict]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder / RECORD, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries).encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def pending(self) -> list[Submission]:
        """The inbound folders not handled yet, of chapters this course grades, oldest first."""
        try:
            names = [e for e in os.scandir(self.inbound) if e.is_dir(follow_symlinks=False)]
        except OSError:
            return []
        done = self.handled()
        subs = []
        for entry in names:
            if entry.name in done:
                continue
            sub = parse(Path(entry.path))
            if sub and (self.root / "source" / sub.chapter / f"{sub.chapter}.ipynb").exists() and complete(sub.path):
                subs.append(sub)
        return sorted(subs, key=lambda s: s.timestamp)

    # ---------------------------------------------------------------- the loop

    def start(self) -> None:
        from ..grade import engine as engine_mod
        from ..grade.pipeline import GRADER, Warm, _refuse_without_sandbox
        _refuse_without_sandbox(self.sandbox, self.say)
        chapters = sorted(p.parent.name for p in (self.root / "source").glob("*/*.ipynb") if p.stem == p.parent.name)
        self.warm = Warm.start(self.root, self.sandbox, chapters)
        if self._own_engine:
            self.engine = engine_mod.from_environment(self.workers, GRADER)
        if self.engine is not None:   # a cluster's workers start their kernel factories now
            from types import SimpleNamespace
            self.engine.start(SimpleNamespace(root=self.root, sandbox=self.sandbox, chapters=chapters))
        released = [ch for ch in chapters if (self.exchange / self.course_id / "outbound" / ch).is_dir()]
        if released:   # what students can submit: its one-off steps now, not on the first submission
            self.prepare(released)
        self.say(f"serve: watching {self.inbound} for {self.root} "
                 f"(sandbox {'on' if self.sandbox else 'OFF'}, "
                 f"{self.engine.describe() if self.engine is not None else 'a thread pool'})")

    def prepare(self, chapters: list[str]) -> None:
        """Each chapter's one-off steps (the preflight, its record in the gradebook), once."""
        from ..grade import pipeline, reuse
        run = pipeline.Run(self.root, [Job(ch, "_service") for ch in chapters], sandbox=self.sandbox, warm=True,
                           workers=self.workers, say=self.say)
        run.shared = self.warm
        run.keys = reuse.Keys.of(self.root, run.jobs, pipeline.rules(run))
        pipeline._prepare(run)
        try:
            with runner.one_at_a_time(self.state):
                for step in (pipeline.step_kernels, pipeline.step_preflight, pipeline.step_gradebook):
                    step(run)
        finally:
            pipeline._clean_up(run)

    def close(self) -> None:
        if self._class_files_due:
            self.write_class_files()
        if self.warm is not None:
            self.warm.close()
            self.warm = None
        if self._own_engine and self.engine is not None:
            self.engine.close()

    def serve_forever(self) -> None:
        """Grade what lands until stopped (SIGTERM, SIGINT or ``stopping``)."""
        self.start()
        try:
            while not self.stopping.is_set():
                try:
                    busy = self.step()
                except SystemExit as exc:   # the machine, not the students: wait and try again
                    self.say(f"serve: {exc}\nserve: trying again in 30 s")
                    self.stopping.wait(30)
                    continue
                if not busy:
                    if self._class_files_due and time.monotonic() - self._class_files_at >= self.class_files_every:
                        self.write_class_files()
                    self.stopping.wait(self.poll)
        finally:
            self.close()

    def step(self) -> int:
        """Handle what is waiting now; returns how many submissions that was."""
        subs = self.pending()
        if not subs:
            return 0
        with runner.one_at_a_time(self.state):
            self.handle(subs)
        return len(subs)

    def handle(self, subs: list[Submission]) -> list[Job]:
        """File, grade and hand back ``subs``: the newest of each student's
        chapter is graded; an older one that waited with it is superseded."""
        from ..grade import pipeline
        latest: dict[tuple[str, str], Submission] = {}
        for sub in subs:
            latest[(sub.student, sub.chapter)] = sub   # oldest first: the last one wins
        entries, jobs, filed = [], [], {}
        for sub in subs:
            if latest[(sub.student, sub.chapter)] is not sub:
                entries.append({"name": sub.name, "done": "superseded", "at": time.time()})
        for (student, chapter), sub in latest.items():
            if self.file(sub):
                jobs.append(Job(chapter, student))
                filed[(student, chapter)] = sub
            else:   # an older submission than the one graded already
                entries.append({"name": sub.name, "done": "older than the one graded", "at": time.time()})
        if jobs:
            run = pipeline.Run(self.root, jobs, sandbox=self.sandbox, warm=True, workers=self.workers,
                               say=lambda *a: None, report=False)
            run.shared, run.engine, run.class_files = self.warm, self.engine, False
            pipeline._prepare(run)
            try:
                pipeline.run_steps(run)
            finally:
                pipeline._clean_up(run)
            self._class_files_due = True
            for job in run.everyone:
                sub = filed[(job.student, job.chapter)]
                released = self.release(job)
                entries.append({"name": sub.name, "done": "graded", "student": job.student, "chapter": job.chapter,
                                "released": released, "submitted_at": sub.epoch,
                                "at": time.time(), "kept": job.reused})
                self.say(f"serve: {job.student}/{job.chapter} graded"
                         f"{' (unchanged, kept)' if job.reused else ''}; feedback "
                         f"{'released' if released else 'NOT released'} "
                         f"{time.time() - sub.epoch:.1f} s after it was submitted")
            self.rounds += 1
        self._record(entries)
        return jobs

    # ---------------------------------------------------------------- collect and release

    def owner(self) -> tuple[int, int]:
        st = os.stat(self.root)
        return st.st_uid, st.st_gid

    def file(self, sub: Submission) -> bool:
        """Copy the submission into submitted/ as ``nbgrader collect --update`` does;
        False when a newer submission of that student is there already."""
        from nbgrader.coursedir import CourseDirectory
        from nbgrader.utils import ignore_patterns, parse_utc
        dest = self.root / "submitted" / sub.student / sub.chapter
        stamp_file = dest / "timestamp.txt"
        if stamp_file.exists():
            try:
                have = parse_utc(stamp_file.read_text().strip())
            except (ValueError, OverflowError):
                have = None
            if have is not None and have > sub.timestamp:
                return False
            if have == sub.timestamp and self._same(sub.path, dest):
                return True   # filed before a restart: nothing to copy
        cd = CourseDirectory()
        tmp = dest.with_name(f".{sub.chapter}.{os.getpid()}.part")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(sub.path, tmp, ignore=ignore_patterns(exclude=cd.ignore, include=cd.include,
                                                                max_file_size=cd.max_file_size))
        if not (tmp / "timestamp.txt").exists():
            (tmp / "timestamp.txt").write_text(sub.timestamp.strftime("%Y-%m-%d %H:%M:%S.%f %Z"))
        uid, gid = self.owner()
        if os.geteuid() == 0:
            for path in [dest.parent.parent, dest.parent, tmp, *tmp.rglob("*")]:
                if path.exists() and (path.stat().st_uid != uid or path.stat().st_gid != gid):
                    os.chown(path, uid, gid)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
        return True

    @staticmethod
    def _same(a: Path, b: Path) -> bool:
        from ..grade.reuse import digest_paths
        return digest_paths([a]) == digest_paths([b])

    def release(self, job: Job) -> bool:
        """nbgrader's release_feedback for this student and chapter alone, as the
        owner of the course in the exchange (the instructor: nbgrader releases only
        into a feedback folder its user owns, and the instructor releases there too)."""
        page = self.root / "feedback" / job.student / job.chapter / f"{job.chapter}.html"
        if not page.exists():
            return False
        log = self.state / "logs" / f"release_feedback__{job.chapter}__{job.student}.log"
        args = ["release_feedback", job.chapter, f"--student={job.student}", "--log-level=WARN",
                f"--Exchange.root={self.exchange}", f"--CourseDirectory.course_id={self.course_id}"]
        st = os.stat(self.exchange / self.course_id) if (self.exchange / self.course_id).exists() else None
        as_owner = st is not None and os.geteuid() == 0 and st.st_uid != 0
        payload = {"args": args, "uid": st.st_uid if as_owner else None, "gid": st.st_gid if as_owner else None}
        rc = runner.run_forked("coursekit.serve.service:release_command", payload, self.root, env_with_bin(), log,
                               timeout=120)
        if rc != 0:
            tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-5:]) if log.exists() else ""
            self.say(f"serve: release_feedback failed for {job.student}/{job.chapter} (see {log}):\n{tail}")
            return False
        return True

    def write_class_files(self) -> None:
        """grades.csv, the LMS files and the class report, for the whole class."""
        from ..grade import pipeline, seals
        run = pipeline.Run(self.root, [], sandbox=self.sandbox, say=lambda *a: None)
        for ch in sorted({j.chapter for j in pipeline.class_jobs(self.root, self.state)}):
            meta = seals.read(self.root / "source" / ch / f"{ch}.ipynb").metadata
            run.langs[ch] = meta.get("course", {}).get("lang", "zh")
        t = time.monotonic()
        try:
            with runner.one_at_a_time(self.state):
                for step in (pipeline.step_export, pipeline.step_report):
                    step(run)
        except (SystemExit, Exception) as exc:  # noqa: BLE001 (the next idle moment tries again)
            self.say(f"serve: the class files were not written: {exc}")
            return
        self._class_files_due = False
        self._class_files_at = time.monotonic()
        self.say(f"serve: grades.csv, the LMS files and the class report written in {self._class_files_at - t:.1f} s")


def release_command(payload: dict) -> None:
    """``nbgrader release_feedback`` in a forked process, as ``payload["uid"]`` when given."""
    if payload.get("uid") is not None:
        import pwd
        uid, gid = payload["uid"], payload["gid"]
        try:
            home = pwd.getpwuid(uid).pw_dir
        except KeyError:
            home = "/"
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
        os.environ["HOME"] = home
    runner.nbgrader_command(payload["args"])


def serve(root: Path, exchange: Path | None = None, sandbox: bool = True, poll: float = 0.5,
          class_files_every: float = 60.0, workers: int | None = None) -> int:
    """``python course.py serve``: run the service until SIGTERM or Ctrl+C."""
    service = Service(root, exchange, sandbox=sandbox, poll=poll, class_files_every=class_files_every,
                      workers=workers, say=lambda *a: print(*a, flush=True))

    def stop(*_):
        service.stopping.set()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    service.serve_forever()
    return 0
