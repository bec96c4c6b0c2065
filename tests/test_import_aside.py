"""What the course imports in a thread of its own never meets a package half made.

Python 3.11 can give a thread a module that another thread is still making when one
imports a package whose ``__init__`` imports its submodules (jupyter_client) and the
other one of those submodules directly (nbclient does, under nbgrader): a Dask worker
died of it, unpickling a probe (which imports jupyter_client) while its own thread
imported nbgrader. So the packages both sides share (``runner.SHARED_ROOTS``) are
imported whole before any such thread starts, and a worker imports what its probes
and jobs unpickle before its threads start.
"""
from __future__ import annotations

import json
import subprocess
import sys

from harness import ROOT

# each thread's start records which of WANTED were imported by then
RECORD = """
import json, sys, threading
WANTED = {wanted!r}
seen = []
_start = threading.Thread.start
def start(self):
    seen.append([self.name, [m for m in WANTED if m not in sys.modules]])
    return _start(self)
threading.Thread.start = start
from coursekit.base import runner
runner.warm_up = lambda: None          # the fork server itself is not what is looked at
"""


def _threads_started(code: str, wanted: list[str], tmp_path) -> list:
    script = RECORD.format(wanted=wanted) + code + "\nprint(json.dumps(seen))\n"
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_graders_warm_up_thread_starts_with_the_shared_packages_imported(tmp_path):
    seen = _threads_started("from coursekit.grade import forkserver\nforkserver.start()\n",
                            ["jupyter_client"], tmp_path)
    assert [name for name, _ in seen] == ["warm-up"], seen
    assert seen[0][1] == [], f"the warm-up thread started before these were imported: {seen[0][1]}"


def test_a_workers_threads_start_after_what_its_probes_and_jobs_unpickle_is_imported(tmp_path):
    code = """
from pathlib import Path
from coursekit.grade import worker
class Factory:                     # stands for the warm kernel factory: it imports aside as it starts
    @classmethod
    def start(cls, root, sandbox, chapters):
        seen.append(["factory", [m for m in WANTED if m not in sys.modules]])
        thread = threading.Thread(target=runner.warm_up, name="warm-up")
        thread.start()
        thread.join()
        return cls()
    def close(self):
        pass
worker.CourseWorker(sys.argv[1], False, ["ch01_attention"], Factory).setup()
"""
    seen = _threads_started(code, ["jupyter_client", "coursekit.grade.autograde"], tmp_path)
    assert [name for name, _ in seen] == ["factory", "warm-up"], seen
    late = {name: missing for name, missing in seen if missing}
    assert not late, f"started before these were imported: {late}"
