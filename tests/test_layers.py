"""No circles, every arrow downward: the course's tooling is read as the guide draws it.

``docs/instructor.md`` (its Layout) draws ``coursekit/``'s rooms, each with an
arrow to the rooms it may import. This test reads every import of every module
of ``coursekit/`` (those inside functions too, relative ones resolved) and holds:

- no module imports, directly or through others, a module that imports it back;
- every import goes to the module's own room or to a room its room's arrows
  reach (the arrows are followed through: grade ─► report ─► base lets grade
  import base), and every room is drawn;
- no function of ``coursekit/``, ``helpers/*.py`` or the shared ``grading/``
  modules is longer than 80 lines, and no module of ``coursekit/`` longer than
  600.

Each rule is also run on a small made-up tree that breaks it, so a rule that
could never fail would be seen.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "instructor.md"
FUNCTION_LINES = 80
MODULE_LINES = 600
TOP = "*.py"                     # the room of the modules beside cli.py (the commands)
SHARED_GRADING = ("core", "cases", "guard", "protocol")


# ------------------------------------------------------------------ reading the code

def modules(package: Path) -> dict[str, Path]:
    """Every module of ``package`` by its dotted name (a package by its own name)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports, anywhere in it; ``from
    pkg import mod`` counts as importing ``pkg.mod`` when that is a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [module] + [f"{module}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:      # import a.b.c of a module a.b
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def graph(package: Path) -> dict[str, set[str]]:
    """module -> the modules of ``package`` it imports (packages' empty __init__ left out)."""
    mods = modules(package)
    known = set(mods)
    inits = {n for n, p in mods.items() if p.name == "__init__.py"}
    return {n: imports(n, p, known) - inits for n, p in mods.items() if n not in inits}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def path_between(edges: dict[str, set[str]], start: str, goal: str) -> list[str]:
    """One chain of imports from ``start`` to ``goal`` (to show a cycle)."""
    seen, todo = {start: None}, [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(edges.get(v, ())):
            if w not in seen:
                seen[w] = v
                todo.append(w)
    chain, v = [], goal
    while v is not None:
        chain.append(v)
        v = seen.get(v)
    return chain[::-1]


# ------------------------------------------------------------------ reading the guide

ARROW = re.compile(r"^coursekit/(\*\.py|[a-z_]+/)\s+─►\s+(.+?)(?:\s{2,}.*)?$")


def drawn(text: str) -> dict[str, set[str]]:
    """room -> the rooms its arrow names, from the guide's lines ``coursekit/grade/  ─► report, author``
    (``every room``: all of them; ``nothing``: none)."""
    rooms: dict[str, set[str]] = {}
    for line in text.splitlines():
        m = ARROW.match(line.rstrip())
        if not m:
            continue
        room = m.group(1).rstrip("/")
        names = m.group(2).strip()
        rooms[room] = {"*"} if names == "every room" else \
            set() if names == "nothing" else {n.strip() for n in names.split(",")}
    everyone = set(rooms) - {TOP}
    return {r: (everyone if "*" in a else a) for r, a in rooms.items()}


def reach(arrows: dict[str, set[str]]) -> dict[str, set[str]]:
    """room -> every room it may import: its own, and what its arrows reach, followed through."""
    out = {}
    for room in arrows:
        seen, todo = {room}, [room]
        while todo:
            for nxt in arrows.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        out[room] = seen
    return out


def room_of(module: str) -> str:
    parts = module.split(".")
    return TOP if len(parts) == 2 else parts[1]


def upward(edges: dict[str, set[str]], arrows: dict[str, set[str]]) -> list[str]:
    """Every import that leaves the room's reach, and every module whose room is not drawn."""
    may = reach(arrows)
    found = []
    for module, targets in sorted(edges.items()):
        room = room_of(module)
        if room not in may:
            found.append(f"{module}: its room {room!r} is not drawn in {GUIDE.name}'s Layout")
            continue
        for target in sorted(targets):
            if room_of(target) not in may[room]:
                found.append(f"{module} imports {target}: {room} may import {sorted(may[room])}")
    return found


# ------------------------------------------------------------------ sizes

def _shown(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def long_functions(paths: list[Path], limit: int = FUNCTION_LINES) -> list[str]:
    out = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                lines = node.end_lineno - first + 1
                if lines > limit:
                    out.append(f"{_shown(path)}:{node.lineno} {node.name}: {lines} lines")
    return out


def long_modules(paths: list[Path], limit: int = MODULE_LINES) -> list[str]:
    out = []
    for path in paths:
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            out.append(f"{_shown(path)}: {lines} lines")
    return out


def function_files() -> list[Path]:
    return (sorted((ROOT / "coursekit").rglob("*.py")) + sorted((ROOT / "helpers").glob("*.py"))
            + [ROOT / "grading" / f"{n}.py" for n in SHARED_GRADING if (ROOT / "grading" / f"{n}.py").exists()])


# ------------------------------------------------------------------ the course's tooling

def test_the_guide_draws_the_rooms():
    arrows = drawn(GUIDE.read_text(encoding="utf-8"))
    folders = {p.name for p in (ROOT / "coursekit").iterdir() if (p / "__init__.py").exists()}
    assert folders | {TOP} == set(arrows), (f"the rooms {GUIDE} draws {sorted(arrows)} are not "
                                            f"coursekit/'s folders {sorted(folders)} and {TOP}")
    for room, names in arrows.items():
        assert names <= set(arrows), f"{room} points to a room that is not drawn: {sorted(names - set(arrows))}"


def test_no_module_imports_one_that_imports_it_back():
    edges = graph(ROOT / "coursekit")
    found = cycles(edges)
    shown = [" -> ".join(path_between(edges, c[0], c[1]) + path_between(edges, c[1], c[0])[1:]) + f"  (all: {c})"
             for c in found]
    assert not found, "import cycles:\n  " + "\n  ".join(shown)


def test_every_import_points_down_the_rooms():
    edges = graph(ROOT / "coursekit")
    found = upward(edges, drawn(GUIDE.read_text(encoding="utf-8")))
    assert not found, "imports that do not point down the rooms:\n  " + "\n  ".join(found)


def test_no_function_is_longer_than_80_lines():
    found = long_functions(function_files())
    assert not found, f"functions over {FUNCTION_LINES} lines:\n  " + "\n  ".join(found)


def test_no_module_of_the_tooling_is_longer_than_600_lines():
    found = long_modules(sorted((ROOT / "coursekit").rglob("*.py")))
    assert not found, f"modules over {MODULE_LINES} lines:\n  " + "\n  ".join(found)


# ------------------------------------------------------------------ each rule can fail

GUIDE_TEXT = """\
```
coursekit/*.py    ─► every room     the commands
coursekit/top/    ─► low            a room above
coursekit/low/    ─► nothing        the room below
```
"""


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "coursekit"
    for rel, text in {"__init__.py": "", "top/__init__.py": "", "low/__init__.py": "", **files}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


def test_a_cycle_and_an_upward_import_are_found(tmp_path):
    pkg = _tree(tmp_path, {
        "cli.py": "from .top import a\n",
        "top/a.py": "from ..low import b\n",
        "top/c.py": "def later():\n    from . import d\n",
        "top/d.py": "from coursekit.top import c\n",             # c <-> d, one import inside a function
        "low/b.py": "import json\n\ndef up():\n    from coursekit.top.a import x\n",   # low -> top
    })
    edges = graph(pkg)
    assert edges["coursekit.top.a"] == {"coursekit.low.b"}
    assert cycles(edges) == [["coursekit.low.b", "coursekit.top.a"], ["coursekit.top.c", "coursekit.top.d"]]
    found = upward(edges, drawn(GUIDE_TEXT))
    assert found == ["coursekit.low.b imports coursekit.top.a: low may import ['low']"], found


def test_a_room_not_drawn_is_found(tmp_path):
    pkg = _tree(tmp_path, {"side/__init__.py": "", "side/x.py": "from ..low import y\n", "low/y.py": ""})
    found = upward(graph(pkg), drawn(GUIDE_TEXT))
    assert found == ["coursekit.side.x: its room 'side' is not drawn in instructor.md's Layout"], found


def test_the_arrows_are_followed_through():
    arrows = drawn("coursekit/a/  ─► b\ncoursekit/b/  ─► c, d\ncoursekit/c/  ─► nothing\ncoursekit/d/  ─► nothing\n")
    assert reach(arrows)["a"] == {"a", "b", "c", "d"} and reach(arrows)["c"] == {"c"}


def test_a_long_function_and_a_long_module_are_found(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES - 1))
    ok = tmp_path / "pkg" / "ok.py"
    ok.parent.mkdir()
    ok.write_text(f"def fits():\n{body}\n")                      # exactly 80 lines
    long = tmp_path / "pkg" / "long.py"
    long.write_text(f"@staticmethod\ndef too_long():\n{body}\n" + "\n" * (MODULE_LINES - FUNCTION_LINES))
    assert long_functions([ok]) == []
    assert long_functions([long]) == [f"pkg/long.py:2 too_long: {FUNCTION_LINES + 1} lines"]
    assert long_modules([ok]) == [] and long_modules([long]) == [f"pkg/long.py: {MODULE_LINES + 1} lines"]
