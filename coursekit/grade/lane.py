"""The feedback lane: what follows a notebook's autograde (seal check, figures, feedback
page), done for the notebooks already graded while the others still are (see ``Lane``)."""
from __future__ import annotations

import threading

from grading import protocol

from ..base import runner
from . import figures, seal_check
from .intake import Job
from .run import Run, page_env


class Lane:
    """What follows a notebook's autograde (seal check, figures, feedback page),
    done for the notebooks already graded while the others still are.

    On two cores the graded kernels leave a core idle for about a sixth of the
    autograde step (each waits on its nbgrader, nbgrader on it); the feedback
    pages fill that time. The lane takes what has finished, a few notebooks at
    a time, and makes their pages in one process forked at the lowest
    priority, so it never takes a core from a kernel. When the autograde step
    ends, the pages the lane is still making are stopped (on a busy machine a
    process at the lowest priority could take long) and, with whatever it did
    not start, left to the steps after autograde: ``Job.paged`` says which
    pages it made. A notebook whose autograde failed is never taken: it may
    yet be scored as empty."""

    BATCH = 4

    def __init__(self, run: Run):
        import queue
        self.run, self.todo, self.closed = run, queue.SimpleQueue(), threading.Event()
        self.proc = None
        self.lock = threading.Lock()
        self.thread = None
        if run.class_files and run.workers > 1:   # else one notebook at a time (the service) or one core
            self.thread = threading.Thread(target=self._work, name="feedback-lane", daemon=True)

    def __enter__(self) -> "Lane":
        if self.thread is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.thread is None:
            return
        with self.lock:
            self.closed.set()
            if self.proc is not None and self.proc.is_alive():
                runner.stop_forked(self.proc)
        self.todo.put(None)
        self.thread.join()

    def put(self, job: Job) -> None:
        if self.thread is not None and job.ok and not job.failure and not job.reused:
            self.todo.put(job)

    def _work(self) -> None:
        import queue
        while True:
            job = self.todo.get()
            if job is None or self.closed.is_set():
                return
            batch = [job]
            while len(batch) < self.BATCH:
                try:
                    job = self.todo.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    return
                batch.append(job)
            try:
                self._follow([j for j in batch if self.run.graded_path(j).exists()])
            except Exception:  # noqa: BLE001 (the steps after autograde make what the lane could not)
                pass

    def _follow(self, batch: list[Job]) -> None:
        run = self.run
        from nbgrader.api import Gradebook
        with Gradebook(protocol.gradebook_url(run.root), protocol.COURSE_ID) as gb:
            batch = [job for job in batch if job.sealed or self._sealed(job, gb)]
        if not batch:
            return
        figures.fill_graded(run, batch)
        with self.lock:
            if self.closed.is_set():
                return
            self.proc = runner.start_forked("coursekit.grade.feedback:pages_aside",
                                            {"notebooks": [(j.chapter, j.student) for j in batch]}, run.root,
                                            page_env(run), run.state / "logs" / "generate_feedback__lane.log")
        self.proc.join()
        if self.proc.exitcode == 0 and not self.closed.is_set():
            for job in batch:
                job.paged = True

    def _sealed(self, job: Job, gb) -> bool:
        """The seal check of ``job``. One that cannot finish here (the gradebook
        busy with the notebooks still being graded) takes nothing away: the job
        is left to the seal check step, which fails closed when nothing else
        writes."""
        try:
            seal_check.check_seals(self.run, job, gb)
        except Exception:  # noqa: BLE001
            gb.db.rollback()
            return False
        job.sealed = True
        return True
