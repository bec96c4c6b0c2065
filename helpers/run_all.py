"""Run All on a chapter whose exercises are not done yet.

An exercise's stub raises ``NotImplementedError``. In a student's own kernel
(never under nbgrader: Validate and grading must fail on it) a cell that runs
into one stops with a line saying which exercise it needs instead of a
traceback, and Run All goes on. A later cell that reads a name such a cell did
not get to make is skipped with a line saying where that name comes from,
rather than running on a stale or missing value, and a cell that reads a name
the answer cell just above should have set says so. Demos that need no
exercise run as usual.

It works as an IPython AST transformer: each cell's statements run inside a
``try``, and its last expression stays the cell's displayed value. Any other
error is raised exactly as before.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from .i18n import t
from .runtime import under_nbgrader

GUARD = "__course_run_all__"
_NUMBERS: dict[str, int] = {}          # exercise name -> its number, filled by checks.exercise


def note_exercise(number: int, names: str) -> None:
    """``checks.exercise(3, "scaled_dot_product_attention")`` tells us the number of a name."""
    for name in re.findall(r"[A-Za-z_]\w*", names):
        _NUMBERS.setdefault(name, number)


def _which(name: str) -> str:
    n = _NUMBERS.get(name)
    if n:
        return t(f"练习 {n}（{name}）", f"exercise {n} ({name})")
    return t(f"{name} 所在的练习", f"the exercise of {name}")


def _zh_space(text: str) -> str:
    """A space before a Latin word that follows Chinese text."""
    return f" {text}" if text[:1].isascii() else text


# ------------------------------------------------------------------ what a cell reads and writes

def _names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names the cell binds at top level, names it reads from outside).
    Imported names are left out of the first: an import has run when a stub
    raises further down."""
    imported: set[str] = set()

    def scope(nodes) -> tuple[set[str], set[str]]:
        stores, loads = set(), set()
        todo = list(nodes)
        while todo:
            node = todo.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                if not isinstance(node, ast.Lambda):
                    stores.add(node.name)
                    todo.extend(node.decorator_list)
                a = node.args
                params = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if x}
                todo.extend(d for d in a.defaults + a.kw_defaults if d is not None)
                inner_stores, inner_loads = scope(node.body if isinstance(node.body, list) else [node.body])
                loads |= inner_loads - inner_stores - params
            elif isinstance(node, ast.ClassDef):
                stores.add(node.name)
                todo.extend(node.bases + node.decorator_list)
                loads |= scope(node.body)[1]
            elif isinstance(node, ast.Name):
                (loads if isinstance(node.ctx, ast.Load) else stores).add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound = {(a.asname or a.name).split(".")[0] for a in node.names}
                stores |= bound
                imported.update(bound)
            else:
                todo.extend(ast.iter_child_nodes(node))
        return stores, loads

    stores, loads = scope(tree.body)
    return stores - imported, loads - stores


def _cell_file(filename: str) -> bool:
    """A frame of code written in a cell (the kernel compiles each cell to its own file)."""
    return filename.startswith("<") or Path(filename).parent.name.startswith("ipykernel_")


def _stub_names(exc: BaseException) -> tuple[str | None, str | None]:
    """(what the cell called, the stub that raised), both written in cells;
    None when the cell itself raised (an answer cell's stub)."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code)
        tb = tb.tb_next
    written = [c for c in frames[1:] if _cell_file(c.co_filename) and not c.co_name.startswith("<")]
    owner = [c.co_qualname.split(".")[0] for c in written]
    return (owner[0], owner[-1]) if owner else (None, None)


def _raised_in_a_cell(exc: BaseException) -> bool:
    """Raised by code written in a cell (a stub), not by a library (PyTorch
    raises NotImplementedError for an operation a device lacks)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and _cell_file(tb.tb_frame.f_code.co_filename)


# ------------------------------------------------------------------ the kernel side

