"""The rule ledger: every rule an exercise states is marked where it is written.

In ``notebooks/chNN_name.md`` a sentence of an exercise that states a rule (a
shape, a dtype, "from scratch", "must not modify its input", "raise
ValueError", every bullet of a specification) carries a mark right after it,
in both languages, with the same short id::

    - 用你在练习 1 写的 `softmax`；不能调用 torch 自带的 softmax。<!-- rule: att-own-softmax -->
    - use your `softmax` from Exercise 1; torch's own softmax is not allowed. <!-- rule: att-own-softmax -->

The marks are HTML comments: the build removes them (``strip``), so no
student ever sees one. The chapter's catalogue (``tests/catalogue/chNN.py``)
holds the other half of the ledger: for each id a wrong answer that breaks
exactly that rule (``Variant(..., breaks=("att-own-softmax",))``), or, for a
sentence that is advice rather than a rule, a waiver with its reason
(``WAIVED = {"id": "why"}``). ``tests/test_rules.py`` reads both halves.

A sentence of an exercise section that sounds like a rule (``RULE_WORDS``:
must, only, never, 必须, 不能, 只, 应, ...) and carries no mark is reported by
``unmarked``, so a rule cannot be written without entering the ledger.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MARK = re.compile(r"[ \t]*<!--\s*rule:\s*([A-Za-z0-9_.,\s-]+?)\s*-->")
ID = re.compile(r"[a-z0-9][a-z0-9_.-]*")
EXERCISE = re.compile(r"(?:练习|Exercise|Question)\s*\d+|第 \d+ 题")
OPTION = re.compile(r"^\s*[-*]\s+\*\*[A-H][.．]\*\*")
HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
FOLDED = re.compile(r"<details>.*?</details>", re.S)   # a folded hint helps; the rules are in the statement

# words that make a sentence a rule (or sound like one), per language
RULE_WORDS = {
    "en": re.compile(r"\b(?:must|should|only|never|do not|don't|does not|may not|cannot|can't|need(?:s)? to|has to|"
                     r"have to|required?|not allowed|forbidden|always|exactly|raise[sd]?)\b", re.I),
    "zh": re.compile(r"必须|应该|应当|(?<![对相反响回答适供效])应(?![用该当])|不能|不可|不要|不得|不许|只能|只用|只取|只看|只有|"
                     r"务必|禁止|要求|一定|需要|要用|要把|要先|要在|要是|都要|才能|抛出"),
}


@dataclass(frozen=True)
class Sentence:
    """One sentence of an exercise's text, with the rule ids marked on it."""
    chapter: str
    exercise: str          # the heading of the exercise section
    lang: str
    text: str              # without its marks
    ids: tuple[str, ...]

    def sounds_like_a_rule(self) -> bool:
        """A sentence with a rule word, other than a question or a quiz's option (``- **B.** ...``)."""
        if OPTION.match(self.text) or self.text.rstrip("*）) ").endswith(("?", "？")):
            return False
        return bool(RULE_WORDS[self.lang].search(_without_code(self.text)))

    def __str__(self) -> str:
        return f"{self.chapter} [{self.lang}] {self.exercise}: {self.text}"


CJK_GAP = re.compile(r"([，。；：！？、）」]\s*" + MARK.pattern + r"(?:\s*" + MARK.pattern + r")*)[ \t]+")


def strip(markdown: str) -> str:
    """The markdown without its rule marks (what the build writes). A mark after
    Chinese punctuation takes the space that followed it along: "；<!-- rule: x --> 传"
    becomes "；传", as Chinese is written."""
    return MARK.sub("", CJK_GAP.sub(r"\1", markdown))


def marks(text: str) -> tuple[str, ...]:
    out = []
    for group in MARK.findall(text):
        out += [i.strip() for i in group.split(",") if i.strip()]
    return tuple(out)


def _without_code(text: str) -> str:
    """The sentence without inline code and maths (a rule word inside `x.only()` is not prose)."""
    return re.sub(r"`[^`]*`|\$[^$]*\$", " ", text)


_SPLIT = re.compile(r"(?<=[。！？；;])|(?<=-->)|(?<=[.!?:])(?=\s+[A-Z*(`\"“-])")


def sentences_of(text: str) -> list[str]:
    """A markdown text cut into sentences: each line (a paragraph, a bullet), then
    at the sentence ends of either language; a mark stays with the sentence it follows."""
    out = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(("```", "$$")):
            continue
        pieces: list[str] = []
        for part in _SPLIT.split(line):
            if pieces and not strip(part).strip():
                pieces[-1] += part            # only marks (or blanks): they belong to the sentence before
            else:
                pieces.append(part)
        out += [p.strip() for p in pieces if strip(p).strip()]
    return out


