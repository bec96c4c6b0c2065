"""The course website (`make site`, coursekit/author/site.py).

One build per test session into a temporary folder: chapter 1 (a widget, a
figure, maths, four exercises) and every guide, in both languages
(``COURSE_SITE_CHAPTERS="ch01_attention ch04_positions"`` builds others). The
chapter's run is cached in .cache/site/runs/, so only the first session pays
for it. Then: every page has its twin in the other language and a switch that
leads to it; every guide is written in both languages and the Chinese site has
no page in English; a chapter page opens on the chapter, its set-up cells left
out or folded; no line of a model answer, a hidden test or the chapter's grading
module is in any file of the site; figures are images with text alternatives;
widgets are stills with the sentence; maths is MathML, a formula is on the page
and in the search index once, as drawn, never as TeX, and nothing is loaded
from the network; the search finds a Chinese and an English word; and, in
Chromium, pages load without console errors, the switch and the search work, a
search snippet shows a formula without its TeX, and axe-core finds no WCAG 2.1
A/AA violation on a zh and an en chapter page.
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
    assert "教师指南" in zh and "发布网站" in zh and "actions/deploy-pages" in zh
    assert "The instructor guide" in en and "Publishing the site" in en and "actions/deploy-pages" in en
    assert "学生指南" in text_of((site.out / "guides" / "student.html").read_text(encoding="utf-8"))


def test_every_guide_is_written_in_both_languages_and_each_site_shows_its_own(site):
    for name, files in site_mod.GUIDES.items():
        assert set(files) == set(build.LANGS), f"{name}: {files}"
        for lang, file in files.items():
            source = (ROOT / "docs" / file).read_text(encoding="utf-8")
            title = next(line[2:].strip() for line in source.splitlines() if line.startswith("# "))
            page = (site.out / site_mod.PREFIX[lang] / "guides" / f"{name}.html").read_text(encoding="utf-8")
            h1 = re.search(r"<h1>(.*?)<a class=\"headerlink\"", page, flags=re.S)
            assert h1 and text_of(h1.group(1)).strip() == title, f"{lang}/guides/{name}.html is not docs/{file}"


def main_text(page: str) -> str:
    """What a reader reads in a page's main text: its article, less code, maths, scripts."""
    m = re.search(r'<article\b[^>]*role="main"[^>]*>(.*?)</article>', page, flags=re.S)
    article = re.sub(r"<(pre|code|math|script|style)\b.*?</\1>", " ", m.group(1) if m else "", flags=re.S)
    return text_of(article)


def cjk_share(text: str) -> float:
    """The share of Chinese characters among the letters of ``text`` (Latin letters counted one by one)."""
    cjk = len(re.findall(r"[\u3400-\u9fff\u3000-\u303f\uff00-\uffef]", text))
    return cjk / max(1, cjk + len(re.findall(r"[A-Za-z]", text)))


def test_the_chinese_site_has_no_page_in_english_and_the_english_site_none_in_chinese(site):
    """Every page of the Chinese site (all of _site/ but en/) is mostly Chinese in its main
    text, code and maths aside; every page of the English site is English."""
    shares = {}
    for lang in build.LANGS:
        for rel in pages(site.out, lang):
            page = (site.out / site_mod.PREFIX[lang] / rel).read_text(encoding="utf-8")
            shares[f"{lang}/{rel}"] = (lang, round(cjk_share(main_text(page)), 2))
    assert len(shares) >= 2 * (len(CHAPTERS) + len(site_mod.GUIDES) + 2)
    english = {p: s for p, (lang, s) in shares.items() if lang == "zh" and s < 0.5}
    chinese = {p: s for p, (lang, s) in shares.items() if lang == "en" and s > 0.1}
    assert english == {}, f"pages of the Chinese site mostly in English: {english}"
    assert chinese == {}, f"pages of the English site mostly in Chinese: {chinese}"


def test_the_measure_tells_a_chinese_page_from_an_english_one():
    zh = '<article role="main"><h1>教师指南</h1><p>只在 <code>notebooks/</code> 里编辑章节，然后运行 make source。</p></article>'
    en = '<article role="main"><h1>The instructor guide</h1><p>Edit a chapter in notebooks/ (必须).</p></article>'
    assert cjk_share(main_text(zh)) > 0.5 > 0.1 > cjk_share(main_text(en))


