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

import html
import io
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import nbformat

K = 25          # k-gram length in tokens (copydetect's default noise threshold)
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
    return CodeFingerprint(f"{name}.py", K, WINDOW, boilerplate=boilerplate, fp=io.StringIO(code))


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


def side_by_side(pair: Pair, code_a: str, code_b: str, release_code: str) -> str:
    """An HTML page with the two answers side by side, the shared parts marked."""
    from copydetect import compare_files
    from copydetect.utils import highlight_overlap

    given = list(_fingerprint("release", release_code).hashes)
    fa, fb = _fingerprint(pair.a, code_a, given), _fingerprint(pair.b, code_b, given)
    _, _, (sa, sb) = compare_files(fa, fb)

    def marked(fp, slices) -> str:
        if getattr(slices, "size", 0) == 0:
            return html.escape(fp.raw_code)
        text, _ = highlight_overlap(fp.raw_code, slices, "<mark>", "</mark>", escape_html=True)
        return text

    return f"""<!doctype html><meta charset="utf-8"><title>{pair.chapter}: {pair.a} ~ {pair.b}</title>
<style>body{{font-family:sans-serif;margin:1em}} .cols{{display:flex;gap:1em}}
.cols>div{{flex:1;min-width:0}} pre{{background:#f6f6f6;padding:.6em;overflow:auto;font-size:13px}}
mark{{background:#ffe08a}}</style>
<h2>{html.escape(pair.chapter)}: {html.escape(pair.a)} ~ {html.escape(pair.b)}
({pair.score:.0%}, {pair.shared_tokens} shared tokens)</h2>
<p>Similarity is a reason to look, not proof: short answers to the same exercise often look alike.
相似只是值得看一眼的理由，不是抄袭的证据。</p>
<div class="cols"><div><h3>{html.escape(pair.a)}</h3><pre>{marked(fa, sa)}</pre></div>
<div><h3>{html.escape(pair.b)}</h3><pre>{marked(fb, sb)}</pre></div></div>
"""


def chapter_pairs(root: Path, chapter: str, out: Path, top: int = 10) -> list[Pair]:
    """Rank the submissions of one chapter under ``root/submitted`` and write a
    side-by-side page for each of the ``top`` pairs under ``out``."""
    release_nb = nbformat.read(root / "release" / chapter / f"{chapter}.ipynb", as_version=4)
    release_code = answer_code(release_nb)
    answers = {}
    for path in sorted((root / "submitted").glob(f"*/{chapter}/{chapter}.ipynb")):
        try:
            answers[path.parent.parent.name] = answer_code(nbformat.read(path, as_version=4))
        except Exception:       # an unreadable notebook has nothing to compare
            continue
    if len(answers) < 2:
        return []
    ranked = rank(chapter, answers, release_code)[:top]
    out.mkdir(parents=True, exist_ok=True)
    shown = []
    for p in ranked:
        name = f"{chapter}__{p.a}__{p.b}.html"
        (out / name).write_text(side_by_side(p, answers[p.a], answers[p.b], release_code), encoding="utf-8")
        shown.append(Pair(p.chapter, p.a, p.b, p.score, p.shared_tokens, f"{out.name}/{name}"))
    return shown
