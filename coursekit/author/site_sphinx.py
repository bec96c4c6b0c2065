"""Sphinx extension of the course site (coursekit/author/site.py): maths as MathML
written at build time (no MathJax, nothing from a CDN) and indexed as a reader
reads it, the switch to the same page in the other language, and the site's
stylesheet."""
from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes

from ..base.mathml import tex_to_mathml

THEME = Path(__file__).resolve().parent / "site_theme"


# The feedback pages' MathML keeps the TeX as an annotation. A browser draws only the
# MathML, but the annotation is text of the page all the same: Sphinx's search snippet
# (the page's textContent) showed every formula twice, drawn and as TeX run together
# ("Var(q⊤k)=dk\mathrm{Var}(\mathbf q^\top\mathbf k)=d_k"), and the search index held
# the TeX's words (mathrm, mathbf) from the math nodes. On the site a formula is its
# MathML alone, and the search indexes the same MathML (``_formulas``).
ANNOTATION = re.compile(r'<annotation encoding="application/x-tex">.*?</annotation>', re.S)


def mathml(tex: str, display: bool, docname: str | None = None) -> str:
    """The formula as the site writes it: MathML without its TeX, block formulas in a div."""
    unknown: list = []
    out = ANNOTATION.sub("", tex_to_mathml(tex, display=display, unknown=unknown))
    if unknown:
        from sphinx.util import logging
        logging.getLogger(__name__).warning("maths: unknown TeX %s in %r", ", ".join(sorted(set(unknown))), tex,
                                            location=docname)
    return f'<div class="math">{out}</div>' if display else out


def visit_math(self, node):
    self.body.append(mathml(node.astext(), False, self.builder.current_docname))
    raise nodes.SkipNode


def visit_displaymath(self, node):
    self.body.append(mathml(node.astext(), True, self.builder.current_docname))
    raise nodes.SkipNode


def _formulas(app, doctree, docname) -> None:
    """Each formula of a page becomes the HTML it is written as, before the page is indexed:
    Sphinx's search then indexes the formula as a reader reads it (the text of its MathML,
    once), never its TeX."""
    if app.builder.format != "html":
        return
    for kind, display in ((nodes.math, False), (nodes.math_block, True)):
        for node in list(doctree.findall(kind)):
            node.replace_self(nodes.raw("", mathml(node.astext(), display, docname), format="html"))


def _config(app, config) -> None:
    config.templates_path = [str(THEME / "templates"), *config.templates_path]
    config.html_static_path = [str(THEME / "static"), *config.html_static_path]
    config.html_favicon = config.html_favicon or str(THEME / "static" / "favicon.svg")


def _page(app, pagename, templatename, context, doctree) -> None:
    from .site import TEXT
    lang = app.config.course_lang
    other = "en" if lang == "zh" else "zh"
    prefix = app.config.course_prefix
    up = "../" * (pagename.count("/") + (1 if prefix[lang] else 0))
    context["course_other_lang"] = {"zh": "zh-CN", "en": "en"}[other]
    context["course_other_url"] = f"{up}{prefix[other]}{pagename}.html"
    context["course_switch"] = TEXT[lang]["switch"]
    context["course_switch_label"] = TEXT[lang]["switch_label"]


# Sphinx writes a toctree's caption as role="heading" without a level, and Furo lets wide
# code and formulas scroll sideways in boxes a keyboard cannot reach: both are WCAG failures
# axe-core reports, so every written page is mended here. MyST-NB names every folded cell's
# toggle "Toggle hidden content", in English, over the line it shows (WCAG 2.5.3, label in
# name): the toggle is named by that line, in the page's language.
MENDS = (
    (re.compile(r'(<p class="caption" role="heading")(?![^>]*aria-level)'), r'\1 aria-level="2"'),
    (re.compile(r'<pre(?![^>]*tabindex)(?=[ >])'), '<pre tabindex="0"'),
    (re.compile(r'<div class="math">'), '<div class="math" tabindex="0">'),
    (re.compile(r'<summary aria-label="Toggle hidden content">'), '<summary>'),
)


# Furo has no Chinese messages: its few words of its own, on a Chinese page, in Chinese
# (otherwise a screen reader reads them with Chinese rules: WCAG 3.1.2, language of parts).
FURO_ZH = (
    ('aria-label="Toggle site navigation sidebar"', 'aria-label="打开或关闭导航栏"'),
    ('aria-label="Toggle table of contents sidebar"', 'aria-label="打开或关闭本页目录"'),
    ('aria-label="Toggle Light / Dark / Auto color theme"', 'aria-label="切换浅色、深色或自动配色"'),
    ('href="#furo-main-content">Skip to content</a>', 'href="#furo-main-content">跳到正文</a>'),
    ("<span>Back to top</span>", "<span>回到顶部</span>"),
    ("<span>Next</span>", "<span>下一页</span>"),
    ("<span>Previous</span>", "<span>上一页</span>"),
    ('<div class="title">Home</div>', '<div class="title">首页</div>'),
    ("\n            On this page\n", "\n            本页内容\n"),
    ("Please activate JavaScript to enable the search functionality.", "请启用 JavaScript，才能使用搜索功能。"),
)


def _mend(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    for path in Path(app.outdir).rglob("*.html"):
        text = original = path.read_text(encoding="utf-8")
        for pattern, replacement in MENDS:
            text = pattern.sub(replacement, text)
        if app.config.course_lang == "zh":
            for english, chinese in FURO_ZH:
                text = text.replace(english, chinese)
        if text != original:
            path.write_text(text, encoding="utf-8")


def _chinese_search():
    """Sphinx's Chinese search (jieba cuts the Chinese words), with the English stemmer it
    ships for the Latin words named as that stemmer: Sphinx 9.0 writes
    ``window.Stemmer = ChineseStemmer`` beside a file that defines ``EnglishStemmer``, and
    the search page then stops at "searching" (a ReferenceError)."""
    from sphinx.search.zh import SearchChinese

    class CourseChinese(SearchChinese):
        language_name = "English" if SearchChinese.js_stemmer_rawcode == "english-stemmer.js" else \
            SearchChinese.language_name

    return CourseChinese


def setup(app):
    app.add_config_value("course_lang", "zh", "html")
    app.add_config_value("course_prefix", {"zh": "", "en": "en/"}, "html")
    app.add_search_language(_chinese_search())
    app.add_html_math_renderer("course_mathml", (visit_math, None), (visit_displaymath, None))
    app.connect("config-inited", _config)
    app.connect("doctree-resolved", _formulas)
    app.connect("html-page-context", _page)
    app.add_css_file("course.css")
    app.connect("build-finished", _mend)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
