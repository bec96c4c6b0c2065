"""Preflight: before the gradebook is touched, one graded kernel per chapter
(the same launcher, sandbox and environment a student's notebook gets) runs
its release notebook's first code cell and imports the chapter's checks. If
that fails, the machine is at fault, not the students: the run stops with
the cause and the fix, and writes nothing.

Also: how a failed autograde reads (the kind of failure, from nbgrader's
log), and the rule that stops a run whose notebooks mostly fail with one and
the same infrastructure cause.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import nbformat

# failure kind -> (signs in a log, whether it is the machine's fault, the fix)
CAUSES = {
    "course_import": (("ModuleNotFoundError", "ImportError", "SyntaxError"), True,
                      "the graded kernel cannot import the course's code: check that helpers/ and grading/ are "
                      "complete and that the environment has the course's requirements (make env)"),
    "kernel_start": (("Kernel died before replying to kernel_info", "Kernel didn't respond", "failed to execute",
                      "setpriv:", "bwrap:", "No such file or directory: '", "KernelSpec"), True,
                     "the graded kernel cannot start: check that the environment's Python runs inside the "
                     "sandbox (bubblewrap) and that its folders can be entered by other users"),
    "gradebook": (("OperationalError", "could not connect to server", "Connection refused", "unable to open database"),
                  True, "the gradebook cannot be reached: check COURSE_DB_URL (or gradebook.db's folder)"),
    "kernel_died": (("Kernel died", "DeadKernelError"), False, ""),
}
INFRASTRUCTURE = {k for k, (_, infra, _) in CAUSES.items() if infra}


class GradingStopped(SystemExit):
    """The run stopped before scoring anyone: the machine, not the students, is at fault."""


def classify(log_text: str) -> str:
    """The kind of an autograde failure, from its log."""
    for kind, (signs, _, _) in CAUSES.items():
        if any(s in log_text for s in signs):
            return kind
    return "autograde_failed"


def stop_if_infrastructure(jobs, logs: dict[str, str]) -> None:
    """Raise GradingStopped when most notebooks of the run failed with the same
    infrastructure cause (``logs``: the failed jobs' log texts by job key)."""
    failed = [j for j in jobs if j.failure in INFRASTRUCTURE]
    if not failed:
        return
    kinds = [j.failure for j in failed]
    kind = max(set(kinds), key=kinds.count)
    if kinds.count(kind) * 2 <= len(jobs):
        return
    sample = next((logs.get(f"{j.chapter}__{j.student}", "") for j in failed if j.failure == kind), "")
    raise GradingStopped(message(kind, f"{kinds.count(kind)} of {len(jobs)} notebooks", sample))


def message(kind: str, what: str, log_text: str) -> str:
    fix = CAUSES.get(kind, ((), True, "see the log"))[2]
    lines = [line for line in log_text.splitlines() if line.strip()]
    quoted = "\n".join("    " + line for line in lines[-8:])
    return (f"grade: stopped before scoring anyone: {what} failed for a reason of the machine, not of the "
            f"students ({kind.replace('_', ' ')}).\n{quoted}\n"
            f"  fix: {fix}.\n  Nothing was written: no gradebook rows, no feedback, no grades.csv.")


def probe_code(root: Path, chapter: str) -> str:
    """The release notebook's first code cell, then the chapter's checks' import."""
    nb = nbformat.read(root / "release" / chapter / f"{chapter}.ipynb", as_version=4)
    first = next((c.source for c in nb.cells if c.cell_type == "code"), "")
    checks = f"import grading.{chapter}\n" if _grading_module_exists(chapter) else ""
    return f"{first}\nimport helpers.checks, grading.core\n{checks}print('preflight: ok')\n"


def _grading_module_exists(chapter: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(f"grading.{chapter}") is not None


async def _probe(spec_dir: Path, env: dict, workdir: Path, code: str, log: Path, ipc_ip: str,
                 timeout: float) -> str | None:
    """Start the graded kernel with ``env`` in ``workdir`` and run ``code``;
    None when it printed the ok line, else what went wrong (with the launcher's output)."""
    import asyncio

    from jupyter_client.kernelspec import KernelSpecManager

    from .kernel_client import NAME, QuickStop
    km = QuickStop(kernel_name="python3", transport="ipc", ip=ipc_ip, connection_file=ipc_ip + ".json",
                            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(spec_dir)]), client_class=NAME)
    out: list[str] = []
    with open(log, "w") as f:
        try:
            async with asyncio.timeout(timeout):
                await km.start_kernel(env=env, cwd=str(workdir), stdout=f, stderr=f)
                kc = km.client()
                kc.start_channels()
                try:
                    await kc.wait_for_ready(timeout=timeout)
                    await kc.execute_interactive(code, timeout=timeout, output_hook=lambda m: out.append(_text(m)))
                finally:
                    kc.stop_channels()
        except TimeoutError:
            out.append(f"TimeoutError: the preflight kernel did not answer within {timeout:.0f} s\n")
        except Exception as exc:  # noqa: BLE001 (any failure to start or answer is the finding)
            out.append(f"{type(exc).__name__}: {exc}\n")
        finally:
            if km.has_kernel:
                await km.shutdown_kernel(now=True)
    text = "".join(out)
    if "preflight: ok" in text:
        return None
    return log.read_text(errors="replace") + text


def run_probes(probes: list[dict], at_once: int, timeout: float = 120) -> list[str | None]:
    """Each probe (the keyword arguments of one chapter's kernel: ``spec_dir``,
    ``env``, ``workdir``, ``code``, ``log``, ``ipc_ip``), at most ``at_once`` side
    by side, in this process: the kernels start while nbgrader's fork server is
    still importing, and need none of it. Returns None or what went wrong, per
    probe. The event loop has a thread of its own, so that a caller that runs
    one (an instructor's notebook) is left alone."""
    import asyncio
    import concurrent.futures as cf

    async def all_of_them():
        gate = asyncio.Semaphore(max(1, at_once))

        async def one(p):
            async with gate:
                return await _probe(**p, timeout=timeout)
        return await asyncio.gather(*(one(p) for p in probes))

    with cf.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, all_of_them()).result()


def _text(msg) -> str:
    c = msg.get("content", {})
    if msg.get("msg_type") == "stream":
        return c.get("text", "")
    if msg.get("msg_type") == "error":
        return f"{c.get('ename')}: {c.get('evalue')}\n"
    return ""


def workdir_for(base: Path, root: Path, chapter: str) -> Path:
    """A scratch copy of the chapter's release folder for the probe's kernel."""
    dest = base / "preflight" / chapter
    shutil.rmtree(dest, ignore_errors=True)   # a long-lived grader's folder: the chapter's earlier probe
    shutil.copytree(root / "release" / chapter, dest)
    return dest
