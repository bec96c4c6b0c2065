"""A grading engine's jobs (coursekit.grade.engine): one per notebook.

``job_key`` names a job by the hash the reuse step computes (the submission,
the chapter, the grading code, the environment, the run's rules) with the
chapter and the student; a ``Grader`` is what the jobs run (given by the
pipeline); the ``Ledger`` is the table of finished jobs in the gradebook's own
database, written once per key; ``code_digest`` and ``environment_digest``
are what a worker must share with the grader.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..base.chapters import ROOT
from .intake import Job

TABLE = "course_finished_job"
LOG = "engine"                     # .grading/engine/: what the jobs did (autograded.jsonl)
MACHINERY = "machinery"            # a job that failed outside the student's kernel: never a score


def job_key(job: Job) -> str:
    """The job's key: the reuse step's hash of what its grade depends on, with who and which chapter
    (two students may hand in the same bytes)."""
    text = f"{job.key}\n{job.chapter}\n{job.student}"
    return hashlib.sha256(text.encode()).hexdigest()[:40]


@dataclass(frozen=True)
class Grader:
    """What the engine's jobs run, given by the grading pipeline (coursekit.grade.pipeline.GRADER).
    Each is a module-level name, which Dask sends to the workers by reference."""
    warm: type          # a worker's kernel factory: .start(root, sandbox, chapters) -> .base, .socket(say), .close()
    grade: Callable     # on a worker: (spec, job, base, socket, workers) -> the run that autograded ``job``
    check: Callable     # in the grader: (run, job, gradebook) -> None, the seal check of a graded notebook
    #                     (``job.sealed`` True once done; left False, the seal check step does it)
    probe: Callable | None = None   # on a worker: (spec, base, socket) -> None or why one graded kernel failed
    seal: Callable | None = None    # on a worker whose jobs carry their files: (run, job, gradebook) -> None,
    #                                 the seal check there, failing closed (coursekit.grade.carried)


# ------------------------------------------------------------------ the ledger

class Ledger:
    """The table of finished jobs in the gradebook's database: key -> the job's
    result (its flags, time and outcome), written once per key."""

    def __init__(self, url: str):
        self.url = url
        self._engine = None
        self._table = None

    def _db(self, create: bool):
        """The database, or None when it does not exist yet and ``create`` is false
        (a SQLite gradebook is not created by looking into it)."""
        if self._engine is not None:
            return self._engine
        if self.url.startswith("sqlite:///") and not create and not Path(self.url[len("sqlite:///"):]).exists():
            return None
        from sqlalchemy import Column, Float, MetaData, String, Table, Text, create_engine
        from sqlalchemy.exc import SQLAlchemyError
        args = {"connect_args": {"timeout": 60}} if self.url.startswith("sqlite") else {"pool_pre_ping": True}
        engine = create_engine(self.url, future=True, **args)
        meta = MetaData()
        self._table = Table(TABLE, meta, Column("key", String(64), primary_key=True),
                            Column("chapter", String(128)), Column("student", String(256)),
                            Column("result", Text), Column("finished_at", Float))
        for attempt in range(3):   # two graders creating the table at once: one of them wins
            try:
                meta.create_all(engine, checkfirst=True)
                break
            except SQLAlchemyError:
                if attempt == 2:
                    raise
                time.sleep(0.2 * (attempt + 1))
        self._engine = engine
        return engine

    def finished(self, keys: list[str]) -> dict[str, dict]:
        """key -> recorded result, for the keys the ledger holds."""
        from sqlalchemy import select
        db = self._db(create=False)
        if db is None or not keys:
            return {}
        out = {}
        with db.connect() as con:
            for i in range(0, len(keys), 500):
                rows = con.execute(select(self._table.c.key, self._table.c.result)
                                   .where(self._table.c.key.in_(keys[i:i + 500])))
                out.update({k: json.loads(r) for k, r in rows})
        return out

    def record(self, key: str, job: Job, result: dict) -> bool:
        """Write ``key`` once; False when it was there already (the job had finished before)."""
        from sqlalchemy.exc import IntegrityError
        db = self._db(create=True)
        try:
            with db.begin() as con:
                con.execute(self._table.insert().values(key=key, chapter=job.chapter, student=job.student,
                                                        result=json.dumps(result), finished_at=time.time()))
            return True
        except IntegrityError:
            return False

    def forget(self, keys: list[str]) -> None:
        db = self._db(create=False)
        if db is None or not keys:
            return
        with db.begin() as con:
            for i in range(0, len(keys), 500):
                con.execute(self._table.delete().where(self._table.c.key.in_(keys[i:i + 500])))

    def count(self) -> int:
        from sqlalchemy import func, select
        db = self._db(create=False)
        if db is None:
            return 0
        with db.connect() as con:
            return con.execute(select(func.count()).select_from(self._table)).scalar()

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


# ------------------------------------------------------------------ what a worker must share with the grader

def code_digest() -> str:
    """The grading code this process runs (wherever the course is installed): grading/,
    helpers/, coursekit/ and nbgrader_config.py, by their names and bytes, not their path."""
    from .reuse import digest_paths
    return digest_paths([ROOT / "grading", ROOT / "helpers", ROOT / "coursekit", ROOT / "nbgrader_config.py"])


def environment_digest() -> str:
    """Python and every installed distribution with its version (not where they are
    installed, nor the course's own)."""
    from .reuse import environment_digest as digest
    return digest(where=False, exclude=frozenset({"transformer_course"}))
