"""Helpers the course notebooks import: language, checks, plots and widgets.

Everything here is public: it ships to students and gives no answer away.
"""
from .i18n import get_language, set_language, t

__all__ = ["get_language", "set_language", "t"]
