"""Small runs pay only for what they use (``make grade CHAPTER=… STUDENT=one`` in a class
graded before): the kernel factory starts before the gradebook is read, lean, and is not
waited for longer than its start has taken here before; a one-notebook regrade reads again
only what changed for the class report, and leaves the other students' rows as they were."""
from __future__ import annotations

import contextlib
import json
import re
import sys
from pathlib import Path

import pytest
from harness import auto_scores, grading_course, make_submission, submit

from coursekit.grade import intake, kernels, pipeline, prepare, reuse
from coursekit.grade.sandbox import sandbox_available

CH = "ch01_attention"
SANDBOX, WHY = sandbox_available()
WRONG = {"softmax": "def softmax(x, dim=-1):\n    e = torch.exp(x)\n    return e / e.sum(dim=dim, keepdim=True)\n"}


def _rows(root: Path) -> dict[str, str]:
    """The class report's row of each student."""
    page = (root / "reports" / "class_report.html").read_text(encoding="utf-8")
    return dict(re.findall(r"<tr><th scope='row'>(\w+)</th>(.*?)</tr>", page))


# ------------------------------------------------------------------ the factory starts first, lean

class _Factory:
    """Stands for kernels.Zygote: notes how it was started."""
    started: list = []

    def __init__(self, root, state, base, sandbox, imports=(), lean=False):
        self.lean, self.imports = lean, imports
        _Factory.started.append(self)

    def close(self):
        pass


def test_the_factory_starts_before_the_gradebook_is_read_and_lean_for_a_small_run(tmp_path, monkeypatch):
    """A notebook whose key is not the one recorded is graded whatever the gradebook says:
    its factory starts at once, before nbgrader is imported to read the gradebook, and a
    run whose notebooks each have a worker gets the lean one."""
    rel, src = grading_course(tmp_path, CH)
    for s in ("one", "two", "three"):
        submit(tmp_path, s, CH, make_submission(rel, src, None))
    (tmp_path / "gradebook.db").write_bytes(b"")          # a gradebook is there
    (tmp_path / ".grading" / "reuse").mkdir(parents=True)
    for s in ("one", "two", "three"):                      # each graded before, with another key
        (tmp_path / ".grading" / "reuse" / f"{CH}__{s}.json").write_text(json.dumps({"key": "old"}))
    monkeypatch.setattr(kernels, "Zygote", _Factory)
    monkeypatch.setitem(sys.modules, "nbgrader.api", None)   # reading the gradebook would fail here
    _Factory.started = []
    run = pipeline.Run(tmp_path, intake.discover(tmp_path, CH, "one"), workers=2, say=lambda *a: None)
    run.base = tmp_path
    prepare.step_reuse(run)
    assert [j.student for j in run.jobs] == ["one"] and len(_Factory.started) == 1
    assert _Factory.started[0].lean and "torch" in _Factory.started[0].imports
    run = pipeline.Run(tmp_path, intake.discover(tmp_path, CH), workers=2, say=lambda *a: None)
    run.base = tmp_path
    prepare.step_reuse(run)                                  # three notebooks, two workers: the full factory
    assert len(_Factory.started) == 2 and not _Factory.started[1].lean


def test_a_factory_is_waited_for_a_few_times_as_long_as_it_took_before(tmp_path):
    """The patience of the preflight: PATIENCE_FACTOR times the latest start of a factory
    of the same kind in this course folder, PATIENCE_FLOOR at least, PATIENCE without one."""
    run = pipeline.Run(tmp_path, [], say=lambda *a: None)
    (tmp_path / ".grading").mkdir()
    run.zygote = type("Z", (), {"lean": True})()
    assert prepare.patience(run) == prepare.PATIENCE
    (tmp_path / ".grading" / prepare.FACTORY).write_text(json.dumps({"lean": 3.0, "full": 0.5}))
    assert prepare.patience(run) == 3 * 3.0
    run.zygote.lean = False
    assert prepare.patience(run) == prepare.PATIENCE_FLOOR