def exercise_sentences(chapter: str, notebooks: Path | None = None) -> list[Sentence]:
    """Every sentence of every exercise statement of ``chapter``, in both languages.

    An exercise section starts at a heading that names an exercise ("练习 3：",
    "Exercise 3:") and runs to the next heading of the same or a higher level;
    its statement is the markdown up to the section's last graded cell (what
    follows is the lecture going on), model answers left out. Code comments
    are not where a rule is stated, nor are the folded hints (``<details>``)."""
    from ..base.chapters import NOTEBOOKS, read_chapter
    nb, _ = read_chapter(Path(notebooks or NOTEBOOKS) / f"{chapter}.md")
    blocks: list[tuple[tuple, str, str]] = []     # (section, lang, text) in order
    graded_at: dict[tuple, int] = {}             # section -> index in blocks of its last graded cell
    section = {"zh": None, "en": None}           # lang -> (level, heading, serial)
    serial = 0
    for cell in nb.cells:
        lang = cell.metadata.get("lang")
        meta = cell.metadata.get("nbgrader") or {}
        if cell.cell_type == "code" or meta.get("solution"):
            if meta.get("grade") or meta.get("solution"):
                for lg in (lang,) if lang else ("zh", "en"):
                    if section[lg]:
                        graded_at[section[lg]] = len(blocks)
            continue
        lang = lang or "zh"
        buf: list[str] = []
        for line in FOLDED.sub("", cell.source).splitlines() + ["# end"]:
            m = HEADING.match(line)
            if not m:
                buf.append(line)
                continue
            if section[lang] and buf:
                blocks.append((section[lang], lang, "\n".join(buf)))
            buf = []
            if line == "# end":
                break
            level, title = len(m.group(1)), strip(m.group(2)).strip()
            if EXERCISE.search(title):
                serial += 1
                section[lang] = (level, title, serial)
            elif section[lang] and level <= section[lang][0]:
                section[lang] = None
    out = []
    for i, (sec, lang, text) in enumerate(blocks):
        if sec in graded_at and i >= graded_at[sec]:
            continue
        for s in sentences_of(text):
            out.append(Sentence(chapter, sec[1], lang, strip(s).strip(), marks(s)))
    return out


def marked(chapter: str, notebooks: Path | None = None) -> dict[str, dict[str, list[Sentence]]]:
    """rule id -> language -> the sentences that carry it."""
    out: dict[str, dict[str, list[Sentence]]] = {}
    for s in exercise_sentences(chapter, notebooks):
        for i in s.ids:
            out.setdefault(i, {}).setdefault(s.lang, []).append(s)
    return out


def problems(chapter: str, breaks: dict[str, list[str]], waived: dict[str, str],
             notebooks: Path | None = None) -> list[str]:
    """What is wrong with ``chapter``'s ledger, one line each (empty: it holds).

    ``breaks``: rule id -> names of the catalogue's wrong answers that break it;
    ``waived``: rule id -> why the sentence is advice, not a rule."""
    out = []
    found = marked(chapter, notebooks)
    all_marks = [i for s in exercise_sentences(chapter, notebooks) for i in s.ids]
    for i in sorted(set(all_marks)):
        if not ID.fullmatch(i):
            out.append(f"{chapter}: rule id {i!r} is not lower-case letters, digits, '-', '_' or '.'")
        langs = found.get(i, {})
        for lang in ("zh", "en"):
            if lang not in langs:
                other = next(iter(langs.values()))[0]
                out.append(f"{chapter}: rule {i!r} is marked in one language only; missing in {lang} "
                           f"(the other says: {other.text})")
        if i in waived and breaks.get(i):
            out.append(f"{chapter}: rule {i!r} is both waived and broken by {breaks[i]}: choose one")
        elif i not in waived and not breaks.get(i):
            where = next(iter(langs.values()))[0]
            out.append(f"{chapter}: rule {i!r} has no wrong answer in the catalogue that breaks it "
                       f"(and no waiver): {where.text}")
        elif i in waived and not waived[i].strip():
            out.append(f"{chapter}: rule {i!r} is waived without a reason")
    for i in sorted(set(breaks) | set(waived)):
        if i not in found:
            out.append(f"{chapter}: the catalogue names rule {i!r}, which no exercise sentence marks")
    for s in exercise_sentences(chapter, notebooks):
        if not s.ids and s.sounds_like_a_rule():
            out.append(f"{chapter}: unmarked rule-like sentence ({s.lang}, {s.exercise}): {s.text}")
    return out
