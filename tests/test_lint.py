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


# Python 3.11's ast.parse shares its depth count among threads: two parses at once may
# fail with "SystemError: AST constructor recursion depth mismatch" (the site's build
# did, in CI). Threads switched as often as possible and the collector made to yield
# mid-parse bring the race on within a second with a bare ast.parse (every one of five
# tries here); the course's parse must survive it.
RACE = """
import ast, gc, sys, threading, time
from coursekit.base import syntax
parse = {"course": syntax.parse, "bare": ast.parse}[sys.argv[1]]
src = "\\n".join(f"def f{i}(a, b):\\n    return [x * (a + b) for x in range({i}) if x % 3 == {i % 3}]"
                for i in range(300))
errors = []
def work():
    for _ in range(20):
        try:
            parse(src)
        except SystemError as e:
            errors.append(str(e))
            return
gc.callbacks.append(lambda phase, info: time.sleep(0) if phase == "start" else None)
gc.set_threshold(50)
sys.setswitchinterval(1e-6)
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len(errors), errors[:1])
"""


def test_the_course_parses_python_safely_from_several_threads_at_once():
    done = subprocess.run([sys.executable, "-c", RACE, "course"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("0 "), f"parsing from four threads at once failed: {done.stdout}"


def test_the_course_never_calls_ast_parse_itself():
    """Each parse goes through coursekit.base.syntax.parse (see above): a bare
    ast.parse anywhere in the course's code can meet another thread's."""
    import re
    bare = [f"{path.relative_to(ROOT)}:{n}" for folder in ("coursekit", "grading", "helpers")
            for path in sorted((ROOT / folder).rglob("*.py")) if path.name != "syntax.py"
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if re.search(r"\bast\.parse\(", line)]
    assert not bare, "use coursekit.base.syntax.parse instead of ast.parse at: " + ", ".join(bare)
