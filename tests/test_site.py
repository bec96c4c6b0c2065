"""The course website (`make site`, coursekit/author/site.py).

One build per test session into a temporary folder: chapter 1 (a widget, a
figure, maths, four exercises) and every guide, in both languages
(``COURSE_SITE_CHAPTERS="ch01_attention ch04_positions"`` builds others). The
chapter's run is cached in .cache/site/runs/, so only the first session pays
for it. Then: every page has its twin in the other language and a switch that
leads to it; no line of a model answer, a hidden test or the chapter's grading
module is in any file of the site; figures are images with text alternatives;
widgets are stills with the sentence; maths is MathML and nothing is loaded
from the network; the search finds a Chinese and an English word; and, in
Chromium, pages load without console errors, the switch and the search work,
and axe-core finds no WCAG 2.1 A/AA violation on a zh and an en chapter page.
"""
from __future__ import annotations

import functools
import html
import http.server
import json
import os
import re
import threading
from pathlib import Path

import browser
import pytest

from coursekit.author import build
from coursekit.author import site as site_mod

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = tuple(os.environ.get("COURSE_SITE_CHAPTERS", "ch01_attention").split())
SITE = pytest.mark.xdist_group("site")
pytestmark = SITE


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "_site"
    return site_mod.build_site(out, chapters=list(CHAPTERS), say=lambda *_: None)


def pages(out: Path, lang: str) -> list[Path]:
    """The HTML pages of one language's site (relative to that site's root)."""
    top = out / site_mod.PREFIX[lang]
    return sorted(p.relative_to(top) for p in top.rglob("*.html")
                  if "_static" not in p.parts and not (lang == "zh" and p.relative_to(out).parts[0] == "en"))


def text_of(page: str) -> str:
    """What a reader reads: tags, scripts and styles gone, entities decoded."""
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", page))


# ------------------------------------------------------------------ pages and the language switch


def test_every_page_has_its_twin_and_a_switch_that_leads_to_it(site):
    zh, en = pages(site.out, "zh"), pages(site.out, "en")
    assert zh == en
    for chapter in CHAPTERS:
        assert Path("chapters", f"{chapter}.html") in zh
    for guide in site_mod.GUIDES:
        assert Path("guides", f"{guide}.html") in zh
    for lang, other in (("zh", "en"), ("en", "zh")):
        top = site.out / site_mod.PREFIX[lang]
        for rel in zh:
            page = (top / rel).read_text(encoding="utf-8")
            links = re.findall(r'<a class="course-lang-switch" href="([^"]+)" hreflang="([^"]+)"', page)
            assert len(links) == 1, f"{lang}/{rel}: {links}"
            href, hreflang = links[0]
            target = ((top / rel).parent / href).resolve()
            assert target == (site.out / site_mod.PREFIX[other] / rel).resolve(), f"{lang}/{rel} -> {href}"
            assert hreflang == {"zh": "zh-CN", "en": "en"}[other]
            html_lang = {"zh": "zh-CN", "en": "en"}[lang]
            assert re.search(rf'<html [^>]*lang="{html_lang}"', page), f"{lang}/{rel}: html lang"


def test_chapter_pages_are_in_their_language_with_study_time_and_how_to_run(site):
    for chapter in CHAPTERS:
        zh = text_of((site.out / "chapters" / f"{chapter}.html").read_text(encoding="utf-8"))
        en = text_of((site.out / "en" / "chapters" / f"{chapter}.html").read_text(encoding="utf-8"))
        minutes = site_mod.study_time(chapter).minutes
        assert f"预计学习时间：约 {minutes} 分钟" in zh and f"about {minutes} minutes" in en
        for text in (zh, en):
            assert "make lab" in text and "python course.py lab" in text
        n = int(chapter[2:4])
        assert f"第 {n} 章" in zh and f"Chapter {n}" in en
        for lang in ("zh", "en"):
            page = (site.out / site_mod.PREFIX[lang] / "chapters" / f"{chapter}.html").read_text(encoding="utf-8")
            assert 'href="../guides/student.html' in page          # how to run it: the student guide
            assert ("回到顶部" in page) == (lang == "zh") and ("Back to top" in page) == (lang == "en")
            assert "copybutton.js" in page                           # code has copy buttons


