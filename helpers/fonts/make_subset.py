"""Rebuild the course's Chinese font subset (a maintainer's step, not a student's).

The figures draw Chinese with ``NotoSansSC-CourseSubset.otf``: Noto Sans CJK SC
(SIL Open Font License 1.1, see OFL.txt) cut down with fontTools to the characters
that the chapter texts and the helpers use, so the course ships a few hundred
kilobytes instead of a 16 MB font and needs no system font. Rerun this after
adding Chinese text to a figure (tests/test_content.py says which characters are
missing)::

    apt-get download fonts-noto-cjk && dpkg -x fonts-noto-cjk_*.deb noto
    pip install fonttools
    python -m helpers.fonts.make_subset noto/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
FAMILY = "Noto Sans SC Course Subset"
FILE = HERE / "NotoSansSC-CourseSubset.otf"


def course_text(root: Path = ROOT) -> str:
    """Every character the chapter texts and the helpers contain."""
    files = sorted((root / "notebooks").glob("ch*.md")) + sorted((root / "helpers").rglob("*.py"))
    return "".join(p.read_text(encoding="utf-8") for p in files)


def figure_text(root: Path = ROOT) -> str:
    """The text a figure can show: the helpers and the chapters' code cells
    (prose is rendered by the browser, not by matplotlib)."""
    code = []
    for path in sorted((root / "notebooks").glob("ch*.md")):
        code += re.findall(r"^```\{code-cell\}.*?\n(.*?)^```", path.read_text(encoding="utf-8"), re.S | re.M)
    return "".join(code) + "".join(p.read_text(encoding="utf-8") for p in sorted((root / "helpers").rglob("*.py")))


CJK_RANGES = ((0x2E80, 0x9FFF), (0xF900, 0xFAFF), (0xFE30, 0xFE4F), (0xFF00, 0xFFEF))
# curly quotes for Chinese text; minus and times because matplotlib's log-axis
# ticks ($\mathdefault{2\times10^{-1}}$) take them from the first font only
EXTRA = {0x2018, 0x2019, 0x201C, 0x201D, 0x2212, 0x00D7}


def is_cjk(code: int) -> bool:
    """Chinese characters, CJK punctuation and full-width forms (the font's job)."""
    return any(lo <= code <= hi for lo, hi in CJK_RANGES)


def wanted(text: str) -> set[int]:
    """Printable ASCII, ``EXTRA`` and every CJK character of ``text``. Greek,
    math symbols, arrows and dashes stay out: the CJK font draws them full-width,
    so DejaVu Sans (matplotlib's own font) draws them instead."""
    return set(range(0x20, 0x7F)) | EXTRA | {ord(c) for c in text if is_cjk(ord(c))}


def _sc_font(source: Path):
    from fontTools.ttLib import TTCollection, TTFont
    if source.suffix.lower() in (".ttc", ".otc"):
        for font in TTCollection(str(source)).fonts:
            if font["name"].getDebugName(1) == "Noto Sans CJK SC":
                return font
        raise SystemExit(f"{source} holds no 'Noto Sans CJK SC'")
    return TTFont(str(source))


def _rename(font) -> None:
    names = font["name"]
    for rec in list(names.names):
        if rec.nameID in (1, 16):
            names.setName(FAMILY, rec.nameID, rec.platformID, rec.platEncID, rec.langID)
        elif rec.nameID == 4:
            names.setName(FAMILY + " Regular", rec.nameID, rec.platformID, rec.platEncID, rec.langID)
        elif rec.nameID == 6:
            names.setName("NotoSansSC-CourseSubset", rec.nameID, rec.platformID, rec.platEncID, rec.langID)


def build(source: Path, dest: Path = FILE) -> int:
    from fontTools import subset
    font = _sc_font(source)
    have = set(font.getBestCmap())
    options = subset.Options()
    options.layout_features = ["*"]
    options.name_IDs = ["*"]
    options.name_languages = ["*"]
    options.notdef_outline = True
    sub = subset.Subsetter(options)
    sub.populate(unicodes=sorted(wanted(course_text()) & have))
    sub.subset(font)
    _rename(font)
    font.save(str(dest))
    return len(font.getBestCmap())


if __name__ == "__main__":
    n = build(Path(sys.argv[1]))
    print(f"{FILE.relative_to(ROOT)}: {n} characters, {FILE.stat().st_size / 1024:.0f} KiB")
