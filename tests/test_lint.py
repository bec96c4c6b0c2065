"""The code stays tidy: ruff (pyflakes, import order, bugbear; configured in
pyproject.toml) over the whole project is part of the suite."""
from __future__ import annotations

import subprocess
import sys

from harness import ROOT


def ruff(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *args], cwd=cwd,
                          capture_output=True, text=True)


def test_the_project_passes_ruff():
    done = ruff(".")
    assert done.returncode == 0, f"ruff found problems (fix them, or `ruff check --fix .`):\n{done.stdout}{done.stderr}"


def test_ruff_rejects_an_unused_import_and_name(tmp_path):
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "bad.py").write_text("import os\n\n\ndef f():\n    unused = 1\n    return 2\n")
    done = ruff("bad.py", cwd=tmp_path)
    assert done.returncode != 0
    assert "F401" in done.stdout and "F841" in done.stdout, done.stdout
