"""Python's ``ast.parse``, safe to call from several threads at once.

On Python 3.11, ``ast.parse`` keeps the depth of the tree it is building in state the
whole interpreter shares; two threads parsing at once (the site builds chapters in
threads, the grader reads notebooks in threads) can find each other's count there and
fail with ``SystemError: AST constructor recursion depth mismatch``. Every parse of the
course goes through :func:`parse`, which lets one thread parse at a time; a parse takes
milliseconds, so the wait costs nothing measurable.
"""
from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """``ast.parse(source)``, one thread at a time (raises SyntaxError as it does)."""
    with _LOCK:
        return ast.parse(source, filename, mode)
