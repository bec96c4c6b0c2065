"""Where a notebook's grading time goes: the per-notebook account.

With ``COURSE_ACCOUNT`` set to a folder, each notebook's ``nbgrader autograde``
(a process forked by coursekit.base.runner) times each of nbgrader's
preprocessors and the app around them, and writes them to
``<folder>/<chapter>__<student>.json``. ``notebook_account`` adds the time in
the kernel's cells, read from the autograded notebook (nbclient records when
each cell started and finished), split into lecture, answer and test cells.
``bench/grade_course.py`` sums them per chapter.
"""
from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path

ENV = "COURSE_ACCOUNT"


def timed_nbgrader(args: list[str]) -> None:
    """``nbgrader ARGS`` (coursekit.base.runner.nbgrader_command) with each
    preprocessor's time written to the account folder."""
    from nbconvert.preprocessors import Preprocessor

    from coursekit.base.runner import nbgrader_command
    spent: list[tuple[str, float]] = []
    called = Preprocessor.__call__

    def timed(self, nb, resources):
        t = time.perf_counter()
        try:
            return called(self, nb, resources)
        finally:
            spent.append((type(self).__name__, time.perf_counter() - t))

    Preprocessor.__call__ = timed
    _time_kernel_phases(spent)
    t0 = time.perf_counter()
    try:
        nbgrader_command(args)
    finally:
        total = time.perf_counter() - t0
        student = next((a.split("=", 1)[1] for a in args if a.startswith("--student=")), "?")
        chapter = args[1] if len(args) > 1 else "?"
        folder = Path(os.environ[ENV])
        folder.mkdir(parents=True, exist_ok=True)
        by_name: dict[str, float] = {}
        for name, seconds in spent:
            by_name[name] = by_name.get(name, 0.0) + seconds
        (folder / f"{chapter}__{student}.json").write_text(json.dumps(
            {"nbgrader_process_s": total, "preprocessors_s": by_name}))


def _time_kernel_phases(spent: list) -> None:
    """Time the kernel's start, its client's wait for it, and its clean-up (nbclient's
    synchronous entry points, which nbconvert's ExecutePreprocessor calls)."""
    import functools

    from nbclient import NotebookClient
    for name in ("start_new_kernel", "start_new_kernel_client", "_cleanup_kernel"):
        original = getattr(NotebookClient, name)

        def wrap(original=original, name=name):
            @functools.wraps(original)
            def timed(self, *args, **kwargs):
                t = time.perf_counter()
                try:
                    return original(self, *args, **kwargs)
                finally:
                    spent.append((f"kernel:{name.strip('_')}", time.perf_counter() - t))
            return timed
        setattr(NotebookClient, name, wrap())


def _stamp(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def cell_seconds(nb) -> dict[str, float]:
    """Seconds in the kernel per kind of cell (lecture, answer, test), from the
    timestamps nbclient leaves in each executed cell's metadata."""
    out = {"lecture": 0.0, "answer": 0.0, "test": 0.0}
    for cell in nb.cells:
        times = cell.get("metadata", {}).get("execution", {})
        if cell.cell_type != "code" or "iopub.execute_input" not in times or "shell.execute_reply" not in times:
            continue
        meta = cell.metadata.get("nbgrader", {})
        kind = "test" if meta.get("grade") and not meta.get("solution") else \
            "answer" if meta.get("solution") else "lecture"
        out[kind] += max(0.0, _stamp(times["shell.execute_reply"]) - _stamp(times["iopub.execute_input"]))
    return out


def notebook_account(graded: Path, timings: Path | None, autograde_s: float) -> dict:
    """One notebook's account: cells by kind, nbgrader's preprocessors, the rest."""
    import nbformat
    nb = nbformat.read(graded, as_version=4)
    cells = cell_seconds(nb)
    out = {"autograde_s": autograde_s, **{f"cells_{k}_s": v for k, v in cells.items()}}
    if timings is not None and timings.exists():
        t = json.loads(timings.read_text())
        pre = t["preprocessors_s"]
        in_cells = sum(cells.values())
        execute = pre.get("Execute", 0.0)
        kernel = {k: v for k, v in pre.items() if k.startswith("kernel:")}
        out["kernel_start_and_stop_s"] = max(0.0, execute - in_cells)
        out.update({f"{k.replace(':', '_')}_s": v for k, v in kernel.items()})
        out.update({f"pre_{k}_s": v for k, v in pre.items() if k != "Execute" and k not in kernel})
        out["nbgrader_app_s"] = max(0.0, t["nbgrader_process_s"] - sum(v for k, v in pre.items() if k not in kernel))
        out["fork_and_wait_s"] = max(0.0, autograde_s - t["nbgrader_process_s"])
    return out


def summed(accounts: list[dict]) -> dict:
    """The mean of each figure over the notebooks (a chapter's row)."""
    keys = sorted({k for a in accounts for k in a})
    return {k: round(sum(a.get(k, 0.0) for a in accounts) / max(1, len(accounts)), 3) for k in keys}
