#!/usr/bin/env python3
"""The course's front door, for every platform (the Makefile only calls this).

    python course.py lab                 start JupyterLab on the course
    python course.py test                run the whole test suite
    python course.py source [--lang en]  build source/ from notebooks/
    python course.py release             regenerate release/ from source/
    python course.py grade [--chapter C] [--student S] [--unsandboxed]
                                         grade submitted/: autograde, feedback, grades.csv, report
    python course.py dist                the student packs (dist/*.zip), one per language
    python course.py bench               the benchmarks (output in bench/results/)
    python course.py bench-train --text PATH --seconds N
                                         the training recipe against nanoGPT's CPU recipe

Each command first creates the local environment (.venv) when it is missing or
when requirements.txt / pyproject.toml changed, using only the standard library.
"""
from __future__ import annotations

import hashlib
import os
import secrets
import socket
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
WINDOWS = os.name == "nt"
BIN = VENV / ("Scripts" if WINDOWS else "bin")
PYTHON = BIN / ("python.exe" if WINDOWS else "python")
STAMP = VENV / ".course-stamp"


def say(msg: str) -> None:
    print(f"[course] {msg}", flush=True)


def _fingerprint() -> str:
    h = hashlib.sha256()
    for name in ("requirements.txt", "pyproject.toml"):
        h.update((ROOT / name).read_bytes())
    return h.hexdigest()


def ensure_env() -> None:
    """Create .venv and install the pinned requirements plus this project."""
    if sys.version_info < (3, 11):
        sys.exit(f"[course] Python 3.11 or newer is needed; this is {sys.version.split()[0]}.")
    want = _fingerprint()
    if PYTHON.exists() and STAMP.exists() and STAMP.read_text().strip() == want:
        return
    if not PYTHON.exists():
        say(f"creating the environment in {VENV} ...")
        venv.EnvBuilder(with_pip=True, clear=False).create(VENV)
    say("installing the course requirements (first time only; a few minutes) ...")
    pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run(pip + ["-r", str(ROOT / "requirements.txt")], check=True)
    subprocess.run(pip + ["--no-deps", "-e", str(ROOT)], check=True)
    STAMP.write_text(want)
    say("environment ready.")


# program -> (Debian package, the commands that use it, what happens without it)
SYSTEM_PACKAGES = {
    "bwrap": ("bubblewrap", ("test", "grade", "bench"),
              "grading refuses to run unsandboxed without it and the tests that need it are skipped"),
    "chromium": ("chromium", ("test",), "the browser tests (tests/test_browser.py) are skipped"),
    "chromedriver": ("chromium-driver", ("test",), "the browser tests (tests/test_browser.py) are skipped"),
    "pg_ctlcluster": ("postgresql", ("test",), "the PostgreSQL gradebook test (tests/test_postgres.py) is skipped"),
    "npm": ("npm", ("test",), "the JupyterHub test (tests/test_jupyterhub.py) is skipped"),  # its proxy
}


def ensure_system_packages(cmd: str = "test") -> None:
    """Install the Debian packages ``cmd`` uses (the grading sandbox; for the
    tests also Chromium, which the browser tests drive, and PostgreSQL and npm
    for the deployment tests), when missing and when
    this is a Debian-like machine where we may (root, apt-get). Elsewhere, say
    what is missing and go on (the tests that need it skip)."""
    import shutil
    wanted = {prog: spec for prog, spec in SYSTEM_PACKAGES.items() if cmd in spec[1]}
    missing = [prog for prog in wanted if not shutil.which(prog)]
    if not missing:
        return
    packages = sorted({wanted[prog][0] for prog in missing})
    if shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        say(f"installing {', '.join(packages)} with apt-get ...")
        quiet = {"DEBIAN_FRONTEND": "noninteractive", **os.environ}
        subprocess.run(["apt-get", "update", "-qq"], env=quiet, check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", *packages], env=quiet, check=False)
        missing = [prog for prog in missing if not shutil.which(prog)]
    for why in dict.fromkeys(wanted[prog][2] for prog in missing):
        pkgs = sorted({wanted[prog][0] for prog in missing if wanted[prog][2] == why})
        say(f"note: {', '.join(pkgs)} not installed; {why}.")


def env() -> dict:
    e = dict(os.environ)
    e["PATH"] = str(BIN) + os.pathsep + e.get("PATH", "")  # nbgrader runs `alembic` from here
    e["VIRTUAL_ENV"] = str(VENV)
    e.setdefault("PYTHONUTF8", "1")
    e.pop("PYTHONHOME", None)
    return e


def run(args: list[str]) -> int:
    return subprocess.call(args, cwd=ROOT, env=env())


def free_port(preferred: int) -> int:
    for port in [preferred, *range(preferred + 1, preferred + 50)]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    return preferred


def cmd_lab(argv: list[str]) -> int:
    ip = os.environ.get("LAB_IP", "127.0.0.1")
    port = free_port(int(os.environ.get("LAB_PORT", "8888")))
    token = os.environ.get("LAB_TOKEN") or secrets.token_hex(16)
    args = [str(BIN / "jupyter"), "lab", "--no-browser", f"--ip={ip}", f"--port={port}",
            f"--ServerApp.root_dir={ROOT}", f"--IdentityProvider.token={token}",
            "--ServerApp.port_retries=0"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--allow-root")
    host = "127.0.0.1" if ip in ("0.0.0.0", "") else ip
    say("JupyterLab is starting. Open this address in your browser (students: the release/ folder):")
    say(f"    http://{host}:{port}/lab/tree/release?token={token}")
    say("Stop it with Ctrl+C.")
    return run(args + argv)


def cmd_test(argv: list[str]) -> int:
    args = [str(PYTHON), "-m", "pytest", "-n", os.environ.get("TEST_WORKERS", "auto"), "--dist", "loadgroup",
            "-p", "no:cacheprovider", *argv]
    rc = run(args)
    if rc == 5:
        say("pytest collected no tests.")
    return rc


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__)
        return 0
    cmd, rest = argv[0], argv[1:]
    ensure_env()
    if cmd == "lab":
        return cmd_lab(rest)
    if cmd in ("test", "grade"):
        ensure_system_packages(cmd)
    if cmd == "test":
        return cmd_test(rest)
    if cmd == "env":
        return 0
    if cmd == "bench":
        ensure_system_packages(cmd)
        rc = 0
        for script, args in (("bench/grade_throughput.py", []), ("bench/efficiency.py", ["--out", "bench/results"])):
            say(f"benchmark: {script}")
            rc |= run([str(PYTHON), script, *args, *rest])
        return rc
    if cmd == "bench-train":
        args = rest or ["--seconds", "92"]
        return run([str(PYTHON), "bench/train_gpt.py", "--recipe", "both",
                    "--out", "bench/results/bench_train.jsonl", *args])
    return run([str(PYTHON), "-m", "coursekit.cli", cmd, *rest])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
