"""TeX maths in markdown -> MathML, so that feedback pages show formulas with
no network (browsers draw MathML themselves; MathJax came from a CDN).

Covers the TeX the course writes: letters and numbers, sub- and superscripts,
\\frac, \\sqrt, fonts (\\mathbf, \\mathrm, \\mathbb, \\boldsymbol, \\text,
\\operatorname), Greek letters and the usual operators, \\left … \\right,
\\big, spacing and the pmatrix environment. ``unknown`` collects any command
it does not know (tests/test_browser_student.py keeps it empty for every
chapter); such a command is shown as red text, never dropped.
"""
from __future__ import annotations

import html
import re

GREEK = {name: chr(code) for name, code in (
    ("alpha", 0x3B1), ("beta", 0x3B2), ("gamma", 0x3B3), ("delta", 0x3B4), ("epsilon", 0x3F5),
    ("varepsilon", 0x3B5), ("zeta", 0x3B6), ("eta", 0x3B7), ("theta", 0x3B8), ("iota", 0x3B9),
    ("kappa", 0x3BA), ("lambda", 0x3BB), ("mu", 0x3BC), ("nu", 0x3BD), ("xi", 0x3BE), ("pi", 0x3C0),
    ("rho", 0x3C1), ("sigma", 0x3C3), ("tau", 0x3C4), ("phi", 0x3D5), ("varphi", 0x3C6), ("chi", 0x3C7),
    ("psi", 0x3C8), ("omega", 0x3C9), ("Gamma", 0x393), ("Delta", 0x394), ("Theta", 0x398),
    ("Lambda", 0x39B), ("Pi", 0x3A0), ("Sigma", 0x3A3), ("Phi", 0x3A6), ("Psi", 0x3A8), ("Omega", 0x3A9))}
IDENTIFIERS = {"ell": "ℓ", "infty": "∞", "partial": "∂", "nabla": "∇", "top": "⊤", "dots": "…",
               "ldots": "…", "cdots": "⋯", "%": "%", "_": "_", "#": "#", "&": "&", "$": "$"}
OPERATORS = {"times": "×", "cdot": "⋅", "to": "→", "rightarrow": "→", "leftarrow": "←", "Rightarrow": "⇒",
             "approx": "≈", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "ne": "≠", "neq": "≠",
             "in": "∈", "propto": "∝", "odot": "⊙", "otimes": "⊗", "oplus": "⊕", "pm": "±", "mp": "∓",
             "sum": "∑", "prod": "∏", "int": "∫", "langle": "⟨", "rangle": "⟩", "lVert": "‖", "rVert": "‖",
             "|": "‖", "{": "{", "}": "}", "mid": "∣", "sim": "∼", "equiv": "≡", "gg": "≫", "ll": "≪",
             "mapsto": "↦", "cup": "∪", "cap": "∩", "subset": "⊂", "forall": "∀", "exists": "∃",
             "lfloor": "⌊", "rfloor": "⌋", "lceil": "⌈", "rceil": "⌉", "circ": "∘", "star": "⋆"}
FUNCTIONS = {"cos", "sin", "tan", "ln", "log", "exp", "max", "min", "arg", "lim", "det", "sup", "inf",
             "softmax", "argmax", "tanh"}
SPACES = {",": "0.167em", ":": "0.222em", ";": "0.278em", "!": "-0.167em", " ": "0.25em",
          "quad": "1em", "qquad": "2em"}
FONTS = {"mathbf": "bold", "boldsymbol": "bold-italic", "bm": "bold-italic", "mathrm": "normal",
         "mathit": "italic", "mathbb": "double-struck", "mathcal": "script", "operatorname": "normal"}
DOUBLE_STRUCK = {"C": "ℂ", "H": "ℍ", "N": "ℕ", "P": "ℙ", "Q": "ℚ", "R": "ℝ", "Z": "ℤ"}
BIG = {"big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr", "biggl", "biggr"}
ACCENTS = {"hat": "^", "tilde": "~", "bar": "‾", "vec": "→", "overline": "‾", "dot": "˙"}
CELL_END = ("&", "\\\\", "\\end")
TOKEN = re.compile(r"\\[A-Za-z]+|\\.|[0-9]+(?:\.[0-9]+)?|\s+|.", re.S)


