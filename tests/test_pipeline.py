"""The grading pipeline's steps one by one, without bubblewrap or a kernel:
typed flags and their rendering, intake on a scratch copy, the seal check
and the verdict tokens, pending points, preflight's verdicts, the stop rule
for infrastructure failures, and the sandbox's view of an environment
reached through a symlink."""
from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from harness import ROOT, grading_course, make_submission

from coursekit.grade import autograde as autograde_step
from coursekit.grade import intake, pipeline, preflight, seal_check, seals
from coursekit.report import score
from coursekit.report.flags import Flag, render_all
from grading import protocol

CH = "ch01_attention"


def _tree(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------ flags

def test_flags_are_typed_and_rendered_in_either_language():
    f = Flag("renamed", "my_homework.ipynb")
    assert f.render("en") == "renamed notebook (my_homework.ipynb); graded under its release name"
    assert "my_homework.ipynb" in f.render("zh") and "改了名" in f.render("zh")
    assert str(Flag("scored_empty", "kernel_died")).startswith("kernel died; scored as empty")
    assert Flag("scored_empty", "kernel_died").render("zh").startswith("内核崩溃")
    assert render_all([Flag("tampering"), Flag("huge_output")], "en") == "tampering detected; huge output (cut)"
    with pytest.raises(ValueError):
        Flag("retry: gradebook busy")


def test_saved_flags_round_trip_and_old_sentences_become_notes():
    flags = [Flag("duplicated_cells", "test_softmax"), Flag("seal_missing", "test_attention")]
    assert [Flag.from_json(json.loads(json.dumps(f.to_json()))) for f in flags] == flags
    old = Flag.from_json("tampering detected")
    assert old.kind == "note" and old.render("zh") == "tampering detected"


# ------------------------------------------------------------------ intake and repair

@pytest.fixture
def course(tmp_path):
    rel, src = grading_course(tmp_path, CH)
    return tmp_path, rel, src


def _submit(root: Path, student: str, nb=None, name: str = f"{CH}.ipynb", text: str | None = None) -> Path:
    d = root / "submitted" / student / CH
    d.mkdir(parents=True, exist_ok=True)
    if text is not None:
        (d / name).write_text(text)
    else:
        nbformat.write(nb, d / name)
    return d


def _grade_ids(nb):
    return [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]


def test_repairs_happen_on_the_scratch_copy_and_submitted_stays_byte_identical(course, tmp_path_factory):
    root, rel, src = course
    full = make_submission(rel, src, None)
    dup = nbformat.from_dict(json.loads(json.dumps(full)))
    i = _grade_ids(dup).index("test_softmax")
    dup.cells.insert(i + 1, nbformat.from_dict(json.loads(json.dumps(dup.cells[i]))))
    deleted = nbformat.from_dict(json.loads(json.dumps(full)))
    deleted.cells = [c for c in deleted.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "test_softmax"]
    _submit(root, "dup", dup)
    _submit(root, "deleted", deleted)
    _submit(root, "renamed", full, name="my_homework.ipynb")
    _submit(root, "broken", text='{"cells": [ not json')
    _submit(root, "empty", text="notes", name="notes.txt")
    before = _tree(root / "submitted")
    scratch = tmp_path_factory.mktemp("scratch")
    jobs = {j.student: j for j in intake.discover(root)}
    for job in jobs.values():
        intake.repair(root, intake.copy_submission(root, scratch, job), job)
    assert _tree(root / "submitted") == before
    kinds = {s: [f.kind for f in j.flags] for s, j in jobs.items()}
    assert kinds == {"dup": ["duplicated_cells"], "deleted": ["restored_cells"], "renamed": ["renamed"],
                     "broken": ["unreadable"], "empty": ["no_notebook"]}
    fixed = {s: nbformat.read(scratch / s / CH / f"{CH}.ipynb", as_version=4) for s in jobs}
    assert _grade_ids(fixed["dup"]).count("test_softmax") == 1
    assert "test_softmax" in _grade_ids(fixed["deleted"])
    release = nbformat.read(root / "release" / CH / f"{CH}.ipynb", as_version=4)
    assert fixed["broken"] == release and fixed["empty"] == release
    assert str(jobs["broken"].flags[0]) == "not a valid notebook (NotJSONError); scored as empty"


def test_the_code_a_chapter_hands_out_is_graded_as_released_whatever_the_submission_holds(course, tmp_path):
    root, rel, src = course
    given = root / "release" / CH / "given_block.py"
    given.write_text("def block(x):\n    return x\n")
    _submit(root, "tampered", make_submission(rel, src, None))
    _submit(root, "without", make_submission(rel, src, None))
    (root / "submitted" / "tampered" / CH / "given_block.py").write_text("def block(x):\n    return 'all points'\n")
    before = _tree(root / "submitted")
    for job in intake.discover(root):
        folder = intake.copy_submission(root, tmp_path, job)
        intake.repair(root, folder, job)
        assert (folder / "given_block.py").read_text() == given.read_text(), job.student
        assert job.flags == []
    assert _tree(root / "submitted") == before


def test_discover_skips_chapters_without_a_source(course):
    root, rel, src = course
    _submit(root, "alice", make_submission(rel, src, None))
    (root / "submitted" / "alice" / "ch99_nothing").mkdir()
    assert [(j.student, j.chapter) for j in intake.discover(root)] == [("alice", CH)]


# ------------------------------------------------------------------ seals and verdict tokens

def _grade(name, auto, max_score=3.0, manual=None):
    return SimpleNamespace(name=name, auto_score=auto, manual_score=manual, max_score=max_score,
                           score=(manual if manual is not None else auto))


def test_a_cell_keeps_its_points_only_with_every_seal_of_its_checks():
    key = b"k" * 32
    checks = {"test_a": ["check_a"], "test_b": ["check_b", "check_c"], "test_c": ["check_d"]}
    texts = {"test_a": "✓ ok " + protocol.seal_token(key, "check_a"),
             "test_b": "✓ ok " + protocol.seal_token(key, "check_b") + " ✓ fake seal ⟦seal:check_c:" + "0" * 32 + "⟧",
             "test_c": "✓ ok " + protocol.seal_token(b"x" * 32, "check_d")}
    grades = [_grade("test_a", 3.0), _grade("test_b", 2.0), _grade("test_c", 1.0), _grade("test_d", 0.0)]
    assert [g.name for g in seals.unsealed(grades, checks, texts, key)] == ["test_b", "test_c"]
    assert [g.name for g in seals.unsealed(grades, checks, texts, None)] == ["test_a", "test_b", "test_c"]


def test_verdicts_are_read_from_tokens_never_from_sentences():
    from grading.core import Bug
    from helpers import set_language
    assert seals.flags_from_outputs("softmax：检测到篡改——之前运行的代码替换了评分依赖的函数。") == []
    text = "x: tampering " + protocol.verdict_token(protocol.TAMPERING) + "\n" + \
        "y: " + protocol.verdict_token(protocol.GRADING_MODULE) + "\nKernel died"
    assert set(seals.flags_from_outputs(text)) == {"kernel_died", "tampering", "grading_module"}
    bug = Bug("sm_no_max", "没有减去最大值", "no max subtracted")
    for lang in ("zh", "en"):
        set_language(lang)
        assert protocol.bugs_in("诊断：" + bug.describe() + " " + bug.describe()) == ["sm_no_max", "sm_no_max"]
    with pytest.raises(ValueError):
        protocol.verdict_token("a sentence")


def test_the_checks_print_a_token_with_each_verdict():
    from grading import core
    from helpers import set_language

    def not_done():
        raise NotImplementedError()

    def borrow():
        return core.close(1.0, 1.0)

    for lang in ("zh", "en"):
        set_language(lang)
        for fn, verdict in ((not_done, protocol.NOT_IMPLEMENTED), (borrow, protocol.GRADING_MODULE)):
            with pytest.raises(core.GradingFailure) as err:
                core.call(fn, what="x")
            assert protocol.verdicts_in(str(err.value)) == {verdict}, str(err.value)
        with pytest.raises(core.GradingFailure) as err:
            with core.forbidden({"softmax"}, "softmax"):
                core.call(lambda: __import__("torch").softmax(__import__("torch").ones(2), 0), what="x")
        assert protocol.verdicts_in(str(err.value)) == {protocol.FORBIDDEN}


def test_huge_outputs_are_cut():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output("stream", text="x" * 300_000)]),
                nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output("stream", text="short")])]
    assert seals.cut_huge_outputs(nb)
    assert len(nb.cells[0].outputs[0].text) == protocol.MAX_OUTPUT_CHARS and nb.cells[1].outputs[0].text == "short"
    assert not seals.cut_huge_outputs(nb)


