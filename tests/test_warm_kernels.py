"""Warm kernels (coursekit.grade.zygote): every notebook's kernel is forked from one
process that imported torch once. What one student's code leaves behind —
module attributes, environment, files, a detached process — must not reach
the next student's kernel, a kernel reaches no network (it talks to the
grader over IPC sockets), and grading gives the same scores as kernels
started one by one."""
from __future__ import annotations

import pytest
from harness import auto_scores, graded_cell_text, grading_course, make_submission, submit

from coursekit.grade import pipeline
from coursekit.grade.sandbox import sandbox_available

CH = "ch01_attention"
SANDBOX, WHY = sandbox_available()
pytestmark = [pytest.mark.skipif(not SANDBOX, reason=f"no sandbox here: {WHY}"), pytest.mark.xdist_group("warm")]

LEAVER = """import os, subprocess, sys, torch, helpers.checks
print('DYNAMO', 'torch._dynamo' in sys.modules)
helpers.checks.PLANTED = 1
torch.PLANTED = 1
torch.manual_seed(1234)
os.environ['PLANTED'] = '1'
for path in ['/tmp/planted', os.path.expanduser('~/planted'), 'planted', os.path.join(os.environ.get('TMPDIR', '/tmp'), 'planted')]:
    try:
        open(path, 'w').write('x')
    except OSError:
        pass
subprocess.Popen(['sleep', '300'], start_new_session=True)
print('left uid', os.getuid())
def softmax(x, dim=-1):
    return x
"""

SNOOPER = """import glob, os, sys, torch, helpers.checks
found = []
if hasattr(helpers.checks, 'PLANTED') or hasattr(torch, 'PLANTED'):
    found.append('module state')
if 'PLANTED' in os.environ:
    found.append('environment')
for pattern in ['/tmp/planted', '/tmp/*/planted', os.path.expanduser('~/planted'), 'planted', '../*/planted',
                '../*/.tmp/planted']:
    found += ['file ' + p for p in glob.glob(pattern)]
for pid in os.listdir('/proc'):
    try:
        if pid.isdigit() and open(f'/proc/{pid}/cmdline', 'rb').read().startswith(b'sleep'):
            found.append('process ' + pid)
    except OSError:
        pass
import socket
try:
    socket.create_connection(('127.0.0.1', PORT), timeout=3).close()
    found.append('network: reached the grader machine on 127.0.0.1:PORT')
except OSError:
    pass
print('LEAK', found) if found else print('CLEAN uid', os.getuid())
print('NBGRADER_EXECUTION =', os.environ.get('NBGRADER_EXECUTION'))
print('DYNAMO', 'torch._dynamo' in sys.modules)
def softmax(x, dim=-1):
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    return e / e.sum(dim=dim, keepdim=True)
"""


# a kernel that trains: backward passes, an optimizer, a multi-threaded matmul. A factory that had
# computed anything before forking would have started PyTorch's worker threads, and this kernel,
# forked without them, would wait for them until the cell's time limit
TRAINER = """import torch
lin = torch.nn.Linear(256, 256)
opt = torch.optim.AdamW(lin.parameters(), lr=1e-3)
for _ in range(3):
    loss = lin(torch.randn(512, 256)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
big = torch.randn(700, 700) @ torch.randn(700, 700)
print('trained', torch.isfinite(loss).item(), tuple(big.shape))
def softmax(x, dim=-1):
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    return e / e.sum(dim=dim, keepdim=True)
"""


# prints whether the kernel it runs in was forked with torch._dynamo already imported
DYNAMO_SEEN = """import sys, torch
print('DYNAMO', 'torch._dynamo' in sys.modules)
def softmax(x, dim=-1):
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    return e / e.sum(dim=dim, keepdim=True)
"""


def _course(tmp_path_factory, name: str):
    root = tmp_path_factory.mktemp(name)
    return (root, *grading_course(root, CH))


def _text(root, student, grade_id):
    return graded_cell_text(root, CH, student, grade_id)


def _scores(root, student):
    return auto_scores(root, CH, student)


@pytest.fixture(scope="module")
def sequential(tmp_path_factory):
    """One worker: a_leaver's kernel ends before b_snooper's is forked from the same zygote;
    c_trainer's optimiser imports torch._dynamo, which the factory had not imported."""
    import socket
    root, rel, src = _course(tmp_path_factory, "warm")
    listener = socket.create_server(("127.0.0.1", 0))   # a service on the grader's machine
    port = listener.getsockname()[1]
    submit(root, "a_leaver", CH, make_submission(rel, src, {"softmax": LEAVER}))
    submit(root, "b_snooper", CH, make_submission(rel, src, {"softmax": SNOOPER.replace("PORT", str(port))}))
    submit(root, "c_trainer", CH, make_submission(rel, src, {"softmax": TRAINER}))
    submit(root, "d_after", CH, make_submission(rel, src, {"softmax": DYNAMO_SEEN}))
    try:
        jobs = pipeline.grade(root, jobs=1, sandbox=True, cell_timeout=30, timeout=240, quiet=True, report=False)
    finally:
        listener.close()
    return root, {j.student: j for j in jobs}


