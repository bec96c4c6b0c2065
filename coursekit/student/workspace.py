"""The student's own workspace: JupyterLab serves a copy of release/, never release/ itself.

``sync`` copies what is new in the release into the workspace and records, in
``.course/copies.json`` inside the workspace, the SHA-256 of the release file
each copy came from and of what a student can change in it (a notebook's cells:
type, source, nbgrader fields). A copy whose cells still equal the release's is
the student's untouched copy, even after JupyterLab opened and saved it (which
rewrites the notebook's metadata), and is brought up to date; any other copy is
the student's work and is never written: a changed release of it arrives beside
it as ``<name>.new-<date>.ipynb``, once per release version. A copy the student
deleted comes back fresh from the release.

``configure`` writes the Jupyter configuration the student's JupyterLab runs
with (``.course/jupyter``, used as ``JUPYTER_CONFIG_DIR``, so an instructor's
own JupyterLab keeps every tool): the formgrader and create-assignment
extensions are off, the assignment list is on only where an exchange is
configured, Validate finds a student nbgrader configuration, and a zh course
starts in Chinese.

Standard library only: ``course.py`` uses this module before the course's
environment exists (a student pack ships it as ``lab_workspace.py``).
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

STATE = ".course"
MANIFEST = f"{STATE}/copies.json"
CONFIG = f"{STATE}/jupyter"
SKIP = {".ipynb_checkpoints", "__pycache__"}
# where nbgrader looks for an exchange when no configuration names one
DEFAULT_EXCHANGES = ("/usr/local/share/nbgrader/exchange", "/srv/nbgrader/exchange")
INSTRUCTOR_PLUGINS = ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                      "@jupyter/nbgrader:course-list")
# JupyterLab's news and update checks: a first start asks nothing ("receive official Jupyter news?")
QUIET_PLUGINS = ("@jupyterlab/apputils-extension:announcements",)
# the course's own Validate (helpers/lab) takes the place of nbgrader's button
COURSE_PLUGINS_OFF = ("@jupyter/nbgrader:validate-assignment",)
COURSE_SERVER = "helpers.lab"
LABEXTENSIONS = ("helpers", "lab", "labextension")   # under the course folder (a clone or a pack)
EXCHANGE_PLUGINS = ("@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:menu")
INSTRUCTOR_SERVER = ("nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list")
EXCHANGE_SERVER = ("nbgrader.server_extensions.assignment_list",)
LOCALES = {"zh": "zh_CN", "en": "en"}
TRANSLATION_SETTINGS = "lab/user-settings/@jupyterlab/translation-extension/plugin.jupyterlab-settings"


@dataclass(frozen=True)
class Change:
    """One thing ``sync`` did: ``kind`` is new, restored, updated or offered
    (a changed release put beside the student's copy, at ``beside``)."""
    kind: str
    path: str
    beside: str | None = None


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def release_files(release: Path) -> list[str]:
    """The files of the release, as paths relative to it (POSIX style)."""
    release = Path(release)
    out = []
    for p in sorted(release.rglob("*")):
        rel = p.relative_to(release)
        if p.is_file() and not SKIP & set(rel.parts):
            out.append(rel.as_posix())
    return out


def load_manifest(workspace: Path) -> dict:
    path = Path(workspace) / MANIFEST
    if path.exists():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data.get("files"), dict):
                return data
        except (ValueError, AttributeError):
            pass
    return {"version": 1, "files": {}}


