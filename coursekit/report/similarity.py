"""Which students' answers look alike: a reason to look, never proof.

For each chapter, only what a student wrote is compared: the answer cells
(nbgrader ``solution`` cells) of each submission, with the code the release
already put there (the stub and its signature) passed to copydetect as
boilerplate, so that the given lines never count as shared. copydetect
tokenises the code and replaces names before it fingerprints it (winnowing),
so renaming variables does not hide a copy, while two answers written
independently share little beyond the language itself.
"""
from __future__ import annotations

import functools
import html
import io
import json
import re
from dataclasses import asdict, dataclass
from itertools import combinations
from pathlib import Path

import nbformat

K = 25          # k-gram length in tokens (copydetect's default noise threshold)
LEXER = "python"   # pygments' lexer, named: found by a file's name it is looked up among all of them (14 ms a time)
WINDOW = 1      # winnowing window: keep every fingerprint (the answers are short)


@dataclass(frozen=True)
class Pair:
    chapter: str
    a: str
    b: str
    score: float            # the smaller of the two overlap shares, 0…1
    shared_tokens: int
    view: str = ""          # the side-by-side page, relative to the report


def answer_code(nb) -> str:
    """The code of a notebook's answer cells, in order, one cell after another."""
    cells = [c.source for c in nb.cells
             if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")]
    return "\n\n".join(cells) + "\n"


def _fingerprint(name: str, code: str, boilerplate=None):
    from copydetect import CodeFingerprint
    return CodeFingerprint(f"{name}.py", K, WINDOW, boilerplate=boilerplate, fp=io.StringIO(code), language=LEXER)


def rank(chapter: str, answers: dict[str, str], release_code: str) -> list[Pair]:
    """Every pair of students, most similar first. ``answers`` maps a student
    id to the code of their answer cells; ``release_code`` is the same for the
    untouched release (its fingerprints are boilerplate)."""
    from copydetect import compare_files

    given = _fingerprint("release", release_code).hashes
    prints = {s: _fingerprint(s, code, boilerplate=list(given)) for s, code in sorted(answers.items())}
    pairs = []
    for a, b in combinations(sorted(prints), 2):
        shared, (sim_a, sim_b), _ = compare_files(prints[a], prints[b])
        pairs.append(Pair(chapter, a, b, float(min(sim_a, sim_b)), int(shared)))
    return sorted(pairs, key=lambda p: (-p.score, -p.shared_tokens, p.a, p.b))


WORD = re.compile(r"\w")


def shared_spans(code: str, slices, given_lines: set[str]) -> list[tuple[int, int]]:
    """The character ranges of ``code`` to mark as shared: copydetect's slices
    widened to whole tokens (its offsets can fall one character inside a
    name or number: "de|f softmax", "100_00|0"), and never a line the
    release itself holds (a signature, a docstring, a comment it gave)."""
    spans = []
    for start, end in (zip(slices[0], slices[1]) if getattr(slices, "size", 0) else []):
        start, end = int(start), int(end)
        while start > 0 and WORD.match(code[start - 1]) and WORD.match(code[start]):
            start -= 1
        while end < len(code) and end > 0 and WORD.match(code[end - 1]) and WORD.match(code[end]):
            end += 1
        spans.append((start, end))
    given = [False] * len(code)
    pos = 0
    for line in code.splitlines(keepends=True):
        if line.strip() and line.strip() in given_lines:
            given[pos:pos + len(line)] = [True] * len(line)
        pos += len(line)
    out = []
    for start, end in spans:
        run = None
        for i in range(start, end):
            if given[i] or code[i] == "\n" and run is None:
                if run is not None:
                    out.append((run, i))
                    run = None
            elif run is None:
                run = i
        if run is not None:
            out.append((run, end))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(s for s in out if code[s[0]:s[1]].strip()):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def marked(code: str, spans) -> str:
    out, at = [], 0
    for start, end in spans:
        out += [html.escape(code[at:start]), "<mark>", html.escape(code[start:end]), "</mark>"]
        at = end
    return "".join(out + [html.escape(code[at:])])


def side_by_side(pair: Pair, code_a: str, code_b: str, release_code: str, lang: str = "en") -> str:
    """An HTML page with the two answers side by side, the shared parts marked."""
    from copydetect import compare_files

    from .words import HTML_LANG, word

    given = list(_fingerprint("release", release_code).hashes)
    fa, fb = _fingerprint(pair.a, code_a, given), _fingerprint(pair.b, code_b, given)
    _, _, (sa, sb) = compare_files(fa, fb)
    release_lines = {line.strip() for line in release_code.splitlines() if line.strip()}
    title = word("similar_page_title", lang, chapter=pair.chapter, a=pair.a, b=pair.b)
    shared = f"{pair.score:.0%}, {word('tokens', lang, n=pair.shared_tokens)}"
    return f"""<!doctype html><html lang="{HTML_LANG[lang]}"><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:1em;color:#1a1a1a}} .cols{{display:flex;gap:1em}}
.cols>section{{flex:1;min-width:0}} pre{{background:#f6f6f6;padding:.6em;font-size:13px;
white-space:pre-wrap;overflow-wrap:anywhere}} mark{{background:#ffe08a;color:#1a1a1a}}</style>
<main><h1>{html.escape(title)} ({html.escape(shared)})</h1>
<p>{word("similar_note", lang)}</p><p>{word("similar_page_note", lang)}</p>
<div class="cols"><section><h2>{html.escape(pair.a)}</h2><pre>{marked(fa.raw_code, shared_spans(fa.raw_code, sa, release_lines))}</pre></section>
<section><h2>{html.escape(pair.b)}</h2><pre>{marked(fb.raw_code, shared_spans(fb.raw_code, sb, release_lines))}</pre></section></div>
</main></html>
"""


def chapter_pairs(root: Path, chapter: str, out: Path, top: int = 10, lang: str = "en") -> list[Pair]:
    """Rank the submissions of one chapter under ``root/submitted`` and write a
    side-by-side page for each of the ``top`` pairs under ``out``."""
    release_nb = nbformat.read(root / "release" / chapter / f"{chapter}.ipynb", as_version=4)
    release_code = answer_code(release_nb)
    answers = submitted_answers(root, chapter, answer_code)
    if len(answers) < 2:
        return []
    ranked = rank(chapter, answers, release_code)[:top]
    out.mkdir(parents=True, exist_ok=True)
    shown = []
    for p in ranked:
        name = f"{chapter}__{p.a}__{p.b}.html"
        (out / name).write_text(side_by_side(p, answers[p.a], answers[p.b], release_code, lang), encoding="utf-8")
        shown.append(Pair(p.chapter, p.a, p.b, p.score, p.shared_tokens, f"{out.name}/{name}"))
    return shown


# ------------------------------------------------------------------ answers close to the course's own code

@dataclass(frozen=True)
class HelperMatch:
    chapter: str
    student: str
    exercise: str           # the answer cell's grade id
    helper: str             # the helpers/ file, relative to the course
    share: float            # how much of the answer the helper's code covers, 0…1
    shared_tokens: int


HELPER_SHARE = 0.7          # flag an answer when most of it is in a helper …
HELPER_TOKENS = 20          # … and that half is more than a line or two


def answer_cells(nb) -> dict[str, str]:
    """grade id -> code of each answer cell."""
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells
            if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")}


def helper_sources(helpers_dir: Path) -> dict[str, str]:
    """The code the course ships in helpers/ (a student has all of it), by file, and the
    earlier answers a later chapter hands out in its own folder (notebooks/given/, listed
    by chapter in chapters.json), named as the student has them: release/<chapter>/<file>."""
    from ..base.chapters import given_manifest
    found = {f"helpers/{p.relative_to(helpers_dir).as_posix()}": p.read_text(encoding="utf-8")
             for p in sorted(Path(helpers_dir).rglob("*.py")) if "__pycache__" not in p.parts}
    notebooks = Path(helpers_dir).resolve().parent / "notebooks"
    for chapter, names in given_manifest(notebooks).items():
        for name in names:
            found[f"release/{chapter}/{name}"] = (notebooks / "given" / name).read_text(encoding="utf-8")
    return found


def helper_matches(chapter: str, answers: dict[str, dict[str, str]], release_cells: dict[str, str],
                   helpers: dict[str, str]) -> list[HelperMatch]:
    """Each answer cell that is mostly code the course ships in helpers/ (a
    later chapter's fallback model, say): a reason to look, like any similarity.
    ``answers``: student -> grade id -> code; ``release_cells``: the same for
    the release (what it gave is never counted)."""
    from copydetect import compare_files

    prints = {path: _helper_print(path, code) for path, code in helpers.items()}
    found = []
    for student, cells in sorted(answers.items()):
        for gid, code in cells.items():
            given = list(_fingerprint("release", release_cells.get(gid, "") + "\n").hashes)
            mine = _fingerprint(f"{student}_{gid}", code + "\n", boilerplate=given)
            best = None
            for path, fp in prints.items():
                shared, (share, _), _ = compare_files(mine, fp)
                if shared >= HELPER_TOKENS and share >= HELPER_SHARE and (best is None or share > best.share):
                    best = HelperMatch(chapter, student, gid, path, float(share), int(shared))
            if best:
                found.append(best)
    return found


@functools.lru_cache(maxsize=256)
def _helper_print(path: str, code: str):
    """A helpers file's fingerprints, made once per process. Their slow part,
    the tokenising (two seconds of every report for all of helpers/), is kept
    once per machine in the user's cache as the filtered code it gives; the
    fingerprints themselves are made from it again in each process (copydetect
    hashes with Python's hash(), which changes from one process to the next)."""
    import hashlib
    import os

    import copydetect
    from copydetect import CodeFingerprint
    from copydetect.utils import filter_code
    name = path.replace("/", "_")
    key = hashlib.sha256(f"{copydetect.__version__} {path}\n{code}".encode()).hexdigest()[:32]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "transformer-course" / "similarity"
    try:
        filtered = (cache / f"{key}.txt").read_text(encoding="utf-8")
    except (OSError, ValueError):
        filtered, _ = filter_code(code, f"{name}.py", LEXER)
        try:
            cache.mkdir(parents=True, exist_ok=True)
            tmp = cache / f".{key}.{os.getpid()}.tmp"
            tmp.write_text(filtered, encoding="utf-8")
            os.replace(tmp, cache / f"{key}.txt")
        except OSError:   # no cache to write to: tokenised again next time
            pass
    return CodeFingerprint(f"{name}.py", K, WINDOW, filter=False, fp=io.StringIO(filtered))


def submitted_answers(root: Path, chapter: str, read) -> dict:
    """student -> ``read`` of their notebook of ``chapter`` under ``root/submitted``
    (an unreadable notebook has nothing to compare and is left out)."""
    answers = {}
    for path in sorted((root / "submitted").glob(f"*/{chapter}/{chapter}.ipynb")):
        try:
            answers[path.parent.parent.name] = read(nbformat.read(path, as_version=4))
        except Exception:
            continue
    return answers


def chapter_helper_matches(root: Path, chapter: str, helpers_dir: Path) -> list[HelperMatch]:
    """``helper_matches`` for the submissions of one chapter under ``root/submitted``."""
    release = answer_cells(nbformat.read(root / "release" / chapter / f"{chapter}.ipynb", as_version=4))
    answers = submitted_answers(root, chapter, answer_cells)
    return helper_matches(chapter, answers, release, helper_sources(helpers_dir))


# ------------------------------------------------------------------ made once per class, kept until it changes

KEPT = Path(".grading") / "similarity"      # under the course folder, one file per chapter
VERSION = 2                                 # of what a kept file holds


def _digest(*parts) -> str:
    import hashlib
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _filtered(code: str) -> str:
    """``code`` as copydetect tokenises it before it fingerprints it (the slow part)."""
    from copydetect.utils import filter_code
    return filter_code(code, "answer.py", LEXER)[0]


def _print_of(name: str, filtered: str, boilerplate=None):
    """The fingerprint copydetect makes of code whose tokenised form is ``filtered``:
    the same hashes, and so the same scores, as ``_fingerprint`` of the code itself."""
    from copydetect import CodeFingerprint
    return CodeFingerprint(f"{name}.py", K, WINDOW, boilerplate=boilerplate, filter=False, fp=io.StringIO(filtered))


def _base(root: Path, chapter: str, helpers_dir: Path) -> tuple[str, object, dict[str, str]]:
    """The digest of what every finding of ``chapter`` follows from but the students'
    answers (copydetect, this code, the release's answer cells, helpers/), the release
    notebook and helpers/ itself."""
    from importlib.metadata import version
    release = nbformat.read(root / "release" / chapter / f"{chapter}.ipynb", as_version=4)
    helpers = helper_sources(helpers_dir)
    return (_digest(version("copydetect"), K, WINDOW, chapter, Path(__file__).read_text(encoding="utf-8"),
                    answer_code(release), answer_cells(release), helpers), release, helpers)


def _students(root: Path, chapter: str, kept: dict) -> dict[str, dict]:
    """student -> what is kept of their answer cells: ``stamp`` (the notebook's
    modification time, size and inode), ``digest`` and, for a notebook read again
    (``cells``), the cells. A notebook whose stamp is the kept one is not read again;
    an unreadable one has nothing to compare and is left out."""
    out = {}
    for path in sorted((root / "submitted").glob(f"*/{chapter}/{chapter}.ipynb")):
        student = path.parent.parent.name
        st = path.stat()
        stamp = [st.st_mtime_ns, st.st_size, st.st_ino]
        if kept.get(student, {}).get("stamp") == stamp:
            out[student] = kept[student]
            continue
        try:
            nb = nbformat.read(path, as_version=4)
            cells, code = answer_cells(nb), answer_code(nb)
        except Exception:
            continue
        out[student] = {"stamp": stamp, "digest": _digest(code, cells), "cells": cells, "code": code}
    return out


def _update(kept: dict, students: dict, release, helpers: dict, chapter: str) -> dict:
    """The kept findings brought up to date with ``students``: each new or changed
    answer tokenised, compared with every other (``pairs``) and with helpers/
    (``matches``); what did not change is kept as it was."""
    before = kept.get("students", {})
    changed = {s for s, v in students.items() if s not in before or before[s].get("digest") != v["digest"]}
    if changed and kept.get("release_filtered") is None:
        kept["release_filtered"] = _filtered(answer_code(release))
    given = list(_print_of("release", kept["release_filtered"]).hashes) if changed else []
    entry = {}
    for s, v in students.items():
        if s in changed:
            found = helper_matches(chapter, {s: v["cells"]}, answer_cells(release), helpers)
            entry[s] = {"stamp": v["stamp"], "digest": v["digest"], "code": v["code"], "filtered": _filtered(v["code"]),
                        "matches": [asdict(m) for m in found]}
        else:
            entry[s] = {**before[s], "stamp": v["stamp"]}
    pairs = {k: v for k, v in kept.get("pairs", {}).items()
             if not set(k.split("\t")) & changed and set(k.split("\t")) <= set(entry)}
    if changed:
        prints = {s: _print_of(s, e["filtered"], given) for s, e in entry.items()}
        for a, b in combinations(sorted(entry), 2):
            if a in changed or b in changed:
                pairs[f"{a}\t{b}"] = _compare(prints[a], prints[b])
    return {**kept, "students": entry, "pairs": pairs}


def _compare(print_a, print_b) -> list:
    """[score, shared tokens] of two answers' fingerprints, as ``rank`` scores a pair."""
    from copydetect import compare_files
    shared, (sim_a, sim_b), _ = compare_files(print_a, print_b)
    return [float(min(sim_a, sim_b)), int(shared)]


def findings(root: Path, chapter: str, top: int, lang: str, helpers_dir: Path) -> tuple[list[Pair], list[HelperMatch]]:
    """``chapter_pairs`` (pages under ``root/reports/similar``) and ``chapter_helper_matches``
    of one chapter, kept in ``.grading/similarity/``: a report made again over the same
    answers, or after ``precompute_aside`` made them while the class was being graded,
    reads them instead of comparing again, and one made after some answers changed
    compares only those (a late submission: its pairs and its helper matches), and
    makes again only the side-by-side pages of pairs with a changed answer."""
    from ..base.runner import write_atomically
    path = root / KEPT / f"{chapter}.json"
    base, release, helpers = _base(root, chapter, helpers_dir)
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        kept = kept if kept.get("version") == VERSION and kept.get("base") == base else {}
    except (OSError, ValueError, AttributeError):
        kept = {}
    students = _students(root, chapter, kept.get("students", {}))
    key = _digest(base, top, lang, {s: v["digest"] for s, v in students.items()})
    if kept.get("key") == key and all((root / "reports" / p["view"]).exists() for p in kept["shown"] if p["view"]):
        return [Pair(**p) for p in kept["shown"]], [HelperMatch(**m) for m in kept["matches"]]
    kept = _update({**kept, "version": VERSION, "base": base}, students, release, helpers, chapter)
    shown = _pages(root, chapter, kept, top, lang, answer_code(release)) if len(kept["students"]) >= 2 else []
    matches = [m for s in sorted(kept["students"]) for m in kept["students"][s]["matches"]]
    kept.update(key=key, shown=[asdict(p) for p in shown], matches=matches)
    text = json.dumps(kept, ensure_ascii=False)
    write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))   # a reader sees old or new
    return shown, [HelperMatch(**m) for m in matches]


