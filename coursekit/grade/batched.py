"""nbgrader's autograde with its gradebook writes batched: one commit per notebook.

nbgrader's SaveAutoGrades commits after each graded or written-answer cell:
on SQLite each commit is a journal written and synced, so a notebook of many
graded cells (ch12's quiz: 0.45 s) paid for each. ``SaveAutoGrades`` here
writes the same rows and commits them once, when the notebook's cells are
all done; a notebook whose grading fails midway leaves none of them (it is
graded again or scored as empty, and either writes them all).

The course's nbgrader_config.py lists nbgrader's autograde preprocessors with
it in place of nbgrader's.
"""
from __future__ import annotations

from nbgrader.api import Gradebook
from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.preprocessors import SaveAutoGrades as _NbgraderSaveAutoGrades


class _OneCommit:
    """A gradebook session whose ``commit`` waits for the end of the notebook."""

    def __init__(self, db):
        self._db = db

    def commit(self) -> None:
        pass

    def __getattr__(self, name):
        return getattr(self._db, name)


class SaveAutoGrades(_NbgraderSaveAutoGrades):

    def preprocess(self, nb, resources):
        self.notebook_id = resources["nbgrader"]["notebook"]
        self.assignment_id = resources["nbgrader"]["assignment"]
        self.student_id = resources["nbgrader"]["student"]
        self.db_url = resources["nbgrader"]["db_url"]
        self.gradebook = Gradebook(self.db_url)
        with self.gradebook:
            db = self.gradebook.db
            self.gradebook.db = _OneCommit(db)
            try:
                nb, resources = NbGraderPreprocessor.preprocess(self, nb, resources)
            except BaseException:
                db.rollback()
                raise
            finally:
                self.gradebook.db = db
            db.commit()
        return nb, resources