def test_the_similarity_findings_start_before_the_factory_is_waited_for(tmp_path, monkeypatch):
    """The class report's similarity findings need submitted/ alone: a class's preflight step
    starts the process that makes them (at the lowest priority) before it waits for the kernel
    factory, whose imports leave the other core idle, once per run; the autograde step does not
    start a second, and the report step waits for the one started. A small run's findings run at
    the usual priority: started there, they would slow its factory, so they wait for autograde."""
    from coursekit.grade import autograde, results
    rel, src = grading_course(tmp_path, CH)
    for s in ("one", "two", "three"):
        submit(tmp_path, s, CH, make_submission(rel, src, None))
    order: list[str] = []

    class Proc:
        pid, exitcode = 0, 0

        def is_alive(self):
            return False

    def aside(run):
        order.append("similarity")
        return Proc()

    class Factory:
        lean = False

        def wait_at_most(self, patience, say):   # the similarity process is on its way by now
            order.append(f"factory waited for, the findings {'started' if run.similarity_start else 'not started'}")
            return None                       # no factory: the step goes on without one

    monkeypatch.setattr(results, "similarity_aside", aside)
    monkeypatch.setattr(prepare.pre, "run_probes", lambda requests, at_once: [None] * len(requests))
    run = pipeline.Run(tmp_path, intake.discover(tmp_path, CH), workers=2, say=lambda *a: None)
    run.base, run.zygote = tmp_path, Factory()
    (tmp_path / ".grading" / "keys").mkdir(parents=True)
    prepare.step_preflight(run)
    run.similarity_start.join(5)
    assert sorted(order) == ["factory waited for, the findings started", "similarity"]
    autograde.start_similarity_aside(run)      # what the autograde step calls: nothing new
    results.stop_similarity_aside(run)
    assert order.count("similarity") == 1 and run.similarity_aside is None
    order.clear()                              # a small run (a worker for each notebook): after the factory
    run = pipeline.Run(tmp_path, intake.discover(tmp_path, CH, "one"), workers=2, say=lambda *a: None)
    run.base, run.zygote = tmp_path, Factory()
    prepare.step_preflight(run)
    assert order == ["factory waited for, the findings not started"]


