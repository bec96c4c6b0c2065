"""Imported once by the grader's fork server (coursekit.base.runner): compile
what every nbgrader command would otherwise compile on first use, so that
each forked command starts with it done.

nbformat compiles its JSON schema into a validator the first time a
notebook is read or written (about 0.2 s a process); the compiled validators
are kept in a module-level table, which forked processes inherit. SQLAlchemy
configures the gradebook's table mappers on the first query, and a new
gradebook gets its schema's revision without starting another process (below).
"""
from __future__ import annotations

import nbformat
from nbformat import validator

for minor in (4, nbformat.v4.nbformat_minor):   # the minors the course's notebooks are written in
    for relax in (False, True):
        validator.get_validator(4, minor, relax_add_props=relax)

# nbgrader's gradebook tables: SQLAlchemy configures its mappers on the first query
import nbgrader.api  # noqa: E402,F401
from sqlalchemy.orm import configure_mappers  # noqa: E402

configure_mappers()


def alembic_head() -> str:
    """The gradebook schema's newest revision, which nbgrader writes into a new
    gradebook. nbgrader asks a separate `alembic heads` process for it (0.7 s
    here); this reads the same migration scripts in this process."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    with nbgrader.api._temp_alembic_ini("sqlite:////tmp/gradebook.db") as ini:
        return ScriptDirectory.from_config(Config(ini)).get_current_head()


nbgrader.api.get_alembic_version = alembic_head