# ------------------------------------------------------------------ pending points

def _standing(*cells, penalty=0.0):
    return score.Standing("ann", CH, list(cells), penalty=penalty)


def test_one_score_keeps_pending_points_apart_until_graded():
    st = _standing(score.CellScore("test_softmax", 3.0, 3.0, None), score.CellScore("test_attention", 4.0, 0.0, None),
                   score.CellScore("derivation", 3.0, None, None, answer=True))
    assert (st.score, st.max_score, st.auto, st.manual, st.pending, st.final) == (3.0, 10.0, 3.0, 0.0, 3.0, False)
    assert st.line("en") == "3 / 10 points, 3 awaiting grading" and st.line("zh") == "3 / 10 分，3 分待批改"
    assert st.cell("derivation").label("zh") == "待批改（3 分）" and st.status == "awaiting grading"
    graded = _standing(*st.cells[:2], score.CellScore("derivation", 3.0, None, 2.5, answer=True))
    assert graded.final and graded.line("en") == "5.5 / 10 points" and graded.manual == 2.5


def test_an_answer_left_as_released_is_no_answer_not_awaiting_grading():
    """nbgrader scores an answer cell it finds unchanged 0 by itself (auto score 0):
    that is "no answer", final, never points awaiting grading."""
    st = _standing(score.CellScore("test_softmax", 3.0, 0.0, None),
                   score.CellScore("derivation", 3.0, 0.0, None, answer=True))
    assert st.final and st.pending == 0 and st.line("zh") == "0 / 6 分"
    assert st.cell("derivation").status == score.NO_ANSWER
    assert st.cell("derivation").label("en") == "no answer (0 / 3 points)"
    assert st.cell("test_softmax").status == score.AUTO     # a test that scored 0 is a test that failed


def test_a_late_penalty_comes_off_the_one_score():
    st = _standing(score.CellScore("test_softmax", 3.0, 3.0, None), penalty=1.0)
    assert st.score == 2.0 and st.line("en") == "2 / 3 points"


# ------------------------------------------------------------------ preflight and the stop rule

def test_failures_are_classified_from_nbgrader_logs():
    assert preflight.classify("setpriv: failed to execute /c/.venv/bin/python: No such file") == "kernel_start"
    assert preflight.classify("RuntimeError: Kernel died before replying to kernel_info") == "kernel_start"
    assert preflight.classify("nbclient.exceptions.DeadKernelError: Kernel died") == "kernel_died"
    assert preflight.classify("sqlalchemy.exc.OperationalError: could not connect to server") == "gradebook"
    assert preflight.classify("ModuleNotFoundError: No module named 'torch'") == "course_import"
    assert preflight.classify("something else") == "autograde_failed"


def _jobs(*failures):
    jobs = [intake.Job(CH, f"s{i}") for i in range(len(failures))]
    for job, f in zip(jobs, failures):
        job.failure = f
    return jobs


