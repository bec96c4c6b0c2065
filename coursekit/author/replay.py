"""Lecture cells that need no student code: replayed, not run, under grading.

The mark
    A code cell of a chapter text (notebooks/chNN_*.md) may carry the tag
    ``replay``::

        ```{code-cell} ipython3
        :tags: [replay]

        inside.scores_figure(...)
        ```

    It says: this lecture cell's output depends on no answer cell, and it
    defines nothing a later cell uses. Under ``nbgrader autograde`` such a cell
    is not run: the output it printed when the course graded its own model
    answer (``replay/<chapter>.json``, one record per language, made by
    ``python course.py replay chNN``) is put in its place
    (coursekit.grade.replay.Execute), so the feedback page shows the
    same output and the kernel's time goes to the cells that depend on the
    student. Under Validate and in the student's own run nothing changes. The
    build strips the tag: source/ and release/ never show it.

What the build refuses (``check``, a BuildError naming the cell and the name)
    - the marked cell reads a name an answer cell defines, directly or through
      a cell that read one (its output would depend on the student);
    - a later cell that is not marked itself reads a name the marked cell
      defines (skipping it would change what a later cell sees); a cell that reads names no analysis can
      list (``globals()``, ``eval``, a magic the parser cannot read) counts as
      reading every name;
    - the marked cell changes an object it did not make (``x.attr = ...``,
      ``x[i] = ...``, an in-place method such as ``x.append``/``x.add_``/
      ``model.train()``), reseeds or draws from the global random generator,
      or declares ``global``;
    - the marked cell is a graded cell, an answer cell, or a cell in one
      language only.

What grading checks again, on the submission (``plan``)
    A lecture cell has no nbgrader metadata, so the student can edit it and
    nbgrader does not restore it. A marked cell is replayed only when its
    source is the course's, letter for letter, and the same analysis run on
    the submitted notebook (where every cell that is not the course's own
    lecture or test cell counts as the student's) finds that it reads nothing
    the student's cells define and that no later cell reads what it defines.
    Otherwise it runs: a student can never smuggle code into a replayed cell,
    nor lose code they wrote there or elsewhere.
"""
from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..base import syntax
from ..base.chapters import LANGS, ROOT, BuildError

MARK = "replay"
EVERYTHING = "*"            # a cell whose reads cannot be listed reads every name
DYNAMIC = {"globals", "locals", "vars", "eval", "exec", "get_ipython", "__import__"}
# methods that change the object they are called on (lists, dicts, sets, tensors, modules, optimisers)
MUTATORS = {"append", "extend", "insert", "remove", "pop", "popitem", "clear", "update", "setdefault",
            "add", "discard", "sort", "reverse", "train", "eval", "load_state_dict", "zero_grad", "step",
            "backward", "register_buffer", "register_parameter", "apply", "to", "cuda", "cpu", "half",
            "float", "double", "requires_grad_", "manual_seed", "seed", "set_state", "set_rng_state"}
RANDOM = {"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "normal",
          "uniform", "bernoulli", "multinomial", "random", "choice", "shuffle", "sample", "permutation"}


@dataclass(frozen=True)
class Names:
    reads: frozenset        # names the cell reads from before it (EVERYTHING: any)
    defines: frozenset      # names it binds at top level (or declares global)
    changes: tuple          # (what, why) for objects it changes that it did not make


def _parse(source: str):
    try:
        return syntax.parse(source)
    except SyntaxError:
        pass
    try:        # IPython's magics and shell escapes, as the kernel would run them
        from IPython.core.inputtransformer2 import TransformerManager
        return syntax.parse(TransformerManager().transform_cell(source))
    except Exception:  # noqa: BLE001 (unreadable: reads and may define anything)
        return None