def test_the_guides_are_pages_in_their_language_and_the_instructor_guide_says_how_to_publish(site):
    zh = text_of((site.out / "guides" / "instructor.html").read_text(encoding="utf-8"))
    en = text_of((site.out / "en" / "guides" / "instructor.html").read_text(encoding="utf-8"))
    assert "教师指南" in zh and "发布网站" in zh
    assert "The instructor guide" in en and "Publishing the site" in en and "actions/deploy-pages" in en
    assert "学生指南" in text_of((site.out / "guides" / "student.html").read_text(encoding="utf-8"))
    deploy = text_of((site.out / "guides" / "deploy.html").read_text(encoding="utf-8"))
    assert site_mod.TEXT["zh"]["only_en"] in deploy           # a guide in English only says so on the zh site


def test_a_chapter_page_is_the_release_notebook_of_its_language():
    """The page's cells are nbgrader's release of that language: for the language
    source/ is built in, the very cells of release/."""
    for chapter in CHAPTERS:
        lang = build.source_language(chapter)
        release = json.loads((ROOT / "release" / chapter / f"{chapter}.ipynb").read_text(encoding="utf-8"))
        ours = site_mod.student_notebook(chapter, lang)
        assert [c.source for c in ours.cells] == ["".join(c["source"]) for c in release["cells"]]


# ------------------------------------------------------------------ nothing of the answers


