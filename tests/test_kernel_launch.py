"""Kernel launches that cannot collide (helpers/lab/private_kernel.py).

The cause of the stalls seen while two processes started kernels at once:
jupyter_client chooses a kernel's TCP ports by binding port 0 and closing the
socket; the kernel binds them later, and any process of the machine can be
handed the same port in between (jupyter_client#487).

- The cause, made certain: another process takes one of a TCP kernel's ports
  between the choice and the kernel's start; that kernel never answers.
- The fix: two processes each start 10 kernels at the same moment
  (``PrivateKernelManager``: IPC sockets in a folder of each kernel's own) and
  run a cell in each; every cell answers, none waits for its time limit, and
  no socket folder is left behind. The same kernels are what Validate starts.
- A grading kernel's launcher dies with the process that started it (a grading
  command killed with its process group does not reach a kernel's own session).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from harness import processes_whose

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 60      # a cell's time limit here; a healthy kernel answers in well under a second once started

LAUNCH = textwrap.dedent('''
    import asyncio, json, os, sys, time
    from helpers.lab.private_kernel import PrivateKernelManager

    async def one(i):
        km = PrivateKernelManager(kernel_name="python3")
        t = time.monotonic()
        await km.start_kernel()
        kc = km.client()
        kc.start_channels()
        out = []
        try:
            await kc.wait_for_ready(timeout=LIMIT)
            reply = await kc.execute_interactive(f"print({i} * 2 + 1)", timeout=LIMIT,
                                                 output_hook=lambda m: out.append(m["content"].get("text", "")))
            ok = reply["content"]["status"] == "ok" and "".join(out).strip() == str(i * 2 + 1)
            err = None
        except Exception as exc:
            ok, err = False, f"{type(exc).__name__}: {exc}"
        finally:
            kc.stop_channels()
            folder = km._private
            await km.shutdown_kernel(now=True)
        return {"i": i, "ok": ok, "error": err, "seconds": time.monotonic() - t, "ip": km.ip,
                "transport": km.transport, "left": os.path.exists(folder)}

    async def main():
        return await asyncio.gather(*(one(i) for i in range(N)))

    go = float(sys.argv[1])
    while time.time() < go:          # both processes start their kernels at this moment
        time.sleep(0.005)
    print(json.dumps(asyncio.run(main())))
''')


def launch_together(tmp_path: Path, processes: int, kernels: int) -> list[list[dict]]:
    script = tmp_path / "launch.py"
    script.write_text(f"LIMIT = {LIMIT}\nN = {kernels}\n" + LAUNCH)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    go = time.time() + 3
    procs = [subprocess.Popen([sys.executable, str(script), str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env, cwd=str(Path(__file__).resolve().parent.parent))
             for _ in range(processes)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=LIMIT * 4)
        assert p.returncode == 0, stderr[-3000:]
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


@pytest.mark.system
def test_two_processes_start_ten_kernels_each_at_once_and_none_waits(tmp_path):
    runs = launch_together(tmp_path, processes=2, kernels=10)
    results = [r for run in runs for r in run]
    assert len(results) == 20
    bad = [r for r in results if not r["ok"]]
    assert not bad, bad
    slow = [r for r in results if r["seconds"] >= LIMIT]
    assert not slow, f"waited for a time limit: {slow}"
    # each kernel on IPC sockets in a folder of its own, removed after it
    assert {r["transport"] for r in results} == {"ipc"}
    folders = [os.path.dirname(r["ip"]) for r in results]
    assert len(set(folders)) == 20 and not any(r["left"] for r in results)


def test_a_tcp_port_taken_between_choice_and_start_leaves_the_kernel_mute(tmp_path):
    """jupyter_client's TCP kernel, with one of its chosen ports taken by another
    process before the kernel starts (what a second process launching kernels can
    do by chance): the kernel never becomes ready. The private IPC kernel has no
    port to take."""
    import asyncio

    from jupyter_client import AsyncKernelManager
    from jupyter_client.connect import LocalPortCache

    thieves = []
    choose = LocalPortCache.find_available_port

    def chosen_then_taken(self, ip):
        port = choose(self, ip)
        if not thieves:                     # the first port chosen (the shell's) goes to another process
            thief = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f'''
                import socket, time
                s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("{ip}", {port})); s.listen(); print("taken", flush=True); time.sleep(60)
            ''')], stdout=subprocess.PIPE, text=True)
            assert thief.stdout.readline().strip() == "taken"
            thieves.append(thief)
        return port

    async def tcp_with_a_stolen_port():
        km = AsyncKernelManager(kernel_name="python3")
        try:
            await km.start_kernel()
            kc = km.client()
            kc.start_channels()
            try:
                await kc.wait_for_ready(timeout=15)
                return "ready"
            except (RuntimeError, TimeoutError) as exc:
                return f"{type(exc).__name__}: {exc}"
            finally:
                kc.stop_channels()
        finally:
            for thief in thieves:
                thief.kill()
                thief.wait()
            if km.has_kernel:
                await km.shutdown_kernel(now=True)
            km.cleanup_connection_file()

    LocalPortCache.find_available_port = chosen_then_taken
    try:
        outcome = asyncio.run(tcp_with_a_stolen_port())
    finally:
        LocalPortCache.find_available_port = choose
    assert thieves, "no port was chosen through jupyter_client's port cache: the test proves nothing"
    assert outcome != "ready", "the kernel answered on a port another process held"


def test_a_cold_kernel_dies_with_the_grading_command_that_started_it(tmp_path):
    """jupyter_client starts a kernel in a session of its own, so killing a grading command
    with its process group (a worker that dies) misses it: a cold, sandboxed kernel stayed
    alive, idle, under init. Its launcher (coursekit.grade.sandbox) now outlives bubblewrap's
    dropped privileges as bubblewrap's parent and takes it down when the command is killed."""
    import signal
    import uuid

    import psutil

    from coursekit.grade.sandbox import sandbox_available
    ok, why = sandbox_available()
    if not ok:
        pytest.skip(f"no sandbox here: {why}")
    mark = uuid.uuid4().hex
    (tmp_path / "ipc").mkdir(mode=0o777)
    (tmp_path / "ipc").chmod(0o777)      # the kernel runs as a uid of its own
    command = textwrap.dedent(f"""
        import os, subprocess, sys, time
        from jupyter_client.connect import write_connection_file
        conn, _ = write_connection_file({str(tmp_path / 'kernel.json')!r}, transport="ipc",
                                        ip={str(tmp_path / 'ipc' / 'kernel')!r})
        env = dict(os.environ, COURSE_ROOT={str(ROOT)!r}, COURSE_SANDBOX="1", COURSE_TEST_MARK={mark!r})
        log = open({str(tmp_path / 'kernel.log')!r}, "w")
        subprocess.Popen([sys.executable, "-m", "coursekit.grade.sandbox", conn], env=env, stdout=log,
                         stderr=log, cwd={str(tmp_path)!r}, start_new_session=True)   # as jupyter_client starts one
        time.sleep(120)
    """)
    grader = subprocess.Popen([sys.executable, "-c", command], cwd=ROOT)

    def marked() -> list:
        return processes_whose("COURSE_TEST_MARK", lambda v: v == mark)

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(
            "coursekit.grade.kernel_boot" in " ".join(p.cmdline()) for p in marked() if p.is_running()):
        time.sleep(0.1)
    time.sleep(3)                  # a kernel that is up stays up
    seen = marked()
    try:
        assert any("kernel_boot" in " ".join(p.cmdline()) for p in seen), \
            f"the kernel did not start or did not stay up: {(tmp_path / 'kernel.log').read_text()[-2000:]}"
        grader.send_signal(signal.SIGKILL)
        grader.wait()
        gone, alive = psutil.wait_procs(seen, timeout=10)
        assert not alive, [" ".join(p.cmdline())[-120:] for p in alive]
    finally:
        grader.kill()
        for p in marked():
            p.kill()


def test_a_kernel_whose_grading_command_is_already_gone_does_not_start(tmp_path):
    """The race behind the kernels left under init: the grading command killed while its
    kernel's launcher was still starting (a worker killed as the notebook began). The
    launcher, finding its parent is no longer the process that launched it (jupyter_client
    names it: JPY_PARENT_PID), ends without starting bubblewrap or a kernel."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()                                   # a launcher that has ended already
    (tmp_path / "kernel.json").write_text("{}")
    env = dict(os.environ, COURSE_ROOT=str(ROOT), COURSE_SANDBOX="1", JPY_PARENT_PID=str(gone.pid))
    run = subprocess.run([sys.executable, "-m", "coursekit.grade.sandbox", str(tmp_path / "kernel.json")],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, (run.returncode, run.stderr[-1500:])
    assert "kernel" not in run.stderr.lower() and "bwrap" not in run.stderr, run.stderr[-1500:]