def test_the_fork_servers_warm_up_page_is_made_and_leaves_no_trace_on_a_real_page(tmp_path):
    """coursekit.grade.page_warm makes one page as the fork servers import it (a failure there
    would only cost time, silently: so it is asked here whether it made it); a feedback page
    made after it is byte for byte the page a process that never warmed up makes."""
    import subprocess

    from coursekit.grade import forkserver
    assert "coursekit.grade.page_warm" in forkserver.MODULES
    code = ("import sys, nbformat\n"
            "{warm}\n"
            "from coursekit.grade import feedback\n"
            "nb = nbformat.read(sys.argv[1], as_version=4)\n"
            "sys.stdout.write(feedback.page(nb, None, 'ch01_attention'))\n")
    release = str(Path(__file__).resolve().parent.parent / "release" / CH / f"{CH}.ipynb")
    pages = []
    for warm in ("from coursekit.grade import page_warm\nassert page_warm.warm()", ""):
        out = subprocess.run([sys.executable, "-c", code.format(warm=warm), release], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent.parent, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        pages.append(out.stdout)
    assert len(pages[0]) > 10_000 and pages[0] == pages[1]


def test_a_kernels_report_of_what_it_imported_is_read_as_a_plain_file_of_known_names_only(tmp_path):
    """The factory reads each ended kernel's report (coursekit.grade.zygote.REPORT) with its
    own rights, in a folder the student's code could write: a link, a pipe or a name outside
    ONLY_SOME counts for nothing, and reading never blocks."""
    import os
    import threading

    from coursekit.grade import zygote
    report = tmp_path / zygote.REPORT
    assert zygote._read_report(str(tmp_path)) == [] and zygote._read_report(None) == []
    report.write_text("os\n/etc/shadow\ntorch._dynamo\n")
    assert zygote._read_report(str(tmp_path)) == ["torch._dynamo"]
    report.write_text("x" * 2000 + "\ntorch._dynamo")      # past the first kilobyte: not read
    assert zygote._read_report(str(tmp_path)) == []
    report.unlink()
    (tmp_path / "elsewhere").write_text("torch._dynamo")
    report.symlink_to(tmp_path / "elsewhere")
    assert zygote._read_report(str(tmp_path)) == []
    report.unlink()
    os.mkfifo(report)
    done = threading.Event()
    threading.Thread(target=lambda: (zygote._read_report(str(tmp_path)), done.set()), daemon=True).start()
    assert done.wait(5), "reading a pipe blocked the factory"
    # the kernel's side writes only what it imported itself, never through a link
    report.unlink()
    zygote._report(str(report), [])
    assert not report.exists()
    report.symlink_to(tmp_path / "target")
    zygote._report(str(report), ["torch._dynamo"])
    assert not (tmp_path / "target").exists()
    report.unlink()
    zygote._report(str(report), ["torch._dynamo"])
    assert zygote._read_report(str(tmp_path)) == ["torch._dynamo"]


def test_a_full_factory_imports_what_the_chapters_kernels_imported_before_and_a_lean_one_does_not(tmp_path):
    from coursekit.grade import kernels
    rel, src = grading_course(tmp_path, CH)
    state = tmp_path / ".grading"
    state.mkdir()
    assert "torch._dynamo" not in kernels.factory_imports(tmp_path, state, [CH])
    kernels.remember_needs(state, ["ch02_causal_mask"], ["torch._dynamo"])
    assert "torch._dynamo" not in kernels.factory_imports(tmp_path, state, [CH])   # another chapter's
    kernels.remember_needs(state, [CH], ["torch._dynamo"])
    assert "torch._dynamo" in kernels.factory_imports(tmp_path, state, [CH])
    assert "torch._dynamo" not in kernels.factory_imports(tmp_path, state, [CH], lean=True)
    assert json.loads((state / kernels.FACTORY).read_text())[kernels.NEEDS] == {
        "ch02_causal_mask": ["torch._dynamo"], CH: ["torch._dynamo"]}


def test_a_kept_full_factory_that_learned_a_module_still_fits_the_runs_that_need_it(tmp_path):
    """What a kept full factory imported for its kernels (kept.learned) joins the imports it is
    kept with, which the next run's factory_imports must be within for it to be adopted; a lean
    one imports nothing for them and notes nothing."""
    from types import SimpleNamespace

    from coursekit.grade import kept
    base = tmp_path / "kept"
    base.mkdir()
    (base / kept.STATE).write_text(json.dumps({"factory": {"key": "k", "lean": False, "imports": ["torch"]}}))
    run = SimpleNamespace(base=base, base_kept=True, keys=SimpleNamespace(run="k"),
                          zygote=SimpleNamespace(kept=True, lean=False))
    kept.learned(run, ["torch._dynamo"])
    assert json.loads((base / kept.STATE).read_text())["factory"]["imports"] == ["torch", "torch._dynamo"]
    (base / kept.STATE).write_text(json.dumps({"factory": {"key": "k", "lean": True, "imports": ["torch"]}}))
    run.zygote.lean = True
    kept.learned(run, ["torch._dynamo"])
    assert json.loads((base / kept.STATE).read_text())["factory"]["imports"] == ["torch"]


def test_a_small_run_imports_nbgrader_while_its_notebooks_are_graded_and_a_class_leaves_it_to_the_lane():
    """The seal check step reads the gradebook in the grader's own process: a run whose
    notebooks each have a worker starts that import (0.7 s) as autograde starts, on the core
    that waits, instead of after its last notebook; a class's lane imports it itself."""
    import subprocess
    code = ("import sys\nfrom types import SimpleNamespace as N\nfrom coursekit.grade import autograde\n"
            "run = N(jobs=[1] * {n}, workers=2)\nt = autograde.import_nbgrader_aside(run)\n"
            "print(t is not None and t.name, end=' ')\nt and t.join()\nprint('nbgrader.api' in sys.modules)")
    for n, expected in ((1, "nbgrader-import True"), (2, "nbgrader-import True"), (3, "False False")):
        out = subprocess.run([sys.executable, "-c", code.format(n=n)], capture_output=True, text=True, check=True,
                             cwd=str(Path(__file__).resolve().parent.parent)).stdout.strip()
        assert out == expected, (n, out)


# ------------------------------------------------------------------ a class graded once, then one student

@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A class of three graded once (the whole chapter), as `make grade` leaves it."""
    if not SANDBOX:
        pytest.skip(f"no sandbox here: {WHY}")
    root = tmp_path_factory.mktemp("small")
    rel, src = grading_course(root, CH)
    for s in ("s0", "s1", "s2"):
        submit(root, s, CH, make_submission(rel, src, None))
    pipeline.grade(root, chapter=CH, quiet=True)
    return root, rel, src


@pytest.mark.autograde
def test_a_one_notebook_regrade_reads_only_it_again_and_leaves_the_other_rows_as_they_were(graded, monkeypatch):
    import nbformat
    root, rel, src = graded
    before = _rows(root)
    read = []
    real = nbformat.read
    monkeypatch.setattr(nbformat, "read", lambda fp, *a, **k: (
        read.append(Path(fp)) if isinstance(fp, (str, Path)) else None) or real(fp, *a, **k))
    submit(root, "s1", CH, make_submission(rel, src, WRONG))            # s1 hands in a new version
    jobs = pipeline.grade(root, chapter=CH, student="s1", quiet=True)
    assert [(j.student, j.reused) for j in jobs] == [("s1", False)]
    assert auto_scores(root, CH, "s1")["test_softmax"] == 0 < auto_scores(root, CH, "s0")["test_softmax"]
    after = _rows(root)
    assert after["s0"] == before["s0"] and after["s2"] == before["s2"]
    assert after["s1"] != before["s1"]
    graded_read = {p.parent.parent.name for p in read if "autograded" in p.parts}
    assert graded_read == {"s1"}, f"the report read again the graded notebooks of {graded_read}"


@pytest.mark.autograde
def test_a_one_notebook_run_does_not_wait_for_a_factory_slow_to_start(graded, monkeypatch):
    """A factory that is not ready long after its start (a hung import, a machine far busier
    than before) is not waited for: the notebook's kernels start cold, and it is graded as
    by a factory (before: up to two minutes of waiting, then cold kernels all the same)."""
    from coursekit.grade import sandbox
    root, rel, src = graded
    (root / ".grading" / prepare.FACTORY).write_text(json.dumps({"lean": 1.0, "full": 1.0}))
    slow = [sys.executable, "-c", "import time; time.sleep(600)"]
    monkeypatch.setattr(sandbox, "zygote_command", lambda *a, **k: slow)
    submit(root, "s2", CH, make_submission(rel, src, WRONG))
    jobs = pipeline.grade(root, chapter=CH, student="s2", quiet=True)
    waited = json.loads((root / ".grading" / "timings.json").read_text())["kernel factory start (waiting)"]
    assert waited < prepare.PATIENCE_FLOOR + 3, f"waited {waited} s for the factory"
    assert [(j.student, j.ok) for j in jobs] == [("s2", True)] and not jobs[0].flags, jobs
    assert auto_scores(root, CH, "s2")["test_softmax"] == 0 < auto_scores(root, CH, "s0")["test_softmax"]
    with contextlib.suppress(FileNotFoundError):
        assert "zygote: ready" not in (root / ".grading" / "logs" / "zygote.log").read_text()
    assert reuse.same_key(root, root / ".grading", jobs[0])     # its result is kept as any other


def test_starting_the_grader_builds_no_grammar_it_does_not_use():
    """Every process that reads a notebook imports nbformat, hence jsonschema; from 4.24 on,
    jsonschema imports rfc3987-syntax, which builds a Lark grammar at import (1.7 s of each
    start of the grader, of nbgrader and of Jupyter's server, on these 2 cores). The pinned
    jsonschema does not: the grader's command line starts without it, in well under a second."""
    import subprocess
    import time
    code = "import sys, coursekit.cli; print(sorted(m for m in ('rfc3987_syntax', 'lark') if m in sys.modules))"
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    took = time.monotonic() - started
    assert out.stdout.strip() == "[]", out.stdout
    assert took < 5, f"importing the grader's command line took {took:.1f} s"


# ------------------------------------------------------------------ the factory kept for the next run

def _alive(pid: int) -> bool:
    from coursekit.grade import kept
    return kept._alive(pid)


def _gone_within(pid: int, seconds: float) -> bool:
    import time
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.autograde
def test_the_next_run_of_a_folder_forks_from_the_factory_the_last_one_kept(tmp_path, capsys, monkeypatch):
    """A run keeps its factory, idle, for the next run of the same folder: that run's kernels
    are forked at once and the chapter its kernels passed the preflight for is not preflighted
    again (its score is the one a fresh factory gives); its nbgrader commands come from the
    fork server the run before left. Grading code that changed, or --let-go, ends what was
    kept; left alone, it ends by itself once idle that long."""
    import time

    from coursekit.base import forkd
    from coursekit.grade import kept
    if not SANDBOX:
        pytest.skip(f"no sandbox here: {WHY}")
    rel, src = grading_course(tmp_path, CH)
    submit(tmp_path, "one", CH, make_submission(rel, src, None))
    base = kept.base_for(tmp_path)
    monkeypatch.setattr(kept, "BUSY_S", 0)     # the runs here follow one another: none is in another's middle
    served = []
    real = forkd.start_command
    monkeypatch.setattr(forkd, "start_command", lambda path, target, payload, *a: (
        served.append(payload[0] if isinstance(payload, list) else target), real(path, target, payload, *a))[1])

    def state() -> dict:
        return json.loads((base / kept.STATE).read_text())
    try:
        pipeline.grade(tmp_path, chapter=CH, student="one", keep=120)
        first = state()
        assert _alive(first["factory"]["pid"]) and _alive(first["forkd"]["pid"]) and served == []
        assert first["factory"]["ready"] == {CH: f"{first['factory']['key']}:{reuse.chapter_digest(tmp_path, CH)}"}
        assert "stays 2 min, idle, for the next run" in capsys.readouterr().out

        for _ in range(100):                  # the fork server imports nbgrader after the run (seconds)
            if forkd.ping(str(base / "forkd" / "sock")):
                break
            time.sleep(0.2)
        submit(tmp_path, "one", CH, make_submission(rel, src, WRONG))      # a new version, graded again
        pipeline.grade(tmp_path, chapter=CH, student="one", keep=120)
        times = json.loads((tmp_path / ".grading" / "timings.json").read_text())
        assert times["kernel factory start (waiting)"] < 0.05 and times["preflight"] < 0.05, times
        assert "an earlier run kept" in capsys.readouterr().out
        assert "autograde" in served and "export" in served, served
        assert auto_scores(tmp_path, CH, "one")["test_softmax"] == 0
        assert state()["factory"]["pid"] == first["factory"]["pid"] and state()["forkd"] == first["forkd"]

        (tmp_path / "helpers").mkdir(exist_ok=True)           # the grading code changes
        (tmp_path / "helpers" / "added_by_the_instructor.py").write_text("X = 1\n")
        submit(tmp_path, "one", CH, make_submission(rel, src, None))
        served.clear()
        pipeline.grade(tmp_path, chapter=CH, student="one", keep=2)
        times = json.loads((tmp_path / ".grading" / "timings.json").read_text())
        assert times["kernel factory start (waiting)"] > 0.3 and times["preflight"] > 0.05, times
        assert "an earlier run kept" not in capsys.readouterr().out and served == [], served
        for part in ("factory", "forkd"):
            assert _gone_within(first[part]["pid"], 15), f"the {part} kept for the old grading code is still there"
        assert auto_scores(tmp_path, CH, "one")["test_softmax"] > 0
        second = state()
        for part in ("factory", "forkd"):
            assert _gone_within(second[part]["pid"], 20), f"a {part} kept for 2 s is still there long after"
        assert not kept.stop(tmp_path)

        pipeline.grade(tmp_path, chapter=CH, student="one", keep=120, regrade=True)
        third = state()
        assert kept.stop(tmp_path) and not (base / kept.STATE).exists()
        assert _gone_within(third["factory"]["pid"], 15) and _gone_within(third["forkd"]["pid"], 15)
    finally:
        kept.stop(tmp_path)


def test_a_kept_factorys_folder_that_is_not_the_graders_own_is_never_used(tmp_path):
    import os
    import shutil

    from coursekit.grade import kept
    if os.geteuid() != 0:
        pytest.skip("needs root, to make a folder of another user's")
    base = kept.base_for(tmp_path)
    shutil.rmtree(base)
    base.mkdir()
    os.chown(base, 65534, 65534)
    try:
        assert kept.base_for(tmp_path) is None
    finally:
        shutil.rmtree(base)


def test_a_command_from_the_kept_fork_server_ends_as_one_from_the_runs_own(tmp_path):
    """A command forked by the kept fork server gives its exit code, is killed whole when it
    runs past its time, and ends when the grader that asked for it goes (its connection)."""
    import os
    import subprocess
    import time

    from coursekit.base import forkd, runner
    sock = tmp_path / "forkd" / "sock"
    sock.parent.mkdir(mode=0o700)
    env = dict(os.environ, **{forkd.ENV_PATH: json.dumps(sys.path), forkd.ENV_PRELOAD: json.dumps(["json"])})
    server = subprocess.Popen([sys.executable, "-m", "coursekit.base.forkd", str(sock), "30"], env=env,
                              start_new_session=True)
    try:
        for _ in range(100):
            if forkd.ping(str(sock)):
                break
            time.sleep(0.1)
        runner.use_server(str(sock))
        log = tmp_path / "command.log"
        assert runner.run_forked("sys:exit", 3, tmp_path, dict(os.environ), log) == 3
        started = time.monotonic()
        assert runner.run_forked("time:sleep", 60, tmp_path, dict(os.environ), log, timeout=1) is None
        assert time.monotonic() - started < 10
        command = runner.start_forked("time:sleep", 60, tmp_path, dict(os.environ), log)
        assert isinstance(command, forkd.Command) and command.is_alive()
        command.sock.close()                                   # the grader that asked for it is gone
        assert _gone_within(command.pid, 5), "a command outlived the grader that asked for it"
    finally:
        runner.use_server(None)
        server.terminate()
        server.wait(timeout=10)


def test_a_command_whose_grader_goes_before_it_made_its_session_is_ended_too():
    """The kept fork server ends a command whose grader went at once, even before the command
    made its own session (its first step): a child still in its parent's process group."""
    import os
    import socket
    import threading
    import time

    from coursekit.base import forkd
    pid = os.fork()
    if pid == 0:                    # a command that has not called os.setsid yet
        time.sleep(30)
        os._exit(0)
    a, b = socket.socketpair()
    ender = threading.Thread(target=forkd._end, args=(pid, a), daemon=True)
    started = time.monotonic()
    ender.start()
    ender.join(10)
    b.close()
    if ender.is_alive():
        os.kill(pid, 9)
    assert not ender.is_alive() and time.monotonic() - started < 10, \
        "a command forked an instant before its grader went outlived it"


def test_what_another_run_may_be_using_is_not_ended_for_this_one():
    """A kept factory or fork server that does not fit a run is ended only when no other
    run may be in its middle: none of its kernels or commands runs, and it has been idle a while."""
    from coursekit.grade import kept
    assert kept._busy({"pong": 1, "kernels": 1, "idle": 0.0})
    assert kept._busy({"running": 1, "idle": 0.0})
    assert kept._busy({"pong": 1, "kernels": 0, "idle": kept.BUSY_S / 2})
    assert not kept._busy({"pong": 1, "kernels": 0, "idle": kept.BUSY_S + 1})
    assert not kept._busy({"running": 0, "idle": kept.BUSY_S + 1}) and not kept._busy(None)