@functools.lru_cache(maxsize=None)
def public() -> frozenset[str]:
    """Every line a student is given anyway: the release of every chapter in both
    languages, the helpers, the guides."""
    texts = [c.source for ch in build.chapters() for lang in build.LANGS
             for c in site_mod.student_notebook(ch, lang).cells]
    texts += [p.read_text(encoding="utf-8") for p in (ROOT / "helpers").rglob("*.py")]
    texts += [p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md")]
    return frozenset(line.strip() for text in texts for line in text.splitlines())


def marked(chapter: str) -> list[str]:
    """The lines of the model answers and hidden tests of a chapter, in both builds."""
    lines = []
    for lang in build.LANGS:
        for cell in build.build_chapter(chapter, lang).cells:
            inside = False
            for line in cell.source.splitlines():
                mark = line.strip()
                if mark in ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS"):
                    inside = True
                elif mark in ("### END SOLUTION", "### END HIDDEN TESTS"):
                    inside = False
                elif inside:
                    lines.append(line)
    return lines


def secret(lines) -> set[str]:
    """Those of ``lines`` a reader could recognise and is not given anyway."""
    return {line.strip() for line in lines
            if len(line.strip()) >= 20 and line.strip() not in public() and not line.strip().startswith("#")}


def secrets(chapter: str) -> set[str]:
    """Lines a reader must never see: each line of a model answer (between the
    solution marks) and of a hidden test, in both builds, and of the grading
    modules (the chapter's own and the shared ones), less the lines that are
    public anyway (the release of any chapter in either language, the helpers,
    the guides) and short ones (`return out`)."""
    assert (ROOT / "grading" / f"{chapter}.py").exists()
    grading = [line for path in sorted((ROOT / "grading").glob("*.py"))
               for line in path.read_text(encoding="utf-8").splitlines()]
    return secret(marked(chapter)) | secret(grading)


def leaks(out: Path, lines: set[str]) -> list[str]:
    """(file, line) for each secret line found in any file of the site: as written
    (scripts, the search index, notebooks) and as a reader sees the HTML."""
    found = []
    for path in out.rglob("*"):
        if not path.is_file() or path.suffix in (".png", ".svg", ".woff", ".woff2", ".inv"):
            continue
        raw = path.read_text(encoding="utf-8", errors="replace")
        seen = raw + "\n" + text_of(raw) if path.suffix == ".html" else raw
        # whole lines: code is shown line by line, and a line of an answer inside a longer
        # public one (a stub's comment `# q03 = "A" | "B"`, a sentence naming an attribute) is no leak
        seen_lines = {line.strip() for line in seen.splitlines()}
        found += [f"{path.relative_to(out)}: {line}" for line in lines if line in seen_lines]
    return found


def test_no_model_answer_hidden_test_or_grading_text_is_anywhere_in_the_site(site):
    for chapter in CHAPTERS:
        answers = secret(marked(chapter))
        assert len(answers) >= 10, f"{chapter}: only {len(answers)} answer lines to look for: are the marks found?"
        assert leaks(site.out, secrets(chapter)) == []
    assert not list(site.out.rglob("*.ipynb")) and not list(site.out.rglob("_sources"))


def test_the_leak_check_finds_every_answer_line_of_a_page_that_shows_the_solution(tmp_path):
    """The scan sees through Pygments' spans and HTML escapes: a page that shows the
    source build's code cells (model answers and hidden tests) as Sphinx highlights
    them gives away every line the check looks for, and a clean page none."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    chapter = CHAPTERS[0]
    cells = [c.source for lang in build.LANGS for c in build.build_chapter(chapter, lang).cells
             if c.cell_type == "code"]
    shown = "".join(highlight(source, PythonLexer(), HtmlFormatter()) for source in cells)
    (tmp_path / "page.html").write_text(f"<html><body>{shown}</body></html>", encoding="utf-8")
    (tmp_path / "clean.html").write_text("<html><body><p>nothing</p></body></html>", encoding="utf-8")
    answers = secret(marked(chapter))
    assert sorted(leaks(tmp_path, answers)) == sorted(f"page.html: {line}" for line in answers)


# ------------------------------------------------------------------ figures, widgets, maths, no network


def test_figures_are_images_with_text_alternatives_and_widgets_are_stills_with_the_sentence(site):
    for chapter in CHAPTERS:
        for lang in build.LANGS:
            page = (site.out / site_mod.PREFIX[lang] / "chapters" / f"{chapter}.html").read_text(encoding="utf-8")
            images = re.findall(r"<img\b[^>]*>", page)
            drawn = [img for img in images if "data:image/png;base64," in img]
            assert drawn, f"{chapter} ({lang}): no figure"
            for img in drawn:
                alt = re.search(r'alt="([^"]*)"', img)
                assert alt and len(alt.group(1).strip()) > 10, img[:200]
            stills = re.findall(r'<figure class="widget-still"><img [^>]*><figcaption>([^<]*)</figcaption>', page)
            if chapter == "ch01_attention":
                assert stills == [html.escape(site_mod.TEXT[lang]["widget"])], stills
            assert "application/vnd.jupyter.widget" not in page and "require.js" not in page


def test_maths_is_mathml_and_nothing_comes_from_the_network(site):
    for path in site.out.rglob("*.html"):
        page = path.read_text(encoding="utf-8")
        assert not re.search(r'<(script|link|img|iframe)\b[^>]*\b(src|href)="(https?:)?//', page), path
        assert not re.search(r"<script[^>]*mathjax|MathJax\s*=", page, re.I), path
    for chapter in CHAPTERS:
        for lang in build.LANGS:
            page = (site.out / site_mod.PREFIX[lang] / "chapters" / f"{chapter}.html").read_text(encoding="utf-8")
            assert page.count("<math") >= 5
            prose = re.sub(r"<(pre|code|math)\b.*?</\1>", " ", page, flags=re.S)
            left = re.findall(r"\$[^$<>\n]{1,80}\$", text_of(prose))
            assert left == [], f"{chapter} ({lang}): TeX left as text: {left[:5]}"
            assert "\\frac" not in text_of(prose) and "\\sqrt" not in text_of(prose)
    assert not any("maths: unknown TeX" in w for ws in site.warnings.values() for w in ws), site.warnings


# ------------------------------------------------------------------ search


def search_index(out: Path, lang: str) -> dict:
    text = (out / site_mod.PREFIX[lang] / "searchindex.js").read_text(encoding="utf-8")
    return json.loads(text[text.index("(") + 1:text.rindex(")")])


def found(index: dict, word: str) -> set[str]:
    docs = set()
    for table in ("terms", "titleterms"):
        hit = index[table].get(word)
        docs.update(index["docnames"][i] for i in ([hit] if isinstance(hit, int) else hit or []))
    return docs


def test_the_search_index_has_chinese_and_english_words_of_the_chapter(site):
    zh, en = search_index(site.out, "zh"), search_index(site.out, "en")
    assert "chapters/ch01_attention" in found(zh, "注意力")                # cut out of Chinese text by jieba
    assert "chapters/ch01_attention" in found(zh, "softmax")
    assert "chapters/ch01_attention" in found(en, "attent")                # "attention", stemmed
    assert "chapters/ch01_attention" in found(en, "softmax")
    assert "guides/instructor" in found(zh, "评分")


# ------------------------------------------------------------------ in Chromium


needs_browser = pytest.mark.skipif(browser.skip_reason() is not None, reason=str(browser.skip_reason()))


@pytest.fixture(scope="module")
def served(site):
    """The site over HTTP on localhost, as a static host serves it."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(site.out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture
def tab(chromium, served):
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    outside = []

    def route(r):
        if r.request.url.startswith((served, "data:")):
            return r.continue_()
        outside.append(r.request.url)
        return r.abort()
    context.route("**/*", route)
    page = context.new_page()
    page.outside = outside
    yield page
    context.close()
    assert outside == [], f"the site asked the network for {outside}"


@needs_browser
def test_in_chromium_pages_load_cleanly_the_switch_leads_to_the_twin_and_axe_finds_nothing(tab, served):
    console = browser.Console(tab)
    chapter = CHAPTERS[0]
    tab.goto(served + f"chapters/{chapter}.html")
    tab.wait_for_load_state("load")
    assert tab.locator("html").get_attribute("lang") == "zh-CN"
    assert tab.locator("article math").count() >= 5 and tab.locator("button.copybtn").count() >= 5
    browser.shot(tab, "site_chapter_zh")
    found = browser.axe(tab)
    assert found == [], "zh:\n" + browser.axe_report(found)
    tab.click("a.course-lang-switch")
    tab.wait_for_load_state("load")
    assert tab.url == served + f"en/chapters/{chapter}.html"
    assert tab.locator("html").get_attribute("lang") == "en"
    browser.shot(tab, "site_chapter_en")
    found = browser.axe(tab)
    assert found == [], "en:\n" + browser.axe_report(found)
    tab.click("a.course-lang-switch")
    tab.wait_for_load_state("load")
    assert tab.url == served + f"chapters/{chapter}.html"
    for path in ("index.html", "en/index.html", "guides/instructor.html", "en/guides/student.html"):
        tab.goto(served + path)
        tab.wait_for_load_state("load")
    assert console.errors == []


@needs_browser
@pytest.mark.parametrize("lang, word", [("zh", "注意力"), ("en", "attention")])
def test_in_chromium_the_search_finds_the_chapter(tab, served, lang, word):
    console = browser.Console(tab)
    tab.goto(served + f"{site_mod.PREFIX[lang]}search.html?q={word}")
    results = tab.locator("#search-results a")
    results.first.wait_for(timeout=20000)
    hrefs = [results.nth(i).get_attribute("href") for i in range(results.count())]
    assert any(f"chapters/{CHAPTERS[0]}.html" in h for h in hrefs), hrefs
    browser.shot(tab, f"site_search_{lang}")
    assert console.errors == []


def test_make_site_and_course_py_site_are_wired():
    import course
    from coursekit import cli

    assert course.available("site") and "site" in course.help_text()
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "\nsite:" in makefile and "course.py site $(CHAPTERS)" in makefile
    assert "/_site/" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    with pytest.raises(SystemExit) as done:
        cli.main(["site", "--help"])
    assert done.value.code == 0