def test_a_run_stops_when_most_notebooks_fail_for_one_machine_reason():
    logs = {f"{CH}__s0": "setpriv: failed to execute /x/.venv/bin/python: No such file or directory"}
    with pytest.raises(preflight.GradingStopped) as err:
        preflight.stop_if_infrastructure(_jobs("kernel_start", "kernel_start", None), logs)
    msg = str(err.value)
    assert "2 of 3 notebooks" in msg and "setpriv: failed to execute" in msg and "fix:" in msg
    assert "Nothing was written" in msg
    # students' own failures, or a minority of machine failures, are scored as usual
    preflight.stop_if_infrastructure(_jobs("kernel_died", "kernel_died", "kernel_died"), {})
    preflight.stop_if_infrastructure(_jobs("kernel_start", None, None), {})


def test_step_autograde_stops_before_scoring_anyone_as_empty(monkeypatch, course):
    root, rel, src = course
    run = pipeline.Run(root, _jobs(None, None, None), say=lambda *a: None)
    run.scratch = root / "scratch"
    (root / ".grading" / "logs").mkdir(parents=True)

    def broken_kernel(run, job):
        run.log(job).write_text("RuntimeError: Kernel died before replying to kernel_info")
        job.failure, job.ok = "kernel_start", False
        return job

    emptied = []
    monkeypatch.setattr(autograde_step, "autograde_one", broken_kernel)
    monkeypatch.setattr(autograde_step, "score_as_empty", lambda run, job: emptied.append(job))
    with pytest.raises(SystemExit, match="stopped before scoring anyone"):
        pipeline.step_autograde(run)
    assert emptied == []


def test_one_notebook_whose_kernel_cannot_start_is_scored_as_empty_the_others_graded(monkeypatch, course):
    root, rel, src = course
    run = pipeline.Run(root, _jobs(None, None, None), say=lambda *a: None)
    (root / ".grading" / "logs").mkdir(parents=True)

    def one_broken(run, job):
        if job.student == "s0":
            run.log(job).write_text("RuntimeError: Kernel died before replying to kernel_info")
            job.failure, job.ok = "kernel_start", False
        else:
            run.graded_path(job).parent.mkdir(parents=True, exist_ok=True)
            run.graded_path(job).write_text("{}")
        return job

    emptied = []
    monkeypatch.setattr(autograde_step, "autograde_one", one_broken)
    monkeypatch.setattr(autograde_step, "score_as_empty", lambda run, job: emptied.append(job.student))
    pipeline.step_autograde(run)
    assert emptied == ["s0"]


def test_probe_runs_the_release_notebooks_first_cell_and_imports_the_checks(course):
    root, _, _ = course
    code = preflight.probe_code(root, CH)
    assert "from helpers import ch01_attention" in code and f"import grading.{CH}" in code
    assert code.rstrip().endswith("print('preflight: ok')")


def _plain_kernel_spec(folder: Path) -> Path:
    """A kernel spec like the pipeline's, without the sandbox (this file needs no bubblewrap)."""
    spec = folder / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f",
                                                           "{connection_file}"], "language": "python",
                                                  "display_name": "probe"}))
    return folder / "kernels"


def test_probes_run_side_by_side_and_report_what_went_wrong(tmp_path):
    """Two chapters' probes overlap in time (each notes when it ran); a failing
    probe returns its error and a silent one its timeout, and neither leaves a kernel."""
    spec = _plain_kernel_spec(tmp_path)
    stamp = "import json, time; a = time.time(); time.sleep(2); open({f!r}, 'w').write(json.dumps([a, time.time()]))\n"

    def probe(name: str, code: str) -> dict:
        (tmp_path / name).mkdir()
        return {"spec_dir": spec, "env": dict(os.environ), "workdir": tmp_path / name, "code": code,
                "log": tmp_path / f"{name}.log", "ipc_ip": str(tmp_path / name / "kernel")}

    ok = [probe(n, stamp.format(f=str(tmp_path / f"{n}.json")) + "print('preflight: ok')") for n in ("a", "b")]
    assert preflight.run_probes(ok, at_once=2) == [None, None]
    (a0, a1), (b0, b1) = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("a", "b"))
    assert a0 < b1 and b0 < a1, "the two probes ran one after the other"

    broken = probe("c", "import torch_that_is_not_there\nprint('preflight: ok')")
    silent = probe("d", "import time; time.sleep(60)")
    why_broken, why_silent = preflight.run_probes([broken, silent], at_once=2, timeout=8)
    assert "ModuleNotFoundError: No module named 'torch_that_is_not_there'" in why_broken
    assert preflight.classify(why_broken) == "course_import"
    assert "did not answer within 8 s" in why_silent
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmdline(pid).count(str(tmp_path))]
    assert left == [], [_cmdline(pid) for pid in left]


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_a_reply_whose_wake_up_was_missed_is_found_within_a_second():
    """The grader's nbgrader polls a kernel's sockets in slices: a poll that
    misses a reply already there (as pyzmq's can while nbclient answers an
    Output widget on the same socket) costs a second, not the cell's 120 s;
    with no reply at all the wait still ends at its timeout."""
    import asyncio
    import time
    from queue import Empty

    from jupyter_client.channels import AsyncZMQSocketChannel

    from helpers.lab import shell_poll

    class Socket:
        def __init__(self, missed: int, there: bool = True):
            self.missed, self.there, self.waited = missed, there, []

        async def poll(self, timeout_ms):
            self.waited.append(timeout_ms)
            if self.missed > 0 or not self.there:   # the wake-up is lost: wait it out
                self.missed -= 1
                await asyncio.sleep(timeout_ms / 1000)
                return 0
            return 1

    class Channel:
        def __init__(self, socket):
            self.socket = socket

        async def _recv(self):
            return {"msg_type": "execute_reply"}

    shell_poll.install()
    get_msg = AsyncZMQSocketChannel.get_msg
    shell_poll.install()
    assert get_msg.in_slices and AsyncZMQSocketChannel.get_msg is get_msg, "a second install wrapped it again"

    sock = Socket(missed=1)
    t = time.monotonic()
    assert asyncio.run(get_msg(Channel(sock), timeout=120)) == {"msg_type": "execute_reply"}
    assert time.monotonic() - t < 3 and max(sock.waited) <= 1000, sock.waited

    sock = Socket(missed=0, there=False)
    t = time.monotonic()
    with pytest.raises(Empty):
        asyncio.run(get_msg(Channel(sock), timeout=1.5))
    assert 1.4 < time.monotonic() - t < 3 and len(sock.waited) >= 2


