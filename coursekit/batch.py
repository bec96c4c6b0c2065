"""nbgrader's converters over many notebooks in one process (run by
coursekit.runner.run_forked, in a process forked from the warm fork server).

Each ``nbgrader generate_feedback`` command pays about a second before its
first page: the app, its configuration, and the HTML exporter's templates,
regular expressions and lexers, compiled on first use. One process that makes
many pages pays it once. The pages use the course's feedback template
(coursekit.feedback.use_course_template), which names each exercise.
"""
from __future__ import annotations

import traceback


def _app(subcommand: str, first: str, extra: list[str]):
    """nbgrader's own app for ``subcommand``, initialised as the command line
    would (the course's nbgrader_config.py included)."""
    from nbgrader.apps.nbgraderapp import NbGraderApp
    app = NbGraderApp()
    app.initialize([subcommand, first, "--force", "--log-level=ERROR", *extra])
    return app.subapp


def _each(converter_class, subapp, items, attrs) -> int:
    from nbgrader.utils import temp_attrs
    failed = 0
    for item in items:
        with temp_attrs(subapp.coursedir, **attrs(item)):
            conv = converter_class(coursedir=subapp.coursedir, parent=subapp)
            conv.force = True
            try:
                conv.start()
            except Exception:  # noqa: BLE001 (one notebook's failure is reported; the others go on)
                print(f"batch: {item} failed", flush=True)
                traceback.print_exc()
                failed += 1
    return 1 if failed else 0


def assignments(payload: dict) -> int:
    """``nbgrader generate_assignment`` for each chapter of ``payload["chapters"]``,
    writing the release to ``payload["release"]`` (a scratch folder)."""
    from nbgrader.converters import GenerateAssignment
    chapters = payload["chapters"]
    sub = _app("generate_assignment", chapters[0], [f"--CourseDirectory.release_directory={payload['release']}",
                                                     *payload.get("extra", [])])
    return _each(GenerateAssignment, sub, chapters, lambda ch: {"assignment_id": ch})


def feedback(payload: dict) -> int:
    """``nbgrader generate_feedback`` for each (chapter, student) of ``payload["notebooks"]``."""
    from nbgrader.converters import GenerateFeedback

    from .feedback import use_course_template

    class CourseFeedback(GenerateFeedback):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            use_course_template(self)   # the page names each exercise

    pairs = [tuple(p) for p in payload["notebooks"]]
    sub = _app("generate_feedback", pairs[0][0], [])
    return _each(CourseFeedback, sub, pairs, lambda p: {"assignment_id": p[0], "student_id": p[1]})
