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


def _prints_a_generator(source: str) -> bool:
    """A cell whose last line is `torch.manual_seed(...)` shows `<torch._C.Generator at 0x…>` under it."""
    import ast
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    last = body[-1] if body else None
    return (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)
            and ast.unparse(last.value.func) in ("torch.manual_seed", "manual_seed"))


def test_no_cell_shows_the_generator_torch_manual_seed_returns():
    import nbformat
    shown = []
    for path in sorted((ROOT / "release").glob("ch*/*.ipynb")):
        for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "code" and _prints_a_generator(cell.source):
                shown.append(f"{path.name} cell {i}")
    assert not shown, f"write `_ = torch.manual_seed(...)` in: {shown}"
    assert _prints_a_generator("import torch\ntorch.manual_seed(0)\n")
    assert not _prints_a_generator("_ = torch.manual_seed(0)\n") and not _prints_a_generator("torch.manual_seed(0)\nx = 1")