class _Scope(ast.NodeVisitor):
    """Loads, stores and changes of one statement, with nested scopes' own names set aside."""

    def __init__(self):
        self.loads: set[str] = set()
        self.stores: set[str] = set()
        self.changed: list[tuple[str, str]] = []
        self.dynamic = False

    def visit_Name(self, node):
        (self.loads if isinstance(node.ctx, ast.Load) else self.stores).add(node.id)

    def visit_Global(self, node):
        self.changed.append((", ".join(node.names), "global"))
        self.stores.update(node.names)

    def _base(self, node):
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    def _target(self, target):
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            base = self._base(target)
            if base is not None:
                self.changed.append((base, "assigns into it"))
        elif isinstance(target, (ast.Tuple, ast.List, ast.Starred)):
            for t in (target.elts if not isinstance(target, ast.Starred) else [target.value]):
                self._target(t)

    def visit_Assign(self, node):
        for t in node.targets:
            self._target(t)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._target(node.target)
        if isinstance(node.target, ast.Name):
            self.loads.add(node.target.id)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self._target(node.target)
        self.generic_visit(node)

    visit_Delete = visit_Assign     # ``del x[i]`` changes x as ``x[i] = ...`` does

    def visit_Call(self, node):
        func = node.func
        if isinstance(func, ast.Name) and func.id in DYNAMIC:
            self.dynamic = True
        if isinstance(func, ast.Attribute):
            base = self._base(func.value)
            name = func.attr
            if base is not None and (name in MUTATORS or (name.endswith("_") and not name.startswith("_"))):
                self.changed.append((base, f"calls .{name}()"))
            if name in RANDOM and not any(k.arg == "generator" for k in node.keywords):
                self.changed.append((base or name, f"draws from the global random generator (.{name}())"))
        self.generic_visit(node)

    def _nested(self, node, args=None):
        """A function, lambda, class or comprehension: what it reads from outside."""
        inner = _Scope()
        for child in ast.iter_child_nodes(node):
            inner.visit(child)
        local = set(inner.stores)
        if args is not None:
            local |= {a.arg for a in (args.posonlyargs + args.args + args.kwonlyargs)}
            local |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        globals_declared = {n for c in ast.walk(node) if isinstance(c, ast.Global) for n in c.names}
        self.loads |= (inner.loads - local) | (inner.loads & globals_declared)
        self.stores |= globals_declared
        self.changed += [c for c in inner.changed if c[0] not in local or c[0] in globals_declared]
        self.dynamic |= inner.dynamic

    def visit_FunctionDef(self, node):
        for d in node.decorator_list:
            self.visit(d)
        for d in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit(d)
        self.stores.add(node.name)
        self._nested(ast.Module(body=node.body, type_ignores=[]), node.args)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        self._nested(node.body, node.args)

    def visit_ClassDef(self, node):
        for d in node.bases + node.decorator_list:
            self.visit(d)
        self.stores.add(node.name)
        self._nested(ast.Module(body=node.body, type_ignores=[]))

    def _comprehension(self, node):
        self._nested(node)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_Import(self, node):
        for a in node.names:
            self.stores.add(a.asname or a.name.split(".")[0])

    def visit_ImportFrom(self, node):
        for a in node.names:
            if a.name == "*":
                self.stores.add(EVERYTHING)
            else:
                self.stores.add(a.asname or a.name)


BINDING = (ast.Assign, ast.AnnAssign, ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef,
           ast.ClassDef)


def _targets(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} if node is not None else set()


def _block(stmts, bound: set, acc: dict) -> None:
    """Walk statements in order: a name read before this cell bound it for sure is read
    from outside; a loop's, ``with``'s or handler's name is bound inside its body."""
    for stmt in stmts:
        parts, bodies = [stmt], []
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            parts = [stmt.iter, stmt.target]
            bodies = [(stmt.body, _targets(stmt.target)), (stmt.orelse, set())]
        elif isinstance(stmt, (ast.If, ast.While)):
            parts, bodies = [stmt.test], [(stmt.body, set()), (stmt.orelse, set())]
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            parts = [i.context_expr for i in stmt.items] + [i.optional_vars for i in stmt.items if i.optional_vars]
            bodies = [(stmt.body, set().union(*[_targets(i.optional_vars) for i in stmt.items]))]
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            parts = [h.type for h in stmt.handlers if h.type is not None]
            bodies = [(stmt.body, set()), (stmt.orelse, set()), (stmt.finalbody, set())]
            bodies += [(h.body, {h.name} if h.name else set()) for h in stmt.handlers]
            acc["defines"] |= {h.name for h in stmt.handlers if h.name}
        scope = _Scope()
        for part in parts:
            scope.visit(part)
        if scope.dynamic:
            acc["reads"].add(EVERYTHING)
        acc["reads"] |= scope.loads - bound
        acc["defines"] |= scope.stores
        acc["changes"] += [c for c in scope.changed if c[0] not in bound or c[1] == "global" or "random" in c[1]]
        for body, extra in bodies:
            _block(body, bound | extra, acc)
        if isinstance(stmt, BINDING):      # bound for the rest of the cell only when bound for sure
            bound |= scope.stores


def names(source: str) -> Names:
    """What a cell reads from the cells before it, what it binds, what else it changes."""
    tree = _parse(source)
    if tree is None:
        return Names(frozenset({EVERYTHING}), frozenset({EVERYTHING}), ((EVERYTHING, "cannot be read"),))
    acc = {"reads": set(), "defines": set(), "changes": []}
    _block(tree.body, set(), acc)
    return Names(frozenset(acc["reads"]), frozenset(acc["defines"]), tuple(dict.fromkeys(acc["changes"])))