def _write(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file or an untouched copy, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.part")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def beside_name(path: Path, day: str) -> Path:
    """``ch03_multi_head.ipynb`` -> ``ch03_multi_head.new-2026-12-01.ipynb``
    (``…-2``, ``…-3`` when that name is taken)."""
    for n in range(1, 1000):
        tag = f"new-{day}" + (f"-{n}" if n > 1 else "")
        candidate = path.with_name(f"{path.stem}.{tag}{path.suffix}")
        if not candidate.exists():
            return candidate
    raise FileExistsError(f"too many new versions beside {path}")


def student_digest(data: bytes, name: str) -> str:
    """What the student can change in a file. For a notebook: its cells, in
    order, each with its type, source and nbgrader fields; never the metadata
    or outputs that JupyterLab rewrites when it opens, runs or saves a notebook
    (``metadata.language_info``, execution counts). Other files: their bytes."""
    if name.endswith(".ipynb"):
        try:
            nb = json.loads(data.decode("utf-8"))
            cells = [[c.get("cell_type"), "".join(c.get("source") or []) if isinstance(c.get("source"), list)
                      else c.get("source") or "", (c.get("metadata") or {}).get("nbgrader")]
                     for c in nb.get("cells", [])]
            return "cells:" + hashlib.sha256(json.dumps(cells, sort_keys=True).encode()).hexdigest()
        except (ValueError, UnicodeDecodeError, AttributeError, TypeError):
            pass
    return hashlib.sha256(data).hexdigest()


def _sync_one(rel: str, src: Path, dest: Path, entry: dict | None, day: str) -> tuple[dict, Change | None]:
    """Bring one release file into the workspace; return its manifest entry
    and what was done (None: nothing). A copy is the student's work when what
    the student can change in it (``student_digest``) differs from the release
    it came from; opening and saving a notebook untouched changes nothing."""
    data = src.read_bytes()
    digest, content = hashlib.sha256(data).hexdigest(), student_digest(data, rel)
    fresh = {"release": digest, "content": content}
    if not dest.exists():
        _write(dest, data)
        return fresh, Change("restored" if entry else "new", rel)
    entry = dict(entry or {})
    if digest in (entry.get("release"), entry.get("offered")):
        return entry, None
    mine = dest.read_bytes()
    if hashlib.sha256(mine).hexdigest() == digest:   # already the same bytes: only the record was missing
        return fresh, None
    untouched = (entry.get("content") == student_digest(mine, rel) if entry.get("content")
                 else entry.get("release") == hashlib.sha256(mine).hexdigest())   # a record from before digests
    if untouched:                                   # the student's copy is as released: update it in place
        _write(dest, data)
        return fresh, Change("updated", rel)
    new = beside_name(dest, day)                    # the student's work: the new version goes beside it
    _write(new, data)
    entry.update(offered=digest, beside=new.name)
    return entry, Change("offered", rel, new.relative_to(dest.parent).as_posix())


def sync(release: Path, workspace: Path, day: str | None = None) -> list[Change]:
    """Copy the release into the workspace without overwriting the student's work.
    Returns what changed (an empty list when nothing did: each change is told once)."""
    release, workspace = Path(release), Path(workspace)
    if not release.is_dir():
        raise FileNotFoundError(f"no release folder at {release}")
    day = day or datetime.date.today().isoformat()
    manifest = load_manifest(workspace)
    files, changes = manifest["files"], []
    for rel in release_files(release):
        entry, change = _sync_one(rel, release / rel, workspace / rel, files.get(rel), day)
        files[rel] = entry
        if change:
            changes.append(change)
    _write(workspace / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode("utf-8"))
    return changes


def describe(changes: list[Change], lang: str = "zh") -> list[str]:
    """What to tell the student about ``changes``, one line each, in ``lang``."""
    zh = lang == "zh"
    words = {"new": ("新章节", "new"), "restored": ("已恢复（你删除了它）", "restored (you had deleted it)"),
             "updated": ("已更新（你还没有改动过它）", "updated (you had not changed it)")}
    lines = []
    for c in changes:
        if c.kind == "offered":
            lines.append(f"{c.path}：老师发布了新版本，保存为旁边的 {c.beside}；你的文件没有改动。" if zh else
                         f"{c.path}: a new version was released; it is beside yours as {c.beside} "
                         "(your file is unchanged).")
        else:
            lines.append(f"{c.path}：{words[c.kind][0]}" if zh else f"{c.path}: {words[c.kind][1]}")
    return lines


def release_language(release: Path) -> str:
    """The language the release was built in (its notebooks' ``course.lang``), zh if unknown."""
    for rel in release_files(release):
        if rel.endswith(".ipynb"):
            try:
                meta = json.loads((Path(release) / rel).read_text(encoding="utf-8")).get("metadata", {})
            except ValueError:
                continue
            lang = meta.get("course", {}).get("lang")
            if lang in LOCALES:
                return lang
    return "zh"


def find_exchange(environ: dict | None = None) -> str | None:
    """The nbgrader exchange students use here: ``COURSE_EXCHANGE``, else the
    first of nbgrader's usual exchange folders that exists; None when there is none."""
    environ = os.environ if environ is None else environ
    if environ.get("COURSE_EXCHANGE"):
        return environ["COURSE_EXCHANGE"]
    return next((d for d in DEFAULT_EXCHANGES if os.path.isdir(d)), None)


STUDENT_NBGRADER_CONFIG = '''"""nbgrader configuration for a student's JupyterLab (written by course.py lab)."""
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "transformer"
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True
c.Execute.raise_on_iopub_timeout = False
'''


def configure(workspace: Path, lang: str, exchange: str | None = None, course: Path | None = None) -> Path:
    """Write the student's Jupyter configuration; return its folder (the
    ``JUPYTER_CONFIG_DIR`` of the student's JupyterLab). ``course`` is the
    course folder (a clone or a pack): its helpers/lab gives the course's Validate."""
    cfg = Path(workspace) / CONFIG
    disabled = {name: True for name in INSTRUCTOR_PLUGINS + QUIET_PLUGINS}
    disabled.update({name: not exchange for name in EXCHANGE_PLUGINS})
    servers = {name: False for name in INSTRUCTOR_SERVER}
    servers.update({name: bool(exchange) for name in EXCHANGE_SERVER})
    server_config: dict = {"ServerApp": {"jpserver_extensions": servers}}
    labextensions = Path(course, *LABEXTENSIONS) if course else None
    if labextensions and labextensions.is_dir():
        disabled.update({name: True for name in COURSE_PLUGINS_OFF})
        servers[COURSE_SERVER] = True
        server_config["LabApp"] = {"extra_labextensions_path": [str(labextensions.resolve())]}
    nbgrader = STUDENT_NBGRADER_CONFIG
    if exchange:
        nbgrader += f"c.Exchange.root = {str(exchange)!r}\n"
    files = {"labconfig/page_config.json": json.dumps({"disabledExtensions": disabled}, indent=1),
             "jupyter_server_config.json": json.dumps(server_config, indent=1),
             "nbgrader_config.py": nbgrader}
    for name, text in files.items():
        _write(cfg / name, text.encode("utf-8"))
    settings = cfg / TRANSLATION_SETTINGS
    if not settings.exists():               # the student may pick another language later (Settings ▸ Language)
        _write(settings, json.dumps({"locale": LOCALES.get(lang, "en")}).encode("utf-8"))
    return cfg


def lab_environment(workspace: Path, base: dict | None = None) -> dict:
    """The environment of the student's JupyterLab: its own Jupyter
    configuration, settings and layouts, all inside the workspace."""
    cfg = Path(workspace) / CONFIG
    env = dict(os.environ if base is None else base)
    env.update(JUPYTER_CONFIG_DIR=str(cfg), JUPYTERLAB_SETTINGS_DIR=str(cfg / "lab" / "user-settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(cfg / "lab" / "workspaces"))
    return env


def copy_module(dest: Path) -> Path:
    """Ship this module into a student pack (as ``dest``)."""
    shutil.copy(Path(__file__), dest)
    return Path(dest)