def _esc(text: str) -> str:
    """Text for MathML inside markdown: HTML-escaped, and markdown's own
    characters as character references so the markdown step leaves them."""
    return "".join(f"&#{ord(ch)};" if ch in "*_`[]\\~|#$" else ch for ch in html.escape(text, quote=False))


def _letter(ch: str, variant: str | None) -> str:
    if variant == "double-struck" and ch.isupper():
        ch = DOUBLE_STRUCK.get(ch, chr(0x1D538 + ord(ch) - 65))
        return f"<mi>{ch}</mi>"
    style = {"bold": ' mathvariant="normal" style="font-weight:bold"', "bold-italic": ' style="font-weight:bold"',
             "normal": ' mathvariant="normal"'}.get(variant or "", "")
    return f"<mi{style}>{_esc(ch)}</mi>"


class Parser:
    """A recursive-descent reader of one formula's tokens."""

    def __init__(self, tex: str):
        self.tokens = TOKEN.findall(tex)
        self.pos = 0
        self.unknown: list[str] = []

    def peek(self, skip_space: bool = True) -> str | None:
        while skip_space and self.pos < len(self.tokens) and self.tokens[self.pos].isspace():
            self.pos += 1
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str | None:
        tok = self.peek()
        if tok is not None:
            self.pos += 1
        return tok

    def raw_group(self) -> str:
        """The text of the next ``{...}`` group as written (for \\text)."""
        if self.peek() != "{":
            return self.take() or ""
        self.take()
        depth, out = 1, []
        while self.pos < len(self.tokens):
            tok = self.tokens[self.pos]
            self.pos += 1
            depth += (tok == "{") - (tok == "}")
            if depth == 0:
                break
            out.append(tok)
        return "".join(out)

    def row(self, stop=("}",), variant=None) -> str:
        """Elements up to a token in ``stop`` (not consumed), as one <mrow>."""
        items = []
        while (tok := self.peek()) is not None and tok not in stop:
            items.append(self.scripts(self.atom(variant)))
        return items[0] if len(items) == 1 else "<mrow>" + "".join(items) + "</mrow>"

    def argument(self, variant=None) -> str:
        if self.peek() == "{":
            self.take()
            inner = self.row(("}",), variant)
            self.take()
            return inner
        tok = self.peek()
        if tok and tok[0].isdigit() and len(tok) > 1:      # \frac23: one digit per argument, as in TeX
            self.tokens[self.pos] = tok[1:]
            return f"<mn>{tok[0]}</mn>"
        return self.atom(variant)

    def scripts(self, base: str) -> str:
        sub = sup = None
        while (tok := self.peek()) in ("_", "^", "'"):
            self.take()
            if tok == "'":
                sup = (sup or "") + "<mo>′</mo>"
            elif tok == "_":
                sub = self.argument()
            else:
                sup = (sup or "") + self.argument()
        if sub is not None and sup is not None:
            return f"<msubsup>{base}{sub}<mrow>{sup}</mrow></msubsup>"
        if sub is not None:
            return f"<msub>{base}{sub}</msub>"
        if sup is not None:
            return f"<msup>{base}<mrow>{sup}</mrow></msup>"
        return base

    def atom(self, variant=None) -> str:
        tok = self.take()
        if tok is None:
            return ""
        if tok == "{":
            inner = self.row(("}",), variant)
            self.take()
            return inner
        if tok.startswith("\\"):
            return self.command(tok[1:], variant)
        if tok[0].isdigit():
            return f"<mn>{tok}</mn>"
        if tok.isalpha():
            return _letter(tok, variant)
        return f"<mo>{_esc({'-': '−', '*': '∗'}.get(tok, tok))}</mo>"

    def command(self, name: str, variant=None) -> str:
        if name in GREEK:
            return _letter(GREEK[name], variant if variant in ("bold", "bold-italic") else None)
        if name in IDENTIFIERS:
            return f"<mi>{_esc(IDENTIFIERS[name])}</mi>"
        if name in OPERATORS:
            return f"<mo>{_esc(OPERATORS[name])}</mo>"
        if name in FUNCTIONS:
            return f'<mi mathvariant="normal">{name}</mi>'
        if name in SPACES:
            return f'<mspace width="{SPACES[name]}"/>'
        if name in FONTS:
            return self.font(FONTS[name])
        if name in ("frac", "tfrac", "dfrac"):
            return f"<mfrac>{self.argument()}{self.argument()}</mfrac>"
        if name == "sqrt":
            return self.sqrt()
        if name in ("text", "textrm", "mbox"):
            return f"<mtext>{_esc(self.raw_group())}</mtext>"
        return self.structure(name)

    def font(self, variant: str) -> str:
        if self.peek() == "{":
            body = self.raw_group()
            if re.fullmatch(r"[A-Za-z]{2,}", body) and variant == "normal":
                return f'<mi mathvariant="normal">{body}</mi>'
            child = Parser(body)
            child.unknown = self.unknown
            return child.row((), variant)
        return self.atom(variant)

    def sqrt(self) -> str:
        if self.peek() == "[":
            self.take()
            index = self.row(("]",))
            self.take()
            return f"<mroot>{self.argument()}{index}</mroot>"
        return f"<msqrt>{self.argument()}</msqrt>"

    def structure(self, name: str) -> str:
        """\\left/\\right, \\big, accents, environments and line breaks."""
        if name in ("left", "right") or name in BIG:
            delim = self.take() or ""
            delim = OPERATORS.get(delim[1:], delim[1:]) if delim.startswith("\\") else delim
            if name == "left":
                inner = self.row(("\\right",))
                self.take()
                close = self.take() or ""
                close = OPERATORS.get(close[1:], close[1:]) if close.startswith("\\") else close
                return f"<mrow>{self.fence(delim)}{inner}{self.fence(close)}</mrow>"
            return self.fence(delim)
        if name in ACCENTS:
            return f'<mover accent="true">{self.argument()}<mo>{ACCENTS[name]}</mo></mover>'
        if name == "begin":
            return self.environment(self.raw_group())
        if name == "\\":
            return ""
        self.unknown.append("\\" + name)
        return f'<mtext style="color:#c00">\\{_esc(name)}</mtext>'

    @staticmethod
    def fence(delim: str) -> str:
        return "" if delim in (".", "") else f'<mo stretchy="true">{_esc(delim)}</mo>'

    def environment(self, env: str) -> str:
        """A matrix: rows split by \\\\, cells by &, up to \\end{env}."""
        rows, cells = [], []
        while (tok := self.peek()) is not None:
            if tok == "\\end":
                self.take()
                self.raw_group()
                break
            cells.append("<mtd>" + self.row(CELL_END) + "</mtd>")
            sep = self.take() if self.peek() in ("&", "\\\\") else None
            if sep != "&":
                rows.append("<mtr>" + "".join(cells) + "</mtr>")
                cells = []
        if cells:
            rows.append("<mtr>" + "".join(cells) + "</mtr>")
        table = "<mtable>" + "".join(rows) + "</mtable>"
        fences = {"pmatrix": ("(", ")"), "bmatrix": ("[", "]"), "vmatrix": ("|", "|")}.get(env)
        return f"<mrow>{self.fence(fences[0])}{table}{self.fence(fences[1])}</mrow>" if fences else table


