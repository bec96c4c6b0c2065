"""Helpers the course notebooks import: language, checks, plots and widgets.

Everything here is public: it ships to students and gives no answer away.
"""
from .i18n import get_language, set_language, t
from .run_all import install as _guard_cells

_guard_cells()                      # Run All goes past exercises not done yet (a student's kernel only)

__all__ = ["get_language", "set_language", "t"]