def code_blocks(page: str) -> list[tuple[bool, str]]:
    """(folded, code) for each highlighted code block of a page's article, in order;
    folded: inside a <details> a reader opens."""
    article = page[page.index("<article"):page.index("</article>")]
    spans = [m.span() for m in re.finditer(r"<details\b.*?</details>", article, flags=re.S)]
    out = []
    for m in re.finditer(r'<div class="highlight[^"]*"><pre[^>]*>(.*?)</pre>', article, flags=re.S):
        folded = any(a <= m.start() < b for a, b in spans)
        out.append((folded, text_of(m.group(1))))
    return out


def test_set_up_cells_are_folded_or_left_out_of_the_page_and_stay_in_the_notebook(site):
    """A chapter page starts with the chapter, not with its imports and
    ``set_language("zh")``: the language cell is left out, the other set-up cells
    (imports, plot style, seed) are folded under a line in the page's language.
    The student's notebook keeps them all."""
    for chapter in CHAPTERS:
        for lang in build.LANGS:
            kinds = [site_mod.setup_kind(c.source) for c in site_mod.student_notebook(chapter, lang).cells
                     if c.cell_type == "code"]
            assert "language" in kinds and "setup" in kinds, f"{chapter} ({lang}): no set-up cells to fold"
            page = (site.out / site_mod.PREFIX[lang] / "chapters" / f"{chapter}.html").read_text(encoding="utf-8")
            blocks = code_blocks(page)
            assert blocks, f"{chapter} ({lang}): no code on the page"
            shown = [code for folded, code in blocks if not folded]
            assert not [code for code in shown if site_mod.setup_kind(code)], \
                f"{chapter} ({lang}): set-up code shown unfolded: {[c[:80] for c in shown if site_mod.setup_kind(c)]}"
            assert not re.search(r"\bset_language\(", text_of(page)), f"{chapter} ({lang}): set_language(...) shown"
            folded = [code for is_folded, code in blocks if is_folded]
            assert any("import" in code for code in folded), f"{chapter} ({lang}): the imports are not folded"
            summaries = re.findall(r"<summary\b[^>]*>(.*?)</summary>", page, flags=re.S)
            assert any(site_mod.TEXT[lang]["setup_show"] in text_of(s) for s in summaries), summaries
            assert 'aria-label="Toggle hidden content"' not in page    # the toggle is named by its line


def test_what_counts_as_a_set_up_cell():
    kind = site_mod.setup_kind
    assert kind('set_language("zh")') == "language"
    assert kind("import torch\nfrom helpers import plots\n\nplots.setup()\n_ = torch.manual_seed(0)") == "setup"
    assert kind("from helpers import set_language, t\nset_language('en')") == "setup"
    assert kind('from helpers.probes import Probes\nprobes = Probes("ch02_causal_mask")') == "setup"
    for not_setup in ("import torch\nx = torch.ones(3)", "plots.setup()\nprint(1)", "%matplotlib inline",
                      "", "scores = keys @ query", "torch.manual_seed(0)\nshow(x)", "probes = Probes('x')",
                      "from helpers import ed\nmodel = ed.train()", "from helpers import run\nx = run()[0]"):
        assert kind(not_setup) is None, not_setup


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


ANNOTATION = re.compile(r"<annotation\b.*?</annotation>", re.S)


def test_a_formula_is_on_the_page_once_without_its_tex(site):
    """What a reader's browser reads of a formula (the page's text, which is also what
    the search shows around a word) is the drawn formula, never its TeX beside it."""
    for path in site.out.rglob("*.html"):
        page = path.read_text(encoding="utf-8")
        assert "<annotation" not in page, f"{path}: a formula carries its TeX"
    for chapter in CHAPTERS:
        for lang in build.LANGS:
            page = (site.out / site_mod.PREFIX[lang] / "chapters" / f"{chapter}.html").read_text(encoding="utf-8")
            prose = re.sub(r"<(pre|code)\b.*?</\1>", " ", page, flags=re.S)      # maths kept
            tex = re.findall(r"\\[A-Za-z]{2,}", text_of(prose))
            assert tex == [], f"{chapter} ({lang}): TeX in the page's text: {tex[:5]}"


