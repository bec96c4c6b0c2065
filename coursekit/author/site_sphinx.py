"""Sphinx extension of the course site (coursekit/author/site.py): maths as MathML
written at build time (no MathJax, nothing from a CDN), the switch to the same
page in the other language, and the site's stylesheet."""
from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes

from ..grade.mathml import tex_to_mathml

THEME = Path(__file__).resolve().parent / "site_theme"


def _mathml(self, tex: str, display: bool) -> str:
    unknown: list = []
    out = tex_to_mathml(tex, display=display, unknown=unknown)
    if unknown:
        from sphinx.util import logging
        logging.getLogger(__name__).warning("maths: unknown TeX %s in %r", ", ".join(sorted(set(unknown))), tex,
                                            location=self.builder.current_docname)
    return out


def visit_math(self, node):
    self.body.append(_mathml(self, node.astext(), False))
    raise nodes.SkipNode


def visit_displaymath(self, node):
    self.body.append(f'<div class="math">{_mathml(self, node.astext(), True)}</div>')
    raise nodes.SkipNode


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
# axe-core reports, so every written page is mended here.
MENDS = (
    (re.compile(r'(<p class="caption" role="heading")(?![^>]*aria-level)'), r'\1 aria-level="2"'),
    (re.compile(r'<pre(?![^>]*tabindex)(?=[ >])'), '<pre tabindex="0"'),
    (re.compile(r'<div class="math">'), '<div class="math" tabindex="0">'),
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
    app.connect("html-page-context", _page)
    app.add_css_file("course.css")
    app.connect("build-finished", _mend)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
