"""The claims ledger: every measured number in a chapter's prose comes from a record.

A number a chapter reports from a measurement (a loss, a speed, a ratio, a step
count, a row of an experiment's table) is not typed into the prose. The prose
holds a placeholder, in both languages::

    ... ended at a validation loss of {{claim: ch07.lr4e-3-val}} ...

and the build (``coursekit.author.build.resolve_claims``) fills in the value,
read at build time from the record named here (a file under ``bench/results/``,
or a chapter's fingerprinted outputs in ``bench/results/chapter_outputs/``).

Each ``Claim`` keeps, next to where its value is read:

- ``written``: the value, as printed, that the sentence around it was written
  for. When a record changes, the value in the prose changes with it, but the
  words around it ("about twice", "no difference") may no longer hold:
  ``check`` fails until someone rereads the sentence and updates ``written``.
- ``line`` and ``cell``: the record's conditions (config, text, machine, load,
  seed) as words, per language, derived from the record itself. The line of
  markdown that cites the claim must contain each of ``line``'s words (what
  differs from claim to claim: the model, the batch, the learning rate), and
  the markdown cell around it each of ``cell``'s (what a whole section shares:
  the text trained on, the time budget, the machine). Change the record's
  conditions, or the conditions the sentence states, and ``check`` fails.

``unrecorded`` finds the other half: a number in a line that reports a
measurement which is not a placeholder (nor a setting or a derived constant
listed in ``NOT_MEASURED`` with its reason). ``tests/test_claims.py`` runs both
for every chapter in ``CLAIMS``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..base.chapters import NOTEBOOKS, read_chapter
from . import ledger
from .claim_records import RESULTS, Claim, ClaimError, load, records_from  # noqa: F401 (the ledger's API)
from .claim_table import CLAIMS, NOT_MEASURED

PLACEHOLDER = re.compile(r"\{\{\s*claim:\s*([a-z0-9][a-z0-9_.+-]*)\s*\}\}")


# Lines that report a measurement: numbers in them must be claims (per language).
REPORTS = {
    "en": re.compile(r"\b(?:we ran|we measured|measured|records?|recorded|in our run|runs? (?:on|at)|ended at|"
                     r"validation loss|tokens per second|tokens/s|went from|gave|this machine shows)\b", re.I),
    "zh": re.compile(r"跑了|量出|量到|测得|记下|记录|我们的(?:这次)?运行|验证损失|每秒|降到|结束时"),
}
# a number that can be a measurement: a decimal, a number with thousands separators, or a count
# with a unit (seconds, steps, tokens, a ratio, a share)
NUMBER = re.compile(r"(?<![\w.$\\{-])(?:\d+\.\d+|\d{1,3}(?:,\d{3})+|\d+(?=\s*(?:seconds|s\b|秒|steps|步|tokens|个 token|"
                    r"×|times|倍|%)))(?![\w}]|e-)")


def resolve(text: str, chapter: str, root: Path | None = None) -> str:
    """``text`` with each placeholder replaced by its claim's value, read from the record."""
    table = CLAIMS.get(chapter, {})

    def sub(m: re.Match) -> str:
        claim = table.get(m.group(1))
        if claim is None:
            raise ClaimError(f"{chapter}: no claim {m.group(1)!r} in coursekit/author/claims.py")
        return claim.value(root)
    return PLACEHOLDER.sub(sub, text)


@dataclass(frozen=True)
class Use:
    """A placeholder where the chapter cites a claim."""
    claim: str
    lang: str
    line: str          # the markdown line holding it
    cell: str          # the markdown cell holding it


def uses(chapter: str, lang: str, notebooks: Path | None = None) -> list[Use]:
    nb, _ = read_chapter(Path(notebooks or NOTEBOOKS) / f"{chapter}.md")
    out = []
    for cell in nb.cells:
        if cell.cell_type != "markdown" or cell.metadata.get("lang") != lang:
            continue
        for line in cell.source.splitlines():
            for m in PLACEHOLDER.finditer(line):
                out.append(Use(m.group(1), lang, line, cell.source))
    return out


def states(text: str, words: str) -> bool:
    """``text`` contains ``words`` as a whole: "batch 16" is not stated by "batch 160", nor
    "shakespeare" by "tinyshakespeare" (Chinese characters may touch them)."""
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(words)}(?![A-Za-z0-9])", text) is not None


def check(chapter: str, notebooks: Path | None = None, root: Path | None = None) -> list[str]:
    """Every problem of the chapter's claims: a placeholder with no claim, a claim cited in one
    language only or not at all, a record that no longer gives the value the sentence was written
    for, a condition of the record its citing line or cell does not state."""
    problems = []
    table = CLAIMS.get(chapter, {})
    cited = {lang: uses(chapter, lang, notebooks) for lang in ("zh", "en")}
    for lang, found in cited.items():
        for use in found:
            claim = table.get(use.claim)
            if claim is None:
                problems.append(f"{chapter} [{lang}]: placeholder {use.claim!r} names no claim")
                continue
            try:
                line, cell = claim.conditions(root)
            except (ClaimError, KeyError, IndexError, AssertionError) as e:
                problems.append(f"{chapter} [{lang}] {use.claim}: the record's conditions are not those the "
                                f"claim states: {e!r}")
                continue
            for word in line[lang]:
                if not states(PLACEHOLDER.sub("", use.line), word):
                    problems.append(f"{chapter} [{lang}] {use.claim}: the line does not state {word!r}: {use.line}")
            for word in cell[lang]:
                if not states(use.cell, word):
                    problems.append(f"{chapter} [{lang}] {use.claim}: the cell does not state {word!r}")
    for cid, claim in table.items():
        for lang in claim.langs:
            if not any(u.claim == cid for u in cited[lang]):
                problems.append(f"{chapter} [{lang}]: claim {cid} is never cited")
        try:
            got = claim.value(root)
        except ClaimError as e:
            problems.append(str(e))
            continue
        if got != claim.written:
            problems.append(f"{chapter}: claim {cid}: its record now gives {got}, the prose was written for "
                            f"{claim.written}: reread the sentence, then update `written`")
    return problems


def unrecorded(chapter: str, lang: str, notebooks: Path | None = None) -> list[str]:
    """Numbers in lines of the chapter's prose that report a measurement and are not claims."""
    nb, _ = read_chapter(Path(notebooks or NOTEBOOKS) / f"{chapter}.md")
    allowed = NOT_MEASURED.get(chapter, {})
    found = []
    for cell in nb.cells:
        if cell.cell_type != "markdown" or cell.metadata.get("lang") != lang:
            continue
        for line in ledger.strip(cell.source).splitlines():
            if not REPORTS[lang].search(line):
                continue
            bare = re.sub(r"`[^`]*`|\$[^$]*\$|https?://\S+|\(?[\w/.-]+\.(?:py|json|jsonl|txt|md)\)?", " ",
                          PLACEHOLDER.sub(" ", line))
            for m in NUMBER.finditer(bare):
                if m.group(0) not in allowed:
                    found.append(f"{chapter} [{lang}]: {m.group(0)!r} has no record: {line.strip()[:160]}")
    return found