def _meets(reads: frozenset, names_: set) -> set:
    if not names_:
        return set()
    if EVERYTHING in reads or EVERYTHING in names_:
        return set(names_) | ({EVERYTHING} if EVERYTHING in reads else set())
    return set(reads) & names_


@dataclass(frozen=True)
class Cell:
    """What the analysis needs of one code cell of a notebook in one language."""
    where: str              # how to name it in a message ("cell 12 (line 130)")
    source: str
    student: bool           # an answer cell (or, at grading, any cell that is not the course's)
    marked: bool


def problems(cells: list[Cell]) -> list[tuple[int, str]]:
    """(index into ``cells``, why) for each marked cell the analysis proves wrong."""
    info = [names(c.source) for c in cells]
    found = []
    student_made: set[str] = set()         # names whose value may come from a student's cell
    last_definer: dict[str, int] = {}
    for i, (cell, n) in enumerate(zip(cells, info)):
        if cell.marked:
            bad = _meets(n.reads, student_made)
            if bad:
                found.append((i, f"reads {', '.join(sorted(bad))}, which an answer cell defines "
                                 f"(directly or through a cell that reads one)"))
            for what, why in n.changes:
                found.append((i, f"changes {what}: {why}"))
            if EVERYTHING in n.defines:
                found.append((i, "may define any name (an import *, or code no analysis can read)"))
        # a later cell reading what a marked cell defined (a marked reader is replayed too;
        # at grading, a reader that must run makes its marked source run: coursekit.grade.replay.plan)
        readers = set(last_definer) if EVERYTHING in n.reads else set(n.reads) & set(last_definer)
        for name in sorted(readers) if not cell.marked else ():
            j = last_definer[name]
            found.append((j, f"defines {name}, which a later cell ({cell.where}) reads"))
        if cell.student or _meets(n.reads, student_made):
            student_made |= set(n.defines)
        for name in n.defines:
            if cell.marked:
                last_definer[name] = i
            else:
                last_definer.pop(name, None)
        if EVERYTHING in n.defines and not cell.marked:
            last_definer.clear()
    return sorted(set(found))


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:20]


# ---------------------------------------------------------------- the chapter's side (the build)

def is_marked(cell) -> bool:
    return cell.cell_type == "code" and MARK in (cell.metadata.get("tags") or [])


def strip(nb):
    """Remove the mark from every cell (the build's output never shows it)."""
    for cell in nb.cells:
        tags = cell.metadata.get("tags")
        if tags and MARK in tags:
            tags = [t for t in tags if t != MARK]
            if tags:
                cell.metadata["tags"] = tags
            else:
                del cell.metadata["tags"]
    return nb


def check(nb, refs, name: str) -> None:
    """Refuse (BuildError) a mark the analysis proves wrong, in either language."""
    for cell, ref in zip(nb.cells, refs):
        if is_marked(cell) and ("nbgrader" in cell.metadata or cell.metadata.get("lang")):
            raise BuildError(f"{name}: {ref}: a `{MARK}` mark goes on a shared lecture code cell only "
                             f"(not on a graded, answer or single-language cell)")
    for lang in LANGS:
        picked = [(c, r) for c, r in zip(nb.cells, refs)
                  if c.cell_type == "code" and c.metadata.get("lang", lang) == lang]
        cells = [Cell(str(r), c.source, bool((c.metadata.get("nbgrader") or {}).get("solution")), is_marked(c))
                 for c, r in picked]
        found = problems(cells)
        if found:
            i, why = found[0]
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise BuildError(f"{name}: {cells[i].where}: the `{MARK}` mark is wrong: this cell {why}{more}")


def inputs_hash(nb, index: int) -> str:
    """A fingerprint of what the output of marked cell ``index`` of the build ``nb`` follows
    from in the chapter: its source and the sources of the earlier cells it reads from,
    directly or through another (the helpers' code it calls is not in it)."""
    want = set(names(nb.cells[index].source).reads)
    parts = [nb.cells[index].source]
    for cell in reversed(nb.cells[:index]):
        if cell.cell_type != "code":
            continue
        n = names(cell.source)
        if EVERYTHING in want or set(n.defines) & want or EVERYTHING in n.defines:
            parts.append(cell.source)
            want |= set(n.reads)
    return source_hash("\n\x00".join(parts))


def record_path(chapter: str, course_root: Path | None = None) -> Path:
    return Path(course_root or ROOT) / "replay" / f"{chapter}.json"


def load(chapter: str, course_root: Path | None = None) -> dict:
    path = record_path(chapter, course_root)
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
