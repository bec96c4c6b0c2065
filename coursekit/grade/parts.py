"""The parts of a feedback page that follow from a text alone, made once per grading run.

A chapter's lecture text is the same on every student's page: each markdown
cell's HTML, its maths as MathML, its sanitised form and each code cell's
highlighting. Pages are made by many short processes (the feedback lane's
batches, the feedback step's shares, one process per worker), and making a
chapter's parts took most of the first page each of them made (0.2-0.4 s).
``Kept`` remembers each part in the process and, for a grading run, in the
run's own folder (``COURSE_PAGE_PARTS``, which the pipeline gives the processes
that make its pages and removes with the run's scratch folder), keyed by a
digest of the text, of the code that makes it and of the versions of the
libraries it uses: a page made from a kept part is the page that would have
been made without it. Only the grader writes there (kernels run as other users
in the sandbox and cannot), and a run's parts, students' outputs among them,
go when the run ends.
"""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

ENV = "COURSE_PAGE_PARTS"     # the folder a grading run keeps its parts in
LARGEST = 1 << 20            # a text longer than this (a student's huge output) is not kept on disk
LIBRARIES = ("bleach", "mistune", "nbconvert", "latex2mathml", "pygments", "jinja2")


@functools.lru_cache(maxsize=1)
def _makers() -> str:
    """A digest of what makes the parts: the course's page code and the libraries' versions."""
    from importlib.metadata import PackageNotFoundError, version
    h = hashlib.sha256()
    here = Path(__file__).parent
    for path in (here / "feedback.py", here.parent / "base" / "mathml.py", here / "parts.py"):
        h.update(path.read_bytes())
    for lib in LIBRARIES:
        try:
            h.update(f"{lib}=={version(lib)}\n".encode())
        except PackageNotFoundError:
            h.update(f"{lib} missing\n".encode())
    return h.hexdigest()


class Kept:
    """``get(key, make)``: what ``make()`` returns for ``key`` (a string that names
    all it depends on), from memory, from the run's folder, or made and kept."""

    def __init__(self, kind: str):
        self.kind, self.memory = kind, {}

    def _path(self, key: str) -> Path | None:
        base = os.environ.get(ENV)
        if not base or not Path(base).is_dir():     # not a grading run's page maker: memory only
            return None
        digest = hashlib.sha256(f"{_makers()}\0{self.kind}\0{key}".encode()).hexdigest()
        return Path(base) / self.kind / f"{digest}.html"

    def get(self, key: str, make) -> str:
        if key in self.memory:
            return self.memory[key]
        path = self._path(key) if len(key) <= LARGEST else None
        value = None
        if path is not None:
            try:
                value = path.read_text(encoding="utf-8")
            except (OSError, ValueError):
                value = None
        if value is None:
            value = make()
            if path is not None:
                from ..base.runner import write_atomically
                try:   # another process reads no file or the whole new one
                    write_atomically(path, lambda tmp: tmp.write_text(value, encoding="utf-8"))
                except OSError:
                    pass
        if len(self.memory) > 4096:
            self.memory.clear()
        self.memory[key] = value
        return value
