"""nbgrader's converters over many notebooks in one process (run by
coursekit.base.runner.run_forked, in a process forked from the warm fork server).

Each ``nbgrader generate_feedback`` or ``generate_assignment`` command pays
about a second before its first notebook: the app, its configuration, and the
HTML exporter's templates, regular expressions and lexers, compiled on first
use. One process that converts many notebooks pays it once. The release's
notebooks are made here (``assignments``); the grading pipeline makes its
feedback pages, in the course's template, with the same two functions
(``nbgrader_subapp``, ``convert_each``).
"""
from __future__ import annotations

import traceback


def nbgrader_subapp(subcommand: str, first: str, extra: list[str]):
    """nbgrader's own app for ``subcommand``, initialised as the command line
    would (the course's nbgrader_config.py included)."""
    from nbgrader.apps.nbgraderapp import NbGraderApp
    app = NbGraderApp()
    app.initialize([subcommand, first, "--force", "--log-level=ERROR", *extra])
    return app.subapp


def convert_each(converter_class, subapp, items, attrs) -> int:
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
    extra = [f"--CourseDirectory.release_directory={payload['release']}", *payload.get("extra", [])]
    sub = nbgrader_subapp("generate_assignment", chapters[0], extra)
    return convert_each(GenerateAssignment, sub, chapters, lambda ch: {"assignment_id": ch})
