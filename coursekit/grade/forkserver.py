"""The grader's fork server (coursekit.base.runner): what it imports before its first
command, and its start, as early as the grading command can (it imports nbgrader: one to
two seconds, which a run with its kernel factory already warm would otherwise wait for)."""
from __future__ import annotations

import threading

from ..base import runner

# what each notebook's forked autograde (nbgrader_config.py) and the feedback step's forked
# command (feedback.pages) import, and the page those make first (coursekit.grade.page_warm)
MODULES = ("coursekit.grade.feedback", "coursekit.grade.replay", "coursekit.grade.batched",
           "coursekit.grade.kernel_client", "coursekit.author.replay", "coursekit.grade.page_warm")
_started = threading.Event()


def register() -> None:
    for module in MODULES:
        runner.preload(module)


def start() -> None:
    """Start the fork server in the background, once per process."""
    register()
    if not _started.is_set():
        _started.set()
        runner.aside(runner.warm_up, name="warm-up")
