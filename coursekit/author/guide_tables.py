"""Tables of the guides that are counted, not typed: ``python -m coursekit.author.guide_tables``.

A guide holds such a table between two marks, and this module writes what is
between them::

    <!-- generated: rules (python -m coursekit.author.guide_tables) -->
    | chapter | rules checked | waived as advice |
    ...
    <!-- end generated -->

``rule_words``: the words that make a sentence of a statement a rule, per
language, read from the ledger's patterns (``RULE_WORDS``).

``given``: the chapters that hand out, in their own folder, code a later
chapter needs from an earlier one's answers (``notebooks/given/chapters.json``).

``rules``: per chapter, the rules its exercises state and the course checks (the
rule ledger, ``coursekit/author/ledger.py``: the ids marked in the chapter,
less those its known-bug catalogue, ``tests/catalogue/chNN_name.py``, waives as
advice) and the number waived. ``tests/test_rules.py`` fails when a guide's
table is not what this module writes now; ``--check`` says the same without
writing.
"""
from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# the guides that hold generated tables, per language
GUIDES = {"zh": DOCS / "instructor.zh.md", "en": DOCS / "instructor.md"}
BLOCK = re.compile(r"(<!-- generated: (?P<name>[a-z_]+) \(python -m coursekit\.author\.guide_tables\) -->\n)"
                   r"(?P<body>.*?)(<!-- end generated -->)", re.S)
HEAD = {
    "rules": {"zh": ("章节", "检查的规则", "作为建议豁免"), "en": ("chapter", "rules checked", "waived as advice")},
    "rule_words": {"zh": ("语言", "算作规则的词"), "en": ("language", "words that make a sentence a rule")},
    "given": {"zh": ("章节", "放在这一章文件夹里发下去的文件"), "en": ("chapter", "files handed out in the chapter's folder")},
}


def catalogue(chapter: str):
    """The chapter's known-bug catalogue (tests/catalogue/), the ledger's other half."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    return importlib.import_module(f"catalogue.{chapter}")


def rule_counts(chapters: list[str] | None = None) -> dict[str, tuple[int, int]]:
    """chapter -> (rules checked, rules waived as advice), for each chapter with a catalogue."""
    from . import ledger

    chapters = chapters or sorted(p.stem for p in (ROOT / "tests" / "catalogue").glob("ch[0-9][0-9]_*.py"))
    out = {}
    for chapter in chapters:
        marked = set(ledger.marked(chapter))
        waived = marked & set(getattr(catalogue(chapter), "WAIVED", {}))
        out[chapter] = (len(marked - waived), len(waived))
    return out


def rules_table(lang: str, counts: dict[str, tuple[int, int]]) -> str:
    head = HEAD["rules"][lang]
    rows = [f"| {' | '.join(head)} |", "|---|---:|---:|"]
    rows += [f"| `{chapter}` | {checked} | {waived} |" for chapter, (checked, waived) in counts.items()]
    return "\n".join(rows) + "\n"


def _alternatives(pattern: str, lang: str) -> list[str]:
    """The words of a rule-word pattern, as a reader would write them: the
    top-level alternatives, with ``(?:s)?`` shown as ``(s)`` and a character
    class before or after a word shown as the words it leaves out."""
    body = re.sub(r"^\\b\(\?:|\)\\b$", "", pattern)
    out, depth, word = [], 0, ""
    for ch in body:
        depth += ch in "([" and 1 or 0
        depth -= ch in ")]" and 1 or 0
        if ch == "|" and depth == 0:
            out.append(word)
            word = ""
        else:
            word += ch
    out.append(word)

    def readable(w: str) -> str:
        w = re.sub(r"\(\?:(\w+)\)\?", r"(\1)", w)                   # need(?:s)? to -> need(s) to
        w = re.sub(r"\[(\w+)\]\?", lambda m: "(" + "/".join(m.group(1)) + ")", w)   # raise[sd]? -> raise(s/d)
        w = re.sub(r"(\w)\?$", r"(\1)", w)                                 # required? -> require(d)
        before = re.match(r"\(\?<!\[(\w+)\]\)", w)
        after = re.search(r"\(\?!\[(\w+)\]\)$", w)
        core = re.sub(r"\(\?<!\[\w+\]\)|\(\?!\[\w+\]\)", "", w)
        if before or after:
            no = [c + core for c in (before.group(1) if before else "")]
            no += [core + c for c in (after.group(1) if after else "")]
            return f"{core}（{'、'.join(no)} 除外）" if lang == "zh" else f"{core} (not in {', '.join(no)})"
        return w
    return [readable(w) for w in out]


def rule_words_table(lang: str) -> str:
    """The words that make a statement's sentence a rule, per language, read from the ledger."""
    from . import ledger
    head = HEAD["rule_words"][lang]
    rows = [f"| {' | '.join(head)} |", "|---|---|"]
    for code, name in (("zh", "中文" if lang == "zh" else "Chinese"), ("en", "英文" if lang == "zh" else "English")):
        words = _alternatives(ledger.RULE_WORDS[code].pattern, lang)
        rows.append(f"| {name} | " + ", ".join(f"`{w}`" for w in words) + " |")
    return "\n".join(rows) + "\n"


def given_table(lang: str) -> str:
    """Which chapters hand out earlier answers in their own folder (notebooks/given/chapters.json)."""
    from . import build
    head = HEAD["given"][lang]
    rows = [f"| {' | '.join(head)} |", "|---|---|"]
    for chapter in build.chapters():
        files = [p.name for p in build.given_files(chapter)]
        if files:
            rows.append(f"| `{chapter}` | " + ", ".join(f"`{f}`" for f in files) + " |")
    return "\n".join(rows) + "\n"


def tables(lang: str, cache: dict) -> dict[str, str]:
    """name -> the table as this module writes it now, in ``lang``."""
    if "rules" not in cache:
        cache["rules"] = rule_counts()
    return {"rules": rules_table(lang, cache["rules"]), "rule_words": rule_words_table(lang),
            "given": given_table(lang)}


def refreshed(text: str, lang: str, cache: dict | None = None) -> str:
    """``text`` with every generated block written anew (an unknown block name is an error)."""
    cache = {} if cache is None else cache
    fresh = tables(lang, cache)

    def one(m: re.Match) -> str:
        name = m.group("name")
        if name not in fresh:
            raise ValueError(f"unknown generated table {name!r} (known: {', '.join(sorted(fresh))})")
        return m.group(1) + fresh[name] + m.group(4)

    return BLOCK.sub(one, text)


def stale(guides: dict[str, Path] = GUIDES, cache: dict | None = None) -> list[str]:
    """The guides whose generated tables are not what this module writes now (``cache``:
    table name -> counts already made, e.g. ``{"rules": rule_counts()}``)."""
    cache = {} if cache is None else cache
    out = []
    for lang, path in guides.items():
        text = path.read_text(encoding="utf-8")
        if not BLOCK.search(text) or refreshed(text, lang, cache) != text:
            out.append(str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path))
    return out


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m coursekit.author.guide_tables", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only say which guides are stale (exit 1 if any)")
    args = ap.parse_args(argv)
    if args.check:
        found = stale()
        for path in found:
            print(f"guide_tables: {path} is stale: run python -m coursekit.author.guide_tables")
        return 1 if found else 0
    cache: dict = {}
    for lang, path in GUIDES.items():
        text = path.read_text(encoding="utf-8")
        new = refreshed(text, lang, cache)
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"guide_tables: wrote {path.relative_to(ROOT)}")
        else:
            print(f"guide_tables: {path.relative_to(ROOT)} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
