#!/usr/bin/env python3
"""Write the Jupyter configuration every student's server on the hub starts with.

    python deploy/student_config.py DEST [--lang zh] [--exchange /srv/nbgrader/exchange] [--course DIR]

It is the configuration `make lab` gives a student (coursekit/student/workspace.py
``configure``; ``lab_workspace.py`` in a student pack), laid out as a folder
to put on a server's ``JUPYTER_CONFIG_PATH``:

- ``labconfig/page_config.json``: the instructor's plugins (formgrader, create
  assignment, course list) and nbgrader's Validate button off;
- ``jupyter_server_config.json``: the formgrader's and course list's server
  extensions off, the Assignments tab's on, the course's Validate
  (``helpers.lab``, at ``/user/<name>/course/validate``) on, and the course's
  labextension folder (``<course>/helpers/lab/labextension``) added;
- ``nbgrader_config.py``: the course id and the exchange;
- ``labconfig/default_setting_overrides.json``: JupyterLab's language (Chinese
  for a zh course) as a default each student may still change, since this
  folder is shared and read-only (``make lab`` writes it into the student's
  own settings instead).

The hub gives this folder to students only (docs/deploy.md: a ``JUPYTER_CONFIG_PATH``
per user); the instructor's server keeps every nbgrader tool.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRANSLATION = "@jupyterlab/translation-extension:plugin"


def workspace_module(course: Path):
    """The course's workspace code, found as course.py finds it (coursekit/student/workspace.py
    in a clone, lab_workspace.py in a student pack)."""
    spec = importlib.util.spec_from_file_location("course_front_door", course / "course.py")
    front_door = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(front_door)
    return front_door.workspace_module(course)


def write(dest: Path, lang: str = "zh", exchange: str | None = "/srv/nbgrader/exchange",
          course: Path = HERE.parent) -> Path:
    dest, course = Path(dest), Path(course).resolve()
    ws = workspace_module(course)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = ws.configure(Path(tmp), lang, exchange, course)
        for name in ("labconfig/page_config.json", "jupyter_server_config.json", "nbgrader_config.py"):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(cfg / name, dest / name)
        locale = json.loads((cfg / ws.TRANSLATION_SETTINGS).read_text(encoding="utf-8"))
    overrides = {TRANSLATION: locale}
    (dest / "labconfig" / "default_setting_overrides.json").write_text(json.dumps(overrides, indent=1))
    for path in [dest, *dest.rglob("*")]:   # every student's server reads it
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest", help="the folder to write, e.g. /etc/jupyter/course-student")
    ap.add_argument("--lang", default="zh", choices=("zh", "en"))
    ap.add_argument("--exchange", default="/srv/nbgrader/exchange", help="nbgrader's exchange (Exchange.root)")
    ap.add_argument("--course", default=str(HERE.parent),
                    help="the course folder the servers run from (a clone or a student pack)")
    args = ap.parse_args()
    print(write(Path(args.dest), args.lang, args.exchange, Path(args.course)))


if __name__ == "__main__":
    main()
