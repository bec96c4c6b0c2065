"""TeX maths in markdown -> MathML, so that feedback pages (coursekit.grade.feedback)
and the course's website (coursekit.author.site) show formulas with no network
(browsers draw MathML themselves; MathJax came from a CDN).

The conversion is the maintained ``latex2mathml`` library's; this module only
finds the formulas in markdown and adjusts the library's output for what
browsers (MathML Core, as Chromium and Firefox draw it) and screen readers
need:

- before: ``\\_`` and the like inside ``\\text{}`` become the plain character,
  and a row's spacing ``\\\\[2mm]`` is dropped (the library shows both as text);
- after: a font on one letter (``\\mathbf``, ``\\boldsymbol``, ``\\mathbb``)
  becomes the Unicode mathematical letter (MathML Core draws no
  ``mathvariant`` but ``normal``); ``\\mathrm{softmax}`` becomes one upright
  ``<mi>`` (the library gives one per letter) and ``\\mathrm{d}`` stays upright;
  named spaces become lengths; an ``<mrow>`` holding one element is dropped;
  the TeX is kept as the formula's annotation.

``unknown`` collects any command the library does not know (it passes them
through as text; tests/test_browser_student.py keeps the list empty for every
chapter); such a command is shown as red text, never dropped.
"""
from __future__ import annotations

import html
import re
import unicodedata
from xml.etree.ElementTree import Element

from latex2mathml.converter import convert_to_element

TEXT_ESCAPES = re.compile(r"\\([_%&#${}])")
TEXT = re.compile(r"\\(?:text|textrm|mbox)\s*\{[^{}]*\}")
ROW_SPACING = re.compile(r"\\\\\s*\[[^\]]*\]")
ONE_UPRIGHT_LETTER = re.compile(r"\\mathrm\s*\{\s*([A-Za-z])\s*\}")
SPACES = {"thinmathspace": "0.167em", "mediummathspace": "0.222em", "thickmathspace": "0.278em",
          "negativethinmathspace": "-0.167em", "negativemediummathspace": "-0.222em",
          "negativethickmathspace": "-0.278em"}
COMMAND = re.compile(r"\\[A-Za-z]+")


def _esc(text: str, quote: bool = False) -> str:
    """Text for MathML inside markdown: HTML-escaped, and markdown's own
    characters as character references so the markdown step leaves them."""
    return "".join(f"&#{ord(ch)};" if ch in "*_`[]\\~|#$" else ch for ch in html.escape(text, quote=quote))


def _styled(ch: str, variant: str) -> str | None:
    """``ch`` as the Unicode mathematical letter of ``variant`` (𝐖, 𝜶, 𝔼, ℝ), if there is one."""
    try:
        name = unicodedata.name(ch)
    except ValueError:
        return None
    for word in ("LATIN ", "GREEK ", "LETTER ", "LUNATE "):
        name = name.replace(word, "")
    style = variant.upper().replace("-", " ").replace("DOUBLE STRUCK", "DOUBLE-STRUCK").replace("SANS SERIF", "SANS-SERIF")
    for candidate in (f"MATHEMATICAL {style} {name}", f"{style} {name}"):
        try:
            return unicodedata.lookup(candidate)
        except KeyError:
            continue
    return None


def _tidy(el: Element, unknown: list) -> None:
    """Adjust the library's tree in place (see the module's docstring)."""
    if el.text:
        el.text = html.unescape(el.text)               # the library writes symbols as "&#x1D416;"
    for child in el:
        _tidy(child, unknown)
    text = el.text or ""
    variant = el.get("mathvariant")
    if el.tag in ("mi", "mn") and variant not in (None, "normal") and len(text) == 1 and _styled(text, variant):
        el.text = _styled(text, variant)
        del el.attrib["mathvariant"]
    if el.tag == "mspace" and el.get("width") in SPACES:
        el.set("width", SPACES[el.get("width")])
    if el.tag in ("mi", "mo", "mtext") and (command := COMMAND.fullmatch(text)):
        unknown.append(command.group(0))
        el.tag, el.attrib = "mtext", {"style": "color:#c00"}
    letters = list(el)
    if el.tag == "mrow" and len(letters) > 1 and all(
            c.tag == "mi" and c.get("mathvariant") == "normal" and len(c) == 0 and (c.text or "").isalpha()
            for c in letters):                         # \mathrm{softmax}: one name, not seven letters
        el.tag, el.attrib, el.text = "mi", {"mathvariant": "normal"}, "".join(c.text for c in letters)
        for c in letters:
            el.remove(c)
    for i, child in enumerate(el):                     # an <mrow> around one element says nothing
        if child.tag == "mrow" and not child.attrib and len(child) == 1 and not (child.text or "").strip():
            el[i] = child[0]


def _serialise(el: Element) -> str:
    attrs = "".join(f' {k}="{_esc(v, quote=True)}"' for k, v in el.attrib.items())
    inner = _esc(el.text or "") + "".join(_serialise(c) for c in el)
    return f"<{el.tag}{attrs}>{inner}</{el.tag}>"


def tex_to_mathml(tex: str, display: bool = False, unknown: list | None = None) -> str:
    """One formula (without its dollars) as a <math> element."""
    tex = tex.strip()
    prepared = TEXT.sub(lambda m: TEXT_ESCAPES.sub(r"\1", m.group(0)), tex)
    prepared = ONE_UPRIGHT_LETTER.sub(r"\\mathrm \1", ROW_SPACING.sub(r"\\\\", prepared))
    root = convert_to_element(prepared, display="block" if display else "inline")
    found: list = []
    _tidy(root, found)
    if unknown is not None:
        unknown.extend(found)
    body = "".join(_serialise(c) for c in root)
    attrs = ' display="block"' if display else ""
    return f'<math{attrs}><semantics>{body}<annotation encoding="application/x-tex">' \
           f"{_esc(tex)}</annotation></semantics></math>"


CODE = re.compile(r"(^```.*?^```[ \t]*$|^~~~.*?^~~~[ \t]*$|`[^`\n]+`)", re.S | re.M)
MATH = re.compile(r"\$\$(.+?)\$\$|(?<![\\$])\$(?=\S)([^$\n]*?\S)\$(?![0-9$])", re.S)


def _formula(match: re.Match, unknown: list | None) -> str:
    try:
        return tex_to_mathml(match.group(1) or match.group(2), match.group(1) is not None, unknown)
    except Exception:                # the library's errors for broken TeX: a student's formula stays as written
        return match.group(0)


def markdown_math(source: str, unknown: list | None = None) -> str:
    """Replace every $…$ and $$…$$ of a markdown text (outside code) by MathML."""
    return _convert(source, unknown)


def _convert(source: str, unknown: list | None) -> str:
    parts = CODE.split(source)
    for i in range(0, len(parts), 2):                       # even parts are prose, odd ones code
        parts[i] = MATH.sub(lambda m: _formula(m, unknown), parts[i])
    return "".join(parts)