def _nbgrader_then_say_how_it_polls(payload) -> int:
    from jupyter_client.channels import AsyncZMQSocketChannel

    from coursekit.base import runner
    before = getattr(AsyncZMQSocketChannel.get_msg, "in_slices", False)
    with contextlib.suppress(SystemExit):
        runner.nbgrader_command(["--version"])
    print(f"slices before: {before}, after: {getattr(AsyncZMQSocketChannel.get_msg, 'in_slices', False)}")
    return 0


def test_every_nbgrader_command_of_the_grader_polls_in_slices(tmp_path):
    """nbgrader runs in processes forked from the grader's fork server: the
    command itself puts the slices in place, whatever its process had before."""
    from coursekit.base import runner
    log = tmp_path / "log"
    rc = runner.run_forked(f"{__name__}:_nbgrader_then_say_how_it_polls", None, tmp_path, dict(os.environ), log,
                           timeout=60)
    assert rc == 0 and "slices before: False, after: True" in log.read_text(), log.read_text()


# ------------------------------------------------------------------ the pipeline as a list of steps

def test_the_steps_run_in_their_documented_order():
    names = [n for n, _ in pipeline.STEPS]
    assert names == ["reuse", "kernels", "intake", "repair", "preflight", "gradebook", "autograde", "seal check",
                     "figures", "feedback", "export", "report"]
    assert names.index("preflight") < names.index("gradebook"), "the gradebook is touched only after preflight"
    seen = []
    run = pipeline.Run(Path("/nonexistent"), [], say=lambda *a: None)
    pipeline.run_steps(run, [(n, lambda r, n=n: seen.append((n, r is run))) for n in names])
    assert seen == [(n, True) for n in names] and set(run.clock.times) == set(names)