def tex_to_mathml(tex: str, display: bool = False, unknown: list | None = None) -> str:
    """One formula (without its dollars) as a <math> element."""
    parser = Parser(tex.strip())
    body = parser.row(())
    if unknown is not None:
        unknown.extend(parser.unknown)
    attrs = ' display="block"' if display else ""
    return f'<math{attrs}><semantics>{body}<annotation encoding="application/x-tex">' \
           f"{_esc(tex.strip())}</annotation></semantics></math>"


CODE = re.compile(r"(^```.*?^```[ \t]*$|^~~~.*?^~~~[ \t]*$|`[^`\n]+`)", re.S | re.M)
MATH = re.compile(r"\$\$(.+?)\$\$|(?<![\\$])\$(?=\S)([^$\n]*?\S)\$(?![0-9$])", re.S)


def _formula(match: re.Match, unknown: list | None) -> str:
    try:
        return tex_to_mathml(match.group(1) or match.group(2), match.group(1) is not None, unknown)
    except (RecursionError, IndexError, TypeError, AttributeError):   # a student's broken TeX stays as written
        return match.group(0)


def markdown_math(source: str, unknown: list | None = None) -> str:
    """Replace every $…$ and $$…$$ of a markdown text (outside code) by MathML."""
    parts = CODE.split(source)
    for i in range(0, len(parts), 2):                       # even parts are prose, odd ones code
        parts[i] = MATH.sub(lambda m: _formula(m, unknown), parts[i])
    return "".join(parts)
