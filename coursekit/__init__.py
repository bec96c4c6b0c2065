"""Instructor tooling: build chapters, generate the student release, grade."""
