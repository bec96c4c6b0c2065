"""What an instructor gives ``make collect`` (coursekit.lms.collect): every file of the
archives and folders named (archives inside archives opened in memory, names in UTF-8
or GBK), and the chapter a notebook is, read from its own grade ids."""
from __future__ import annotations

import datetime as dt
import io
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

MAX_MEMBER = 256 * 2**20         # a file inside an archive larger than this is not read
MAX_DEPTH = 4                    # archives inside archives, at most this deep
ARCHIVES = (".zip",)


# ------------------------------------------------------------------ read: every file of what was given

@dataclass
class Entry:
    """One file out of what was given."""
    source: int                      # which FROM it came from (its position)
    inner: str                       # its path inside that FROM, archives included ("a.zip/b.ipynb")
    shown: str                       # how the table names it (the FROM's name first)
    data: bytes | None = None
    mtime: dt.datetime | None = None  # the file's own time as the file system or archive records it (local)
    problem: str | None = None       # why it could not be read: a key of TEXT, its fields below
    fields: dict = field(default_factory=dict)


def _junk(name: str) -> bool:
    """Files no student handed in: macOS resource forks, hidden and editor files."""
    parts = name.split("/")
    return "__MACOSX" in parts or parts[-1].startswith((".", "~$")) or parts[-1] in ("Thumbs.db", "desktop.ini")


def _zip_name(info: zipfile.ZipInfo) -> str:
    """The member's name: UTF-8 when the archive says so; else the bytes as written,
    tried as UTF-8 and then GBK (what Chinese Windows writes) before cp437."""
    if info.flag_bits & 0x800:
        return info.filename
    raw = info.filename.encode("cp437", errors="replace")
    for enc in ("utf-8", "gb18030"):
        try:
            return raw.decode(enc)
        except UnicodeDecodeError:
            continue
    return info.filename


_DRIVE = re.compile(r"^[A-Za-z]:")


def unsafe_part(name: str) -> str | None:
    """What makes an archive member's name a path out of the archive, or None: an
    absolute path (``/etc/x``, ``\\server\\x``), a drive letter (``C:``, ``C:x``) or a
    ``..`` step. Such a name is no file a student handed in (an LMS writes none): it is
    not read, so it can be no one's attempt, whatever the rest of its name says."""
    if name.startswith(("/", "\\")):
        return name[0]
    if _DRIVE.match(name):
        return name[:2]
    return ".." if ".." in re.split(r"[/\\]", name) else None


def read_zip(data: bytes, source: int, prefix: str, shown: str, depth: int = 0) -> list[Entry]:
    """Every file of a zip archive (held in memory), archives inside it opened too."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        return [Entry(source, prefix, shown, problem="bad_zip", fields={"error": str(exc) or type(exc).__name__})]
    out = []
    for info in infos:
        raw = _zip_name(info)
        bad = unsafe_part(raw)
        if bad is not None:
            if not info.is_dir():
                out.append(Entry(source, f"{prefix}/{raw}" if prefix else raw, f"{shown}/{raw}",
                                 problem="unsafe_name", fields={"name": raw, "part": bad}))
            continue
        name = raw.replace("\\", "/")
        if info.is_dir() or _junk(name):
            continue
        inner, where = f"{prefix}/{name}" if prefix else name, f"{shown}/{name}"
        when = dt.datetime(*info.date_time)
        if info.file_size > MAX_MEMBER:
            out.append(Entry(source, inner, where, mtime=when, problem="too_big", fields={"size": info.file_size}))
            continue
        try:
            member = zf.read(info)
        except Exception as exc:  # noqa: BLE001 (a damaged member: CRC, compression, encryption)
            out.append(Entry(source, inner, where, mtime=when, problem="bad_zip",
                             fields={"error": str(exc) or type(exc).__name__}))
            continue
        if name.lower().endswith(ARCHIVES):
            if depth + 1 >= MAX_DEPTH:
                out.append(Entry(source, inner, where, problem="too_deep"))
            else:
                out += read_zip(member, source, inner, where, depth + 1)
        else:
            out.append(Entry(source, inner, where, data=member, mtime=when))
    return out


def _file_time(path: Path) -> dt.datetime:
    return dt.datetime.fromtimestamp(int(path.stat().st_mtime))


def read_source(path: Path, source: int) -> list[Entry]:
    """Every file of one FROM: a folder (walked), an archive, or one file."""
    path = Path(path)
    if path.is_dir():
        out = []
        for f in sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink()):
            rel = f.relative_to(path).as_posix()
            if _junk(rel):
                continue
            shown = f"{path.name}/{rel}"
            if f.suffix.lower() in ARCHIVES:
                out += read_zip(f.read_bytes(), source, rel, shown)
            else:
                out.append(Entry(source, rel, shown, data=f.read_bytes(),
                                 mtime=_file_time(f)))
        return out
    if path.suffix.lower() in ARCHIVES:
        return read_zip(path.read_bytes(), source, "", path.name)
    return [Entry(source, path.name, path.name, data=path.read_bytes(),
                  mtime=_file_time(path))]


# ------------------------------------------------------------------ chapter: read from the notebook

def chapter_ids(root: Path) -> dict[str, set[str]]:
    """Each chapter of source/ -> the grade ids of its cells."""
    import nbformat
    out = {}
    for nb_path in sorted((root / "source").glob("*/*.ipynb")):
        if nb_path.stem == nb_path.parent.name:
            nb = nbformat.read(nb_path, as_version=4)
            out[nb_path.stem] = {c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells} - {None}
    return out


def read_notebook(data: bytes):
    """The notebook in ``data``, or raises ValueError saying why it is not one."""
    import nbformat
    try:
        return nbformat.reads(data.decode("utf-8-sig"), as_version=4)
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text: {exc.reason}") from exc
    except Exception as exc:  # noqa: BLE001 (JSON errors, a notebook of no known format)
        raise ValueError(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()) from exc


def chapter_of(nb, ids: dict[str, set[str]]) -> str | None:
    """The chapter whose grade ids the notebook holds: most of them, and more than any
    other chapter (a student may delete a cell; the grader puts read-only ones back)."""
    have = {c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells} - {None}
    shares = sorted(((len(have & want) / len(want), ch) for ch, want in ids.items() if want), reverse=True)
    if not shares or shares[0][0] < 0.5 or (len(shares) > 1 and shares[1][0] == shares[0][0]):
        return None
    return shares[0][1]


def chapter_named(name: str, chapters) -> str | None:
    """A chapter the file's own name claims (the longest chapter name in it)."""
    found = [ch for ch in chapters if ch in name]
    return max(found, key=len) if found else None