def _pages(root: Path, chapter: str, kept: dict, top: int, lang: str, release_code: str) -> list[Pair]:
    """The ``top`` pairs, most similar first (as ``rank`` orders them), each with its
    side-by-side page under ``reports/similar``, made again only when one of its two
    answers, its score or the language changed, or it is gone."""
    ranked = sorted((Pair(chapter, *k.split("\t"), v[0], v[1]) for k, v in kept["pairs"].items()),
                    key=lambda p: (-p.score, -p.shared_tokens, p.a, p.b))[:top]
    out = root / "reports" / "similar"
    out.mkdir(parents=True, exist_ok=True)
    made, shown = kept.get("pages", {}), []
    for p in ranked:
        name = f"{chapter}__{p.a}__{p.b}.html"
        a, b = kept["students"][p.a], kept["students"][p.b]
        page_key = _digest(a["digest"], b["digest"], p.score, p.shared_tokens, lang)
        if made.get(name) != page_key or not (out / name).exists():
            (out / name).write_text(side_by_side(p, a["code"], b["code"], release_code, lang), encoding="utf-8")
            made[name] = page_key
        shown.append(Pair(p.chapter, p.a, p.b, p.score, p.shared_tokens, f"{out.name}/{name}"))
    kept["pages"] = made
    return shown


def precompute_aside(payload: dict) -> int:
    """``findings`` of ``payload["chapters"]`` at the lowest priority, while the class is
    still being graded (the answers are in submitted/ from the start): the class report
    then only reads them. Stopped before it finishes, it leaves what it finished.
    ``payload["lowest"]`` false: at the usual priority (a worker to spare)."""
    from ..base import runner
    if payload.get("lowest", True):
        runner.lowest_priority()
    root = Path(payload["root"])
    for chapter in payload["chapters"]:
        findings(root, chapter, payload["top"], payload["lang"], Path(payload["helpers"]))
    return 0
