#!/usr/bin/env python3
"""The course's front door, for every platform (the Makefile only calls this).

`python course.py help` lists the commands that work in this folder: a clone
of the course has them all, a student pack only lab and env. Each command
first creates the local environment (.venv) when it is missing or when
requirements.txt / pyproject.toml changed, using only the standard library.
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
    "bwrap": ("bubblewrap", ("test", "check", "grade", "serve", "bench"),
              "grading refuses to run unsandboxed without it and the tests that need it are skipped"),
    "chromium": ("chromium", ("test", "check"), "the browser tests (tests/test_browser.py) are skipped"),
    "chromedriver": ("chromium-driver", ("test", "check"), "the browser tests (tests/test_browser.py) are skipped"),
    "pg_ctlcluster": ("postgresql", ("test",), "the PostgreSQL gradebook test (tests/test_postgres.py) is skipped"),
    "npm": ("npm", ("test",), "the JupyterHub test (tests/test_jupyterhub.py) is skipped"),  # its proxy
    # not a program: a font with Chinese glyphs, for what the browser tests see and screenshot
    "font:zh": ("fonts-noto-cjk", ("test", "check"),
                "the browser tests draw Chinese as empty boxes in their screenshots"),
}


def _present(prog: str) -> bool:
    """A program on PATH, or ("font:zh") a font that has Chinese glyphs (fontconfig's list)."""
    import shutil
    if prog.startswith("font:"):
        if not shutil.which("fc-list"):
            return False
        found = subprocess.run(["fc-list", f":lang={prog[5:]}", "family"], capture_output=True, text=True)
        return bool(found.stdout.strip())
    return bool(shutil.which(prog))


def ensure_system_packages(cmd: str = "test") -> None:
    """Install the Debian packages ``cmd`` uses (the grading sandbox; for the
    tests also Chromium, which the browser tests drive, and PostgreSQL and npm
    for the deployment tests), when missing and when
    this is a Debian-like machine where we may (root, apt-get). Elsewhere, say
    what is missing and go on (the tests that need it skip)."""
    import shutil
    wanted = {prog: spec for prog, spec in SYSTEM_PACKAGES.items() if cmd in spec[1]}
    missing = [prog for prog in wanted if not _present(prog)]
    if not missing:
        return
    packages = sorted({wanted[prog][0] for prog in missing})
    if shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        say(f"installing {', '.join(packages)} with apt-get ...")
        quiet = {"DEBIAN_FRONTEND": "noninteractive", **os.environ}
        subprocess.run(["apt-get", "update", "-qq"], env=quiet, check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", *packages], env=quiet, check=False)
        missing = [prog for prog in missing if not _present(prog)]
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


# command -> (arguments, what it does, the paths it needs here): `help` lists
# only the commands whose paths exist, so a student pack shows lab and env.
COMMANDS = {
    "lab": ("", "start JupyterLab on your own workspace (workspace/, copied from release/)", ("release",)),
    "env": ("", "only create the environment (.venv)", ()),
    "instructor-lab": ("", "JupyterLab on the whole course folder, with the formgrader and Create Assignment",
                       ("source", "coursekit")),
    "test": ("[--system | --all]", "the test suite; --system: the deployment's own tests (clusters, JupyterHub, "
             "PostgreSQL, the service, the LMS, a fresh pack); --all: both", ("tests",)),
    "check": ("--chapter CHAPTER [--parts P,...]",
              "everything to pass after editing one chapter, one line per part, with the failures' messages",
              ("tests", "coursekit")),
    "source": ("[CHAPTER...] [--lang en]", "build source/ from notebooks/", ("notebooks", "coursekit")),
    "release": ("[CHAPTER...]", "regenerate release/ from source/", ("source", "coursekit")),
    "grade": ("[--chapter C] [--student S] [--unsandboxed]",
              "grade submitted/: autograde, feedback, grades.csv, report", ("coursekit",)),
    "serve": ("[--root DIR] [--exchange DIR]",
              "grade each submission as it lands in nbgrader's exchange; release its feedback", ("coursekit",)),
    "collect": ("FROM... [--worksheet CSV] [--canvas-url URL --canvas-course ID]",
                "file what an LMS gave you (Canvas, Moodle, a folder or zip) into submitted/", ("coursekit",)),
    "return": ("[--chapter C] [--canvas-url URL --canvas-course ID] [--send]",
               "hand back: Moodle's feedback archives, Canvas comments with page and score", ("coursekit",)),
    "dist": ("", "the student packs (dist/*.zip), one per language", ("coursekit",)),
    "site": ("[CHAPTER...] [--no-run]", "the course as a static website, zh and en (_site/)", ("notebooks", "coursekit")),
    "bench": ("", "the benchmarks (output in bench/results/)", ("bench",)),
    "bench-train": ("--text PATH --seconds N", "the training recipe against nanoGPT's CPU recipe", ("bench",)),
}


def available(cmd: str, root: Path = ROOT) -> bool:
    return cmd in COMMANDS and all((root / need).exists() for need in COMMANDS[cmd][2])


def help_text(root: Path = ROOT) -> str:
    lines = ["usage: python course.py COMMAND   (make COMMAND does the same on Linux/macOS)", ""]
    for cmd, (args, what, _) in COMMANDS.items():
        if available(cmd, root):
            lines.append(f"  {(cmd + ' ' + args).strip():<50} {what}")
    lines += ["", "Each command first creates the environment (.venv) when it is missing."]
    return "\n".join(lines)


def workspace_module(root: Path = ROOT):
    """coursekit/student/workspace.py in a clone of the course; lab_workspace.py in a student pack."""
    import importlib.util
    for path in (root / "coursekit" / "student" / "workspace.py", root / "lab_workspace.py"):
        if path.exists():
            spec = importlib.util.spec_from_file_location("course_workspace", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            return module
    sys.exit(f"[course] the workspace code (coursekit/student/workspace.py or lab_workspace.py) is missing from {root}.")


def lab_args(root_dir: Path, port: int, ip: str, token: str) -> list[str]:
    args = [str(BIN / "jupyter"), "lab", "--no-browser", f"--ip={ip}", f"--port={port}",
            f"--ServerApp.root_dir={root_dir}", f"--IdentityProvider.token={token}",
            "--ServerApp.port_retries=0"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--allow-root")
    return args


def _address(port: int, token: str, ip: str, path: str = "lab") -> str:
    host = "127.0.0.1" if ip in ("0.0.0.0", "") else ip
    return f"http://{host}:{port}/{path}?token={token}"


def student_lab(workspace: Path | None = None, port: int | None = None,
                token: str | None = None) -> tuple[list[str], dict, Path, str]:
    """Bring the student's workspace up to date and return how to start their
    JupyterLab: (arguments, environment, working folder, address)."""
    ws_mod = workspace_module()
    workspace = Path(workspace or os.environ.get("COURSE_WORKSPACE") or ROOT / "workspace").resolve()
    release = ROOT / "release"
    lang = ws_mod.release_language(release)
    first = not workspace.exists()
    changes = ws_mod.sync(release, workspace)
    if first:
        say(f"your workspace: {workspace} (copied from release/; yours to edit, never overwritten)")
    for line in ws_mod.describe([] if first else changes, lang):
        say(line)
    ws_mod.configure(workspace, lang, ws_mod.find_exchange(), ROOT)
    ip = os.environ.get("LAB_IP", "127.0.0.1")
    port = port or free_port(int(os.environ.get("LAB_PORT", "8888")))
    token = token or os.environ.get("LAB_TOKEN") or secrets.token_hex(16)
    return (lab_args(workspace, port, ip, token), ws_mod.lab_environment(workspace, env()), workspace,
            _address(port, token, ip))


def serve(args: list[str], cwd: Path, environ: dict) -> int:
    """Run JupyterLab until it stops; Ctrl+C goes to JupyterLab (which asks
    to confirm), not to this wrapper."""
    proc = subprocess.Popen(args, cwd=cwd, env=environ)
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue


def cmd_lab(argv: list[str]) -> int:
    args, environ, cwd, url = student_lab()
    say("JupyterLab is starting. Open this address in your browser:")
    say(f"    {url}")
    say("Stop it with Ctrl+C.")
    return serve(args + argv, cwd, environ)


def cmd_instructor_lab(argv: list[str]) -> int:
    """JupyterLab on the whole course folder with every nbgrader tool (the
    instructor's own Jupyter configuration, not the students')."""
    ip = os.environ.get("LAB_IP", "127.0.0.1")
    port = free_port(int(os.environ.get("LAB_PORT", "8888")))
    token = os.environ.get("LAB_TOKEN") or secrets.token_hex(16)
    say("JupyterLab on the whole course folder (formgrader: Nbgrader menu; Create Assignment: right sidebar).")
    say(f"    {_address(port, token, ip)}")
    say("Stop it with Ctrl+C.")
    return serve(lab_args(ROOT, port, ip, token) + argv, ROOT, env())


SYSTEM = "system"   # the pytest mark of the deployment's own tests (pyproject.toml)


def test_selection(argv: list[str]) -> list[str]:
    """pytest's arguments for `test [--system | --all] [pytest options]`. Plain `test` is
    the suite: every test but those marked ``system`` (Dask clusters, JupyterHub,
    PostgreSQL, the grading service, the LMS round trip, a student pack installed
    afresh), which `test --system` runs alone and `test --all` with the rest; `.ci/run`
    runs both. Tests named by path or node id, or chosen with -m, run as asked."""
    argv = list(argv)
    tier = "suite"
    for flag in ("--system", "--all"):
        if flag in argv:
            argv.remove(flag)
            tier = flag[2:]
    named = any(a.endswith(".py") or "::" in a or a.rstrip("/") == "tests" or a.startswith("tests/") for a in argv)
    if tier == "system":
        return ["-m", SYSTEM, *argv]
    if tier == "suite" and not named and "-m" not in argv:
        return ["-m", f"not {SYSTEM}", *argv]
    return argv


def cmd_test(argv: list[str]) -> int:
    args = [str(PYTHON), "-m", "pytest", "-n", os.environ.get("TEST_WORKERS", "auto"), "--dist", "loadgroup",
            "-p", "no:cacheprovider", *test_selection(argv)]
    rc = run(args)
    if rc == 5:
        say("pytest collected no tests.")
    return rc


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(help_text())
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd in COMMANDS and not available(cmd):
        here = ", ".join(c for c in COMMANDS if available(c))
        say(f"`{cmd}` is not part of this folder (a student pack has no instructor tools). Commands here: {here}.")
        return 2
    ensure_env()
    if cmd == "lab":
        return cmd_lab(rest)
    if cmd == "instructor-lab":
        return cmd_instructor_lab(rest)
    if cmd in ("test", "check", "grade", "serve"):
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
