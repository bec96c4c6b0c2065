"""Grading-only support for hidden tests (never shipped to students)."""
