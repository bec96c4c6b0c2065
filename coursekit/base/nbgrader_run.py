"""Run nbgrader the way the course needs it: from the course root, with the
environment's bin/ on PATH (nbgrader calls `alembic` when it creates a
gradebook)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def env_with_bin(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.setdefault("PYTHONUTF8", "1")
    if extra:
        env.update(extra)
    return env


def nbgrader(args: list[str], course_root: Path, check: bool = True, capture: bool = False,
             extra_env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "nbgrader", *args]
    return subprocess.run(cmd, cwd=course_root, env=env_with_bin(extra_env), check=check,
                          capture_output=capture, text=True)