class Guard:
    """Per-kernel state: which names wait on an unfinished exercise."""

    def __init__(self):
        self.waiting: dict[str, str] = {}      # name -> the exercise it waits for (as shown)
        self.stores: set[str] = set()
        self.running = False
        self.unanswered = False                # the cell just before stopped at an answer cell's stub
        self.after_unanswered = False

    def begin(self, stores, loads) -> bool:
        self.stores = set(stores)
        self.after_unanswered, self.unanswered = self.unanswered, False
        missing = sorted(n for n in loads if n in self.waiting)
        if missing and not under_nbgrader():
            needs = sorted({self.waiting[n] for n in missing})
            shown = t("、", ", ").join(f"`{n}`" for n in missing[:4]) + (" …" if len(missing) > 4 else "")
            print(t(f"… 跳过：这个单元格要用 {shown}，{'它们' if len(missing) > 1 else '它'}由上面一个没能运行完的"
                    f"单元格产生。先完成{_zh_space('、'.join(needs))}，再从那里往下运行。",
                    f"… skipped: this cell needs {shown}, made by a cell above that could not finish. "
                    f"Finish {', '.join(needs)} first, then run on from there."))
            for name in self.stores:               # what this cell would have made waits too
                self.waiting[name] = needs[0]
            self.running = False
            return False
        self.running = True
        return True

    def stopped(self, exc: Exception) -> bool:
        """Say which exercise the cell needs; False (raise it as usual) for an
        error that is not an unfinished stub."""
        if under_nbgrader():
            return False
        if isinstance(exc, NameError):
            return self._unanswered_name(exc)
        if not _raised_in_a_cell(exc):
            return False
        self.running = False
        called, stub = _stub_names(exc)
        if stub is None:
            self.unanswered = True
            print(t("… 还没有完成：这是一个练习的答案单元格，把 raise NotImplementedError() 换成你的答案，再运行它。",
                    "… not done yet: this is an exercise's answer cell. Replace raise NotImplementedError() "
                    "with your answer, then run it again."))
            return True
        needs = _which(stub if stub in _NUMBERS or called not in _NUMBERS else called)
        via = t(f"（{called} 用到的 {stub} 仍然是 raise NotImplementedError()）",
                f" ({called} uses {stub}, which still raises NotImplementedError())") if called != stub else ""
        print(t(f"… 还没有完成：这个单元格要用到{_zh_space(needs)}{via}。完成之后再运行这个单元格。",
                f"… not done yet: this cell needs {needs}{via}. Run this cell again once it is done."))
        for name in self.stores:
            self.waiting[name] = needs
        return True

    def _unanswered_name(self, exc: NameError) -> bool:
        """A name the answer cell just above should have set (it still holds its stub)."""
        if not self.after_unanswered or not getattr(exc, "name", None):
            return False
        self.running = False
        print(t(f"… 还没有完成：上面的答案单元格还没有写（{exc.name} 还没有定义）。写好并运行它，再运行这个单元格。",
                f"… not done yet: the answer cell above is not written yet ({exc.name} is not defined). "
                "Write and run it, then run this cell again."))
        return True

    def finish(self, last=None):
        """The cell's last expression (its displayed value), when the cell got that far."""
        if not self.running:
            return None
        if last is not None:
            try:
                value = last()
            except (NotImplementedError, NameError) as exc:
                if not self.stopped(exc):
                    raise
                return None
        else:
            value = None
        for name in self.stores:
            self.waiting.pop(name, None)
        self.running = False
        return value


class GuardCells(ast.NodeTransformer):
    """cell  ->  if guard.begin(<binds>, <reads>):
                     try: <cell but its last expression>
                     except (NotImplementedError, NameError) as e:
                         if not guard.stopped(e): raise
                 guard.finish(lambda: <last expression>)"""

    def visit(self, node):
        if not isinstance(node, ast.Module) or not node.body or _leave_alone(node):
            return node
        body = list(node.body)
        last = body.pop() if isinstance(body[-1], ast.Expr) else None
        stores, loads = _names(node)
        guard = ast.Name(GUARD, ast.Load())

        def call(method, *args):
            return ast.Call(ast.Attribute(guard, method, ast.Load()), list(args), [])

        names = [ast.List([ast.Constant(n) for n in sorted(s)], ast.Load()) for s in (stores, loads)]
        handled = call("stopped", ast.Name("__course_exc__", ast.Load()))
        caught = ast.Tuple([ast.Name("NotImplementedError", ast.Load()), ast.Name("NameError", ast.Load())],
                           ast.Load())
        handler = ast.ExceptHandler(caught, "__course_exc__",
                                    [ast.If(ast.UnaryOp(ast.Not(), handled), [ast.Raise()], [])])
        run = [ast.Try(body, [handler], [], [])] if body else [ast.Pass()]
        shown = (ast.Lambda(ast.arguments([], [], None, [], [], None, []), last.value) if last else
                 ast.Constant(None))
        new = [ast.If(call("begin", *names), run, []), ast.Expr(call("finish", shown))]
        for stmt in new:
            ast.copy_location(stmt, node.body[0])
        if last is not None:
            ast.copy_location(new[-1], last)
        out = ast.Module(new, node.type_ignores)
        return ast.fix_missing_locations(out)


def _leave_alone(tree: ast.Module) -> bool:
    """Cells the wrapper would change the meaning of: future imports, top-level await."""
    first = tree.body[0]
    if isinstance(first, ast.ImportFrom) and first.module == "__future__":
        return True
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Await, ast.AsyncFor, ast.AsyncWith, ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    return False


def install() -> bool:
    """In a student's IPython kernel: guard every cell from now on. Does nothing
    under nbgrader, outside IPython, or when already installed."""
    if under_nbgrader():
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or any(isinstance(x, GuardCells) for x in shell.ast_transformers):
        return False
    shell.user_ns[GUARD] = Guard()
    shell.user_ns_hidden[GUARD] = None
    shell.ast_transformers.append(GuardCells())
    return True