def test_the_search_index_holds_formulas_as_read_and_never_their_tex(site):
    """Sphinx indexes a page from its document tree: a formula's TeX gave the index
    words no reader sees (mathrm, mathbf, qquad). The chapter's TeX commands that are
    no word of the page as drawn are not in the index; the words of the drawn
    formulas are."""
    for chapter in CHAPTERS:
        for lang in build.LANGS:
            maths = [m for c in build.build_chapter(chapter, lang).cells if c.cell_type == "markdown"
                     for m in re.findall(r"\$\$?([^$]+)\$\$?", c.source)]
            commands = {name.lower() for m in maths for name in re.findall(r"\\([A-Za-z]{2,})", m)}
            page = (site.out / site_mod.PREFIX[lang] / "chapters" / f"{chapter}.html").read_text(encoding="utf-8")
            drawn = text_of(ANNOTATION.sub(" ", page))
            unseen = commands - set(re.findall(r"[a-z]+", drawn.lower()))
            assert len(unseen) >= 3, f"{chapter} ({lang}): too few TeX-only words to look for: {unseen}"
            index = search_index(site.out, lang)
            doc = f"chapters/{chapter}"
            assert sorted(w for w in unseen if doc in found(index, w)) == [], f"{chapter} ({lang}): TeX indexed"
            formulas = re.findall(r"<math\b.*?</math>", ANNOTATION.sub(" ", page), flags=re.S)
            words = {w for f in formulas for w in re.findall(r"[a-z]{3,}", text_of(f).lower())}
            assert any(doc in found(index, w) for w in words), f"{chapter} ({lang}): no formula's word indexed"


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


@needs_browser
@pytest.mark.parametrize("lang, word", [("zh", "推导"), ("en", "derive")])
def test_in_chromium_a_search_snippet_shows_a_formula_once_without_tex(tab, served, lang, word):
    """The snippet under a search result is the page's text around the word: a formula
    there is the drawn one, not drawn and TeX run together."""
    console = browser.Console(tab)
    chapter = CHAPTERS[0]
    tab.goto(served + f"{site_mod.PREFIX[lang]}chapters/{chapter}.html")
    formulas = [f.strip() for f in tab.locator("article math").all_text_contents()]
    tab.goto(served + f"{site_mod.PREFIX[lang]}search.html?q={word}")
    hit = tab.locator("#search-results li", has=tab.locator(f'a[href*="chapters/{chapter}.html"]'))
    snippet = hit.locator("p.context")
    snippet.first.wait_for(timeout=20000)
    text = snippet.first.text_content()
    browser.shot(tab, f"site_search_snippet_{lang}")
    shown = [f for f in formulas if len(f) >= 4 and f in text]
    assert shown, f"no formula in the snippet for {word!r}: {text!r}"
    assert not re.search(r"\\[A-Za-z]+", text), f"TeX in the snippet: {text!r}"
    for f in shown:
        assert text.count(f) == 1 or formulas.count(f) > 1, f"{f!r} twice in {text!r}"
    assert console.errors == []


@needs_browser
def test_in_chromium_a_chapter_page_opens_on_the_chapter_with_its_set_up_folded(tab, served):
    chapter = CHAPTERS[0]
    for lang in build.LANGS:
        tab.goto(served + f"{site_mod.PREFIX[lang]}chapters/{chapter}.html")
        tab.wait_for_load_state("load")
        folds = tab.locator("article details.hide")
        assert folds.count() >= 1, f"{lang}: nothing folded"
        fold = folds.first
        assert fold.locator("summary").inner_text().strip() == site_mod.TEXT[lang]["setup_show"]
        assert not fold.locator("pre").first.is_visible()           # folded
        browser.shot(tab, f"site_chapter_top_{lang}")
        fold.locator("summary").click()
        assert "import" in fold.locator("pre").first.inner_text()
        assert fold.locator("summary").inner_text().strip() == site_mod.TEXT[lang]["setup_hide"]


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


@needs_browser
@pytest.mark.parametrize("lang", build.LANGS)
def test_in_chromium_an_exercises_hints_are_folded_until_opened(tab, served, lang):
    """The hints under an exercise are <details>: the page shows only their summaries
    ("提示 1：…" / "Hint 1: …") until the reader opens one."""
    chapter = CHAPTERS[0]
    tab.goto(served + ("" if lang == "zh" else "en/") + f"chapters/{chapter}.html")
    tab.wait_for_load_state("load")
    hints = tab.locator("article details", has=tab.locator("summary", has_text=re.compile(r"^\s*(提示|Hint) 1")))
    assert hints.count() >= 1, "no folded hint on the page"
    hint = hints.first
    hint.scroll_into_view_if_needed()
    body = hint.locator("p").first
    assert hint.get_attribute("open") is None and not body.is_visible()
    hint.locator("summary").click()
    tab.wait_for_function("d => d.open", arg=hint.element_handle())
    assert body.is_visible() and body.inner_text().strip()
    browser.shot(hint, f"site_hint_opened_{lang}")