def test_no_function_of_the_pipeline_is_longer_than_80_lines():
    files = ["grade/pipeline.py", "grade/intake.py", "base/runner.py", "grade/kernels.py", "grade/seals.py",
             "grade/preflight.py", "report/score.py", "report/flags.py", "report/report.py", "grade/sandbox.py",
             "grade/zygote.py", "grade/kernel_boot.py", "cli.py", "base/nbgrader_run.py"]
    long = []
    for name in files:
        for node in ast.walk(ast.parse((ROOT / "coursekit" / name).read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80:
                long.append(f"{name}:{node.name}")
    for node in ast.walk(ast.parse((ROOT / "grading" / "guard.py").read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno >= 80:
            long.append(f"guard.py:{node.name}")
    assert long == []


# ------------------------------------------------------------------ the sandbox and the environment

def _mounts(args):
    out = {}
    for i, a in enumerate(args):
        if a in ("--ro-bind", "--bind", "--symlink"):
            out[args[i + 2]] = (a, args[i + 1])
    return out


def test_an_environment_reached_through_a_symlink_is_linked_inside_the_sandbox(monkeypatch, tmp_path):
    from coursekit.grade import sandbox
    course_root = tmp_path / "course"
    (course_root / "work").mkdir(parents=True)
    os.symlink(os.path.realpath(sys.prefix), course_root / ".venv")
    monkeypatch.setattr(sys, "prefix", str(course_root / ".venv"))
    monkeypatch.setattr(sys, "executable", str(course_root / ".venv" / "bin" / "python"))
    args = sandbox.bwrap_args(str(course_root), str(course_root / "work"), None)
    mounts = _mounts(args)
    assert mounts[str(course_root / ".venv")] == ("--symlink", os.path.realpath(str(course_root / ".venv")))
    hidden = [args[i + 1] for i, a in enumerate(args) if a == "--tmpfs"]
    assert str(course_root) in hidden


def test_an_environment_under_home_is_bound_back(monkeypatch, tmp_path):
    from coursekit.grade import sandbox
    home = tmp_path / "home"
    env = home / "miniconda3" / "envs" / "course"
    (env / "bin").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for name in ("prefix", "base_prefix"):
        monkeypatch.setattr(sys, name, str(env))
    monkeypatch.setattr(sys, "executable", str(env / "bin" / "python"))
    args = sandbox.bwrap_args(str(tmp_path / "course"), str(tmp_path), None)
    assert str(home) in [args[i + 1] for i, a in enumerate(args) if a == "--tmpfs"]
    assert _mounts(args)[str(env)] == ("--ro-bind", str(env))


def test_the_hub_tests_up_front_check_finds_folders_others_cannot_enter(tmp_path):
    from services import closed_folders
    private = tmp_path / "private"
    (private / "course" / ".venv" / "bin").mkdir(parents=True)
    os.chmod(private, 0o700)
    try:
        assert str(private) in closed_folders(private / "course" / ".venv" / "bin" / "python")
        os.chmod(private, 0o755)
        assert str(private) not in closed_folders(private / "course" / ".venv" / "bin" / "python")
    finally:
        os.chmod(private, 0o755)


def test_an_environment_below_a_folder_others_cannot_enter_is_bound_back_through_open_folders(monkeypatch, tmp_path):
    """A kernel runs as its own unprivileged uid: a Python under /root (0700) while
    $HOME is elsewhere would be unreadable to it. The closed folder is hidden and the
    environment bound back below it, with the folders on the way opened (0755)."""
    from coursekit.grade import sandbox
    private = tmp_path / "private"
    base = private / "pyenv" / "3.11"
    (base / "bin").mkdir(parents=True)
    os.chmod(private, 0o700)
    monkeypatch.setattr(sys, "base_prefix", str(base))
    args = sandbox.bwrap_args(str(tmp_path / "course"), str(tmp_path), None)
    assert str(private) in [args[i + 1] for i, a in enumerate(args) if a == "--tmpfs"]
    assert _mounts(args)[str(base)] == ("--ro-bind", str(base))
    opened = [args[i + 2] for i, a in enumerate(args) if a == "--chmod" and args[i + 1] == "0755"]
    assert str(private / "pyenv") in opened
    os.chmod(private, 0o755)
    args = sandbox.bwrap_args(str(tmp_path / "course"), str(tmp_path), None)
    assert str(private) not in [args[i + 1] for i, a in enumerate(args) if a == "--tmpfs"]


# ------------------------------------------------------------------ reruns grade only what changed

class _FakeGradebook:
    """What coursekit.grade.reuse reads of a gradebook: each submission's manual grades and comments."""

    def __init__(self):
        self.manual = {}   # (chapter, student) -> manual score of the derivation cell

    def find_submission_notebook(self, notebook, assignment, student):
        if (assignment, student) not in self.manual:
            raise KeyError("MissingEntry")
        cell = SimpleNamespace(name="derivation", manual_score=self.manual[(assignment, student)], extra_credit=None)
        return SimpleNamespace(grades=[cell], comments=[SimpleNamespace(name="derivation", manual_comment=None)])


def _graded_class(root: Path, rel, src, students=("s0", "s1")):
    """Two submissions with their graded notebook, feedback page and gradebook rows, as a run leaves them."""
    from coursekit.grade import reuse
    gb = _FakeGradebook()
    for s in students:
        _submit(root, s, make_submission(rel, src, None))
        job = intake.Job(CH, s)
        for path in (reuse.graded_path(root, job), reuse.feedback_path(root, job)):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("{}")
        gb.manual[(CH, s)] = None
    return gb


def _sort(root: Path, gb, rules=None):
    from coursekit.grade import reuse
    jobs = intake.discover(root)
    keys = reuse.Keys.of(root, jobs, rules or {"timeout": 600})
    todo, feedback_only, reused = reuse.sort_out(root, root / ".grading", gb, keys, jobs)
    return ([j.student for j in todo], [j.student for j in feedback_only], [j.student for j in reused]), jobs


def _keep_all(root: Path, gb, rules=None):
    from coursekit.grade import reuse
    (root / ".grading").mkdir(exist_ok=True)
    jobs = intake.discover(root)
    keys = reuse.Keys.of(root, jobs, rules or {"timeout": 600})
    for job in jobs:
        job.key = keys.key(root, job)
    return reuse.keep(root, root / ".grading", gb, jobs)


def test_a_result_is_kept_only_while_nothing_it_depends_on_changed(course):
    root, rel, src = course
    gb = _graded_class(root, rel, src)
    assert _sort(root, gb)[0] == (["s0", "s1"], [], []), "nothing recorded yet: everything is graded"
    assert _keep_all(root, gb) == 2
    assert _sort(root, gb)[0] == ([], [], ["s0", "s1"])
    # a late submission: only its student is graded again
    nb = make_submission(rel, src, {"softmax": "def softmax(x, dim=-1):\n    return x\n"})
    nbformat.write(nb, root / "submitted" / "s1" / CH / f"{CH}.ipynb")
    assert _sort(root, gb)[0] == (["s1"], [], ["s0"])
    _keep_all(root, gb)
    # any file of the submission folder counts (a timestamp.txt moves lateness)
    (root / "submitted" / "s0" / CH / "timestamp.txt").write_text("2026-12-01 10:00:00")
    assert _sort(root, gb)[0] == (["s0"], [], ["s1"])
    _keep_all(root, gb)
    # the run's rules (a new time limit) and the chapter's source change every key
    assert _sort(root, gb, {"timeout": 60})[0] == (["s0", "s1"], [], [])
    src_path = root / "source" / CH / f"{CH}.ipynb"
    src_path.write_text(src_path.read_text().replace("softmax", "softmax ", 1))
    assert _sort(root, gb)[0] == (["s0", "s1"], [], [])


def test_changed_grading_code_or_missing_outputs_grade_again(course):
    from coursekit.grade import reuse
    root, rel, src = course
    gb = _graded_class(root, rel, src)
    _keep_all(root, gb)
    (root / "helpers").mkdir()
    (root / "helpers" / "extra.py").write_text("X = 1\n")   # the course folder's own helpers changed
    assert _sort(root, gb)[0] == (["s0", "s1"], [], [])
    _keep_all(root, gb)
    reuse.feedback_path(root, intake.Job(CH, "s0")).unlink()          # a feedback page was deleted
    del gb.manual[(CH, "s1")]                                          # a gradebook that lost a student
    assert _sort(root, gb)[0] == (["s0", "s1"], [], [])


def test_new_manual_grades_make_new_feedback_without_grading_again(course):
    root, rel, src = course
    gb = _graded_class(root, rel, src)
    _keep_all(root, gb)
    gb.manual[(CH, "s1")] = 2.0    # an instructor graded s1's derivation in the formgrader
    (todo, feedback_only, reused), jobs = _sort(root, gb)
    assert (todo, feedback_only, reused) == ([], ["s1"], ["s0"])
    assert all(j.reused for j in jobs)


def test_a_result_after_a_machine_failure_is_not_kept(course):
    from coursekit.grade import reuse
    root, rel, src = course
    gb = _graded_class(root, rel, src)
    (root / ".grading").mkdir()
    jobs = intake.discover(root)
    keys = reuse.Keys.of(root, jobs, {})
    for job in jobs:
        job.key = keys.key(root, job)
    jobs[0].flag("scored_empty", "kernel_died")
    assert reuse.keep(root, root / ".grading", gb, jobs) == 1
    assert not reuse.record_path(root / ".grading", jobs[0]).exists()
    assert reuse.record_path(root / ".grading", jobs[1]).exists()
    jobs[1].flag("notebook_time_limit", 600)   # a loop, or a machine that was too busy: tried again next run
    assert reuse.keep(root, root / ".grading", gb, jobs) == 0
    assert not reuse.record_path(root / ".grading", jobs[1]).exists()


def test_a_new_gradebook_gets_the_schema_revision_alembic_itself_reports():
    """coursekit.base.warm reads the newest migration in-process instead of starting `alembic heads`."""
    import subprocess

    import nbgrader.api

    from coursekit.base import warm
    ini_of = nbgrader.api._temp_alembic_ini
    with ini_of("sqlite:////tmp/gradebook.db") as ini:
        out = subprocess.run([str(Path(sys.executable).parent / "alembic"), "-c", ini, "heads"], capture_output=True,
                             text=True, check=True).stdout
    assert warm.alembic_head() == out.split()[0] and len(out.split()[0]) >= 8
    assert nbgrader.api.get_alembic_version is warm.alembic_head


def test_the_environment_key_is_what_is_installed_not_what_sys_path_holds_now(monkeypatch, tmp_path):
    """Importing setuptools puts its vendored packages on sys.path mid-run; the
    key of the environment must not move with it (every result would be graded again)."""
    from importlib import metadata

    from coursekit.grade import reuse
    before = reuse.environment_digest()
    vendored = tmp_path / "_vendor"
    (vendored / "vendored_thing-1.0.dist-info").mkdir(parents=True)
    (vendored / "vendored_thing-1.0.dist-info" / "METADATA").write_text("Name: vendored_thing\nVersion: 1.0\n")
    monkeypatch.setattr(sys, "path", [*sys.path, str(vendored)])
    assert "vendored_thing" in {d.metadata["Name"] for d in metadata.distributions()}   # on sys.path now
    assert reuse.environment_digest() == before


def test_the_environment_key_moves_with_every_install_upgrade_and_removal(monkeypatch, tmp_path):
    """The key is read from the names of site-packages' metadata folders: an upgrade,
    a new distribution and a removal each give another key; the engine's key leaves
    the course's own distribution and the interpreter's path out."""
    import sysconfig

    from coursekit.grade import engine, reuse
    site = tmp_path / "site-packages"
    (site / "Foo.Bar-1.0.dist-info").mkdir(parents=True)
    (site / "transformer_course-0.1.0.dist-info").mkdir()
    (site / "foo_bar").mkdir()                            # a package's own folder is not a distribution
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: {"purelib": str(site), "platlib": str(site)})
    assert reuse.installed() == ["foo_bar==1.0", "transformer_course==0.1.0"]
    keys = [reuse.environment_digest(), engine.environment_digest()]
    (site / "Foo.Bar-1.0.dist-info").rename(site / "foo_bar-1.1.dist-info")
    keys.append(reuse.environment_digest())
    (site / "six-1.16.0.dist-info").mkdir()
    keys.append(reuse.environment_digest())
    (site / "six-1.16.0.dist-info").rmdir()
    assert reuse.environment_digest() == keys[2]
    assert len(set(keys)) == 4
    before = engine.environment_digest()
    (site / "transformer_course-0.1.0.dist-info").rename(site / "transformer_course-0.2.0.dist-info")
    monkeypatch.setattr(sys, "executable", "/elsewhere/bin/python")
    assert engine.environment_digest() == before           # the course's own code has its own key
    assert reuse.environment_digest() != keys[2]


# ------------------------------------------------------------------ the lane: pages while others are graded

def _lane_run(root: Path, students) -> tuple[pipeline.Run, list]:
    jobs = [intake.Job(CH, s) for s in students]
    run = pipeline.Run(root, jobs, workers=2, say=lambda *a: None)
    for job in jobs:
        run.graded_path(job).parent.mkdir(parents=True, exist_ok=True)
        run.graded_path(job).write_text("{}")
    (root / ".grading" / "logs").mkdir(parents=True, exist_ok=True)
    return run, jobs


def _aside(queue, own_session: bool) -> None:
    from coursekit.base import runner
    if own_session:
        os.setsid()          # as a forked command does
    runner.lowest_priority()
    queue.put(Path("/proc/self/autogroup").read_text())


def test_work_aside_lowers_the_weight_of_its_own_session_only():
    """What runs aside (the feedback lane's pages, the similarity findings) takes the lowest
    priority. Linux weighs sessions (its autogroup) before processes: the session's weight
    is lowered only by a process that leads its own session. Lowered from a process inside
    the grader's session, it slowed the grader, its kernels and whatever else that session
    ran (a test calling the work aside in-process left the suite's own session at nice 19)."""
    import multiprocessing as mp
    group = Path("/proc/self/autogroup")
    if not group.exists():
        pytest.skip("this kernel groups no sessions (no /proc/self/autogroup)")
    before = group.read_text()
    ctx = mp.get_context("fork")
    queue = ctx.SimpleQueue()
    seen = {}
    for own in (False, True):
        proc = ctx.Process(target=_aside, args=(queue, own))
        proc.start()
        proc.join(60)
        seen[own] = queue.get()
    assert group.read_text() == before and seen[False] == before, (before, seen)   # the session's as it was
    if not seen[True].strip():
        pytest.skip("the kernel gave the new session no group of its own (autogroup off or "
                    "out of groups): there was no session weight to lower")
    assert seen[True].split()[-1] == "19", seen
    if before.strip():   # empty where the suite's own session sits in a cpu cgroup, not an autogroup
        assert seen[True].split()[0] != before.split()[0], (before, seen)


def _session_with_a_member(queue, told) -> None:
    """Lead a session of its own at nice 5 and start one more process in it: reports
    (the member's pid, the session's group) and then what the group reads once told."""
    import subprocess

    from coursekit.base import runner
    os.setsid()
    group = Path("/proc/self/autogroup")
    runner.set_session_weight("self", 5)
    member = subprocess.Popen(["sleep", "30"])
    queue.put((member.pid, group.read_text()))
    told.get()
    queue.put(group.read_text())
    member.kill()


def test_usual_priority_leaves_the_weight_of_a_session_the_process_does_not_lead():
    """Giving a process of someone else's session its usual priority back leaves
    that session's weight alone (written there, it would change the grader's own
    session, and a concurrent run's reading of it)."""
    import multiprocessing as mp

    from coursekit.grade import results
    if not Path("/proc/self/autogroup").exists():
        pytest.skip("this kernel groups no sessions (no /proc/self/autogroup)")
    ctx = mp.get_context("fork")
    ask, answer = ctx.SimpleQueue(), ctx.SimpleQueue()
    leader = ctx.Process(target=_session_with_a_member, args=(answer, ask))
    leader.start()
    member, group = answer.get()
    if not group.strip():
        ask.put("read")
        leader.join(30)
        pytest.skip("the kernel gave the new session no group of its own: no session weight to keep")
    assert group.split()[-1] == "5", group
    results.usual_priority(member)
    ask.put("read")
    after = answer.get()
    leader.join(30)
    assert after == group, (group, after)


def _sleeper(seconds: float) -> None:
    os.setsid()   # as a forked command is: its own process group
    import time
    time.sleep(seconds)


def test_the_lane_pages_what_finished_and_leaves_what_it_was_doing_at_the_end_to_the_feedback_step(
        monkeypatch, tmp_path):
    import multiprocessing as mp
    import time
    run, (quick, slow, failed, busy) = _lane_run(tmp_path, ("quick", "slow", "failed", "busy"))
    checked, started, zeroed = [], [], []

    def start(target, payload, root, env, log):
        assert target == "coursekit.grade.feedback:pages_aside"
        who = [s for _, s in payload["notebooks"]]
        proc = mp.get_context("fork").Process(target=_sleeper, args=(0.05 if who == ["quick"] else 60,))
        proc.start()
        started.append((who, proc))
        return proc

    monkeypatch.setattr(pipeline.runner, "start_forked", start)
    def check(run, job, gb):
        checked.append(job.student)
        if job.student == "busy":
            raise RuntimeError("database is locked")

    monkeypatch.setattr(seal_check, "check_seals", check)
    monkeypatch.setattr(seal_check, "_zero_auto_scores", lambda gb, job: zeroed.append(job.student))
    monkeypatch.setattr(pipeline.figures, "fill_graded", lambda run, jobs: None)
    monkeypatch.setattr("nbgrader.api.Gradebook",
                        lambda *a: contextlib.nullcontext(SimpleNamespace(db=SimpleNamespace(rollback=lambda: None))))
    failed.ok, failed.failure = False, "kernel_died"
    with pipeline.Lane(run) as lane:
        lane.put(failed)           # may yet be scored as empty: never taken
        lane.put(busy)             # its seal check cannot finish now: left to the seal check step
        for _ in range(200):
            if "busy" in checked:
                break
            time.sleep(0.05)
        lane.put(quick)
        for _ in range(200):
            if quick.paged:
                break
            time.sleep(0.05)
        lane.put(slow)
        for _ in range(200):
            if len(started) == 2:
                break
            time.sleep(0.05)
        t = time.monotonic()
    assert time.monotonic() - t < 10, "the lane waited for pages it should have stopped"
    assert [who for who, _ in started] == [["quick"], ["slow"]]
    assert started[1][1].exitcode == -9       # stopped, not waited for
    assert (quick.paged, slow.paged, failed.paged, busy.paged) == (True, False, False, False)
    assert checked == ["busy", "quick", "slow"]
    assert (quick.sealed, slow.sealed, busy.sealed) == (True, True, False) and zeroed == []


def test_a_lane_is_only_opened_where_there_is_something_to_overlap(tmp_path):
    run, (job,) = _lane_run(tmp_path, ("one",))
    run.workers = 1
    with pipeline.Lane(run) as lane:
        lane.put(job)
        assert lane.thread is None
    run.workers, run.class_files = 2, False     # the service grades one notebook at a time
    with pipeline.Lane(run) as lane:
        assert lane.thread is None
    assert not job.paged


def _report_priority(path: str) -> None:
    from coursekit.grade import feedback
    os.setsid()   # as a forked command is: its own session, so the group written below is its own

    def pages(payload):
        group = Path("/proc/self/autogroup")
        Path(path).write_text(json.dumps({"policy": os.sched_getscheduler(0), "nice": os.nice(0),
                                          "group": group.read_text() if group.exists() else ""}))
        return 0
    feedback.pages = pages
    os._exit(feedback.pages_aside({}))


def test_pages_made_aside_take_only_the_time_nothing_else_wants(tmp_path):
    import multiprocessing as mp
    out = tmp_path / "priority.json"
    proc = mp.get_context("fork").Process(target=_report_priority, args=(str(out),))
    proc.start()
    proc.join(30)
    seen = json.loads(out.read_text())
    assert proc.exitcode == 0
    assert seen["policy"] == os.SCHED_IDLE and seen["nice"] == 19
    if seen["group"]:
        assert seen["group"].split()[-1] == "19", seen["group"]


# ------------------------------------------------------------------ a new gradebook recorded while the factory starts

def _ahead(tmp_path, failed):
    import threading
    ahead = pipeline.GradebookAhead.__new__(pipeline.GradebookAhead)
    ahead.path, ahead.target = tmp_path / "ahead.db", tmp_path / "course" / "gradebook.db"
    ahead.target.parent.mkdir(exist_ok=True)
    ahead.path.write_bytes(b"recorded ahead")
    ahead.chapters, ahead.failed = ["ch01_attention", "ch02_causal_mask"], failed
    ahead.thread = threading.Thread(target=lambda: None)
    ahead.thread.start()
    return ahead


def test_a_gradebook_recorded_ahead_takes_the_place_only_of_no_gradebook(tmp_path):
    ahead = _ahead(tmp_path, failed=[])
    assert ahead.place(["ch02_causal_mask", "ch01_attention"])
    assert ahead.target.read_bytes() == b"recorded ahead" and not ahead.path.exists()
    # a gradebook that appeared meanwhile (another grader, the formgrader) is never replaced
    ahead = _ahead(tmp_path, failed=[])
    ahead.target.write_bytes(b"someone else's")
    assert not ahead.place(["ch01_attention", "ch02_causal_mask"])
    assert ahead.target.read_bytes() == b"someone else's"
    ahead.target.unlink()
    # nor is one placed whose record failed, or that holds other chapters than the step's
    assert not _ahead(tmp_path, failed=["ch01_attention"]).place(["ch01_attention", "ch02_causal_mask"])
    assert not _ahead(tmp_path, failed=None).place(["ch01_attention", "ch02_causal_mask"])
    assert not _ahead(tmp_path, failed=[]).place(["ch01_attention"])
    assert not ahead.target.exists()


def test_only_a_class_run_records_its_gradebook_ahead_and_never_into_an_existing_one(tmp_path):
    run = pipeline.Run(tmp_path, [pipeline.Job("ch01_attention", "s1")], say=lambda *a: None)
    run.scratch = tmp_path / ".grading" / "scratch" / "run-x" / "submitted"
    (tmp_path / "gradebook.db").write_bytes(b"")
    assert pipeline.GradebookAhead.start(run) is None
    assert not run.ahead   # check() (preflight only) and the service leave it off


def test_autograde_runs_nbgraders_own_steps_with_only_replay_and_batched_gradebook_writes():
    """The course's nbgrader_config.py is nbgrader's autograde steps in nbgrader's order, with
    exactly two replaced by subclasses of the step they replace: the replayed lecture cells and
    the one-commit gradebook writes (a step left out or added would change what is graded)."""
    from importlib import import_module

    from nbgrader.converters.autograde import Autograde
    from traitlets.config.loader import PyFileConfigLoader

    def cls(name: str):
        module, _, attr = name.rpartition(".")
        return getattr(import_module(module), attr)

    stock = Autograde.class_traits()["autograde_preprocessors"].make_dynamic_default()
    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    ours = [cls(n) for n in config.Autograde.autograde_preprocessors]
    assert len(ours) == len(stock)
    replaced = {f"{a.__module__}.{a.__qualname__}" for a, b in zip(ours, stock) if a is not b}
    assert replaced == {"coursekit.grade.replay.Execute", "coursekit.grade.batched.SaveAutoGrades"}, replaced
    assert all(issubclass(a, b) for a, b in zip(ours, stock))


def test_a_graded_kernel_reads_its_options_as_traitlets_would():
    """The forked kernel's short reading of its command line (coursekit.grade.kernel_boot)
    gives what traitlets' full parser gives for what a grading kernel is started with,
    and leaves anything else to that parser."""
    from ipykernel.kernelapp import IPKernelApp

    from coursekit.grade.kernel_boot import graded_app, simple_config
    argv = ["-f", "/tmp/rt1/kernel-1.json", "--HistoryManager.hist_file=:memory:", "--IPKernelApp.log_level=40"]
    full = IPKernelApp()
    full.parse_command_line(argv)
    short = simple_config(argv)
    for section, trait in (("IPKernelApp", "connection_file"), ("HistoryManager", "hist_file"),
                           ("IPKernelApp", "log_level")):
        assert str(short[section][trait]) == str(full.cli_config[section][trait])
    for other in (["--debug"], ["-f"], ["script.py"], ["-f", "k.json", "--ip=1.2.3.4"]):
        assert simple_config(other) is None, other
    app = graded_app(IPKernelApp)()
    app.parse_command_line(argv)
    assert app.connection_file == "/tmp/rt1/kernel-1.json" and app.log_level == 40 and app.extra_args == []


def test_a_graded_kernel_is_seen_to_stop_within_milliseconds(monkeypatch):
    """jupyter_client looks whether a kernel it asked to shut down has gone every 0.1 s;
    the graded kernels' manager (QuickStop) looks every 5 ms, within the same time limits,
    and the course's Execute step gives it to every graded kernel."""
    import asyncio

    from jupyter_client import AsyncKernelManager
    from nbgrader.preprocessors import Execute

    from coursekit.grade import kernel_client
    looks = []

    async def wait(self, pollinterval=0.1):
        looks.append(pollinterval)
    monkeypatch.setattr(AsyncKernelManager, "_async_wait", wait)
    asyncio.run(kernel_client.QuickStop(shutdown_wait_time=2)._async_finish_shutdown())
    asyncio.run(AsyncKernelManager(shutdown_wait_time=2)._async_finish_shutdown())
    assert looks == [kernel_client.STOP_POLL_S] * 2 + [0.1] * 2     # two looks each: before and after SIGTERM
    # the course's Execute step (nbgrader_config.py) builds its kernels' manager from it
    from traitlets.config.loader import PyFileConfigLoader

    from coursekit.grade import replay
    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    assert "coursekit.grade.replay.Execute" in config.Autograde.autograde_preprocessors
    assert replay.Execute(config=config).kernel_manager_class is kernel_client.QuickStop
    assert Execute(config=config).kernel_manager_class is AsyncKernelManager    # nbgrader's own would not