def test_kernels_were_forked_from_the_warm_factory(sequential):
    root, _ = sequential
    log = (root / ".grading" / "logs" / "zygote.log").read_text()
    assert "zygote: ready" in log
    assert "left uid" in _text(root, "a_leaver", "softmax")
    # the kernel gets the environment nbgrader gives it (chapters shorten their demos under autograde)
    assert "NBGRADER_EXECUTION = autograde" in _text(root, "b_snooper", "softmax")


def test_a_forked_kernel_trains_without_waiting_for_threads_it_does_not_have(sequential):
    root, jobs = sequential
    assert "trained True (700, 700)" in _text(root, "c_trainer", "softmax")
    assert jobs["c_trainer"].seconds < 20 and not jobs["c_trainer"].flags, jobs["c_trainer"]
    assert _scores(root, "c_trainer")["test_softmax"] == 3


def _span(root, student):
    """When the student's kernel ran its first cell and answered its last (nbclient's record)."""
    import json
    from datetime import datetime
    nb = json.loads((root / "autograded" / student / CH / f"{CH}.ipynb").read_text())
    ex = [c["metadata"]["execution"] for c in nb["cells"] if c["metadata"].get("execution")]
    return (datetime.fromisoformat(ex[0]["iopub.execute_input"].replace("Z", "+00:00")),
            datetime.fromisoformat(ex[-1]["shell.execute_reply"].replace("Z", "+00:00")))


def test_what_one_kernel_imported_itself_the_factory_imports_for_the_kernels_after_it(sequential):
    """ch01's kernels never import torch._dynamo, so the factory does not either; c_trainer's
    optimiser imports it in its own kernel, which says so as it ends, and the factory imports it
    for every kernel forked after that, and the folder remembers it for ch01's next full factory."""
    import json

    from coursekit.grade import kernels
    from coursekit.grade.zygote import LEARNED
    root, jobs = sequential
    log = (root / ".grading" / "logs" / "zygote.log").read_text()
    # c_trainer's kernel had to import it itself: the factory had not
    assert f"{LEARNED}torch._dynamo (the kernel of uid {pipeline.uid(jobs['c_trainer'])})" in log, log
    assert log.index(LEARNED) < log.index("imported torch._dynamo for the kernels to come"), log
    trained = _span(root, "c_trainer")[1]
    after = {s: _span(root, s)[0] > trained for s in ("a_leaver", "b_snooper", "d_after")}
    assert any(after.values()), after   # (one worker grades them one by one: a, d, c, b)
    for student, later in after.items():
        assert f"DYNAMO {later}" in _text(root, student, "softmax"), (student, after)
    state = root / ".grading"
    assert json.loads((state / kernels.FACTORY).read_text())[kernels.NEEDS] == {CH: ["torch._dynamo"]}
    assert "torch._dynamo" in kernels.factory_imports(root, state, [CH])
    assert "torch._dynamo" not in kernels.factory_imports(root, state, [CH], lean=True)
    assert _scores(root, "d_after")["test_softmax"] == 3


def test_nothing_a_student_leaves_behind_reaches_the_next_kernel(sequential):
    root, _ = sequential
    text = _text(root, "b_snooper", "softmax")
    assert "CLEAN" in text and "LEAK" not in text, text
    assert _scores(root, "b_snooper")["test_softmax"] == 3


def test_each_kernel_has_its_own_uid_and_none_of_its_processes_survive(sequential):
    import re

    from coursekit.grade.zygote import _pids_of
    root, jobs = sequential
    left = int(re.search(r"left uid (\d+)", _text(root, "a_leaver", "softmax")).group(1))
    seen = int(re.search(r"CLEAN uid (\d+)", _text(root, "b_snooper", "softmax")).group(1))
    assert left == pipeline.uid(jobs["a_leaver"]) and seen == pipeline.uid(jobs["b_snooper"]) and left != seen
    assert _pids_of(left) == [], "the leaver's detached process outlived its kernel"


def test_warm_and_cold_kernels_give_the_same_scores_and_neither_has_a_network(tmp_path_factory):
    """The cold kernel (the fallback when the warm factory cannot start) talks
    over IPC sockets too, and has no network either."""
    import socket

    from catalogue.ch01_attention import BUGS
    scores = {}
    listener = socket.create_server(("127.0.0.1", 0))   # a service on the grader's machine
    snooper = SNOOPER.replace("PORT", str(listener.getsockname()[1]))
    try:
        for mode in ("warm", "cold"):
            root, rel, src = _course(tmp_path_factory, mode)
            submit(root, "right", CH, make_submission(rel, src, None))
            submit(root, "buggy", CH, make_submission(rel, src, BUGS[0].replace))
            submit(root, "snooper", CH, make_submission(rel, src, {"softmax": snooper}))
            pipeline.grade(root, sandbox=True, warm=(mode == "warm"), quiet=True, report=False)
            scores[mode] = {s: _scores(root, s) for s in ("right", "buggy")}
            text = _text(root, "snooper", "softmax")
            assert "CLEAN" in text and "network" not in text, f"{mode}: {text}"
    finally:
        listener.close()
    assert scores["warm"] == scores["cold"]
    assert sum(scores["warm"]["right"].values()) > sum(scores["warm"]["buggy"].values())
