"""The feedback page: nbgrader's generate_feedback with the course's steps and
template (coursekit/grade/templates/course_feedback), configured in nbgrader_config.py.

- ``CourseFrame`` gives the page its frame in the chapter's language: the
  title, the one score of coursekit.report.score, and for each graded or answer cell
  its exercise, its score ("3 / 3 分", "待批改（3 分）", "未作答（0 / 3 分）")
  and the instructor's comment, if any.
- ``StudentOutputs`` makes the outputs fit for a student to read: no seals,
  no verdict or bug tokens, no exception class in front of the course's own
  message, and no hidden test code in an error of a test cell (an error there
  keeps only its message: a traceback would quote the failing hidden line);
  no widget models or scripts (a static page cannot run them: a widget's
  static picture shows instead); maths in markdown as MathML, which browsers
  draw offline.
- ``clean_html`` is the allow-list nbconvert's sanitising uses on this page:
  whatever a student wrote in markdown or made a cell display reaches the
  page as text or as harmless markup, never as a script or an event handler;
  the course's figures (images) and maths (MathML) stay.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import jinja2
from nbconvert import HTMLExporter
from nbgrader.preprocessors import NbGraderPreprocessor

from grading import protocol

from ..base import mathml
from ..report import score as score_mod
from ..report.words import HTML_LANG, word
from .parts import Kept

ANSI = re.compile(r"\x1b\[[0-9;]*m")
TOKENS = re.compile(r"(?<=：)\s*\[(?:bug|verdict):[A-Za-z0-9_\-]+\]\s*|\s?\[(?:bug|verdict):[A-Za-z0-9_\-]+\]")
COURSE_ERRORS = ("GradingFailure", "CheckFailed", "NotDoneYet")   # their message is the whole story
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
SCRIPTS = ("application/javascript", "text/javascript", WIDGET_VIEW)
NO_RESPONSE = "No response."     # nbgrader's own comment on an answer left as it was


def for_student(text: str) -> str:
    """A kernel's text as a student reads it: no seals, no tokens, no colour codes."""
    return TOKENS.sub("", protocol.SEAL_RE.sub("", ANSI.sub("", text)))


# ------------------------------------------------------------------ the frame

TEMPLATES = Path(__file__).parent / "templates"
TEMPLATE = "course_feedback"


def toc_labels(nb, lang: str) -> dict[str, str]:
    """grade id -> "exercise heading · kind" for every graded or answer cell."""
    from helpers.outline import exercise_titles
    titles = exercise_titles(nb, answers=True)
    labels = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        gid = meta.get("grade_id")
        if gid not in titles:
            continue
        kind = "task" if meta.get("task") else "your_answer" if meta.get("solution") else "test"
        labels[gid] = f"{titles[gid] or gid} · {word(kind, lang)}"
    return labels


def inline_code(text: str) -> str:
    """``text`` as HTML, escaped, with each `code span` of its markdown shown as code,
    as the page's own headings show it (an exercise title names its function so)."""
    import html
    parts = re.split(r"`([^`]+)`", text)
    return "".join(f"<code>{html.escape(p)}</code>" if i % 2 else html.escape(p) for i, p in enumerate(parts))


class CourseFrame(NbGraderPreprocessor):
    """Put the page's frame into ``resources["course"]`` and each graded or
    answer cell's into ``cell.metadata.course_frame`` (run after nbgrader's
    GetGrades, which has put the comments there)."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        with _gradebook_at(info["db_url"]) as gb:
            st = score_mod.find(gb, info["assignment"], info["student"])
        return frame(nb, resources, st)


def frame(nb, resources, st):
    """The frame of ``nb``'s page for the submission whose score is ``st``."""
    lang = nb.metadata.get("course", {}).get("lang", "zh")
    chapter = resources.get("nbgrader", {}).get("notebook", "")
    resources["course"] = {
        "lang": lang, "html_lang": HTML_LANG.get(lang, lang), "title": word("feedback_title", lang, chapter=chapter),
        "total_word": word("total", lang), "score_line": st.line(lang) if st else "",
        "contents": word("contents", lang), "to_top": word("to_top", lang), "comments": word("comments", lang),
        "late_penalty": word("late_penalty", lang), "input": word("input", lang)}
    labels = toc_labels(nb, lang)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        gid = meta.get("grade_id")
        if gid not in labels:
            continue
        cs = st.cell(gid) if st else None
        comment = meta.get("comment") or ""
        comment = "" if comment.strip() == NO_RESPONSE else comment
        if meta.get("grade") and cell.cell_type == "code":
            cell.metadata["tags"] = [*cell.metadata.get("tags", []), "graded"]   # the page marks the graded cells
        cell.metadata["course_frame"] = {
            "anchor": gid, "label": labels[gid], "toc": f"{labels[gid]} ({gid})",
            "label_html": inline_code(labels[gid]), "toc_html": inline_code(f"{labels[gid]} ({gid})"),
            "status": cs.status if cs else "", "score": cs.label(lang) if cs else "", "comment": comment,
            "comment_toc": word("comment_on", lang, exercise=labels[gid]) if comment else "",
            "comment_toc_html": inline_code(word("comment_on", lang, exercise=labels[gid])) if comment else ""}
    return nb, resources


def _gradebook_at(db_url: str):
    from nbgrader.api import Gradebook
    return Gradebook(db_url)


class StudentOutputs(NbGraderPreprocessor):
    """What the outputs say, fit for the student (see the module's docstring)."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown":
            cell.source = markdown_math(cell.source)
        if cell.cell_type != "code":
            return cell, resources
        meta = cell.metadata.get("nbgrader", {})
        lang = resources.get("course", {}).get("lang", "zh")
        test_cell = "### BEGIN HIDDEN TESTS" in cell.source or meta.get("grade")
        outputs = []
        for out in cell.get("outputs", []):
            kind = out.get("output_type")
            if kind == "stream":
                out["text"] = for_student(out.get("text", ""))
                if not out["text"].strip():
                    continue
            elif kind == "error":
                message = for_student(str(out.get("evalue", ""))).strip()
                if out.get("ename") in COURSE_ERRORS:
                    out["traceback"] = [message]
                else:
                    out["traceback"] = [error_line(out.get("ename", "Error"), message, lang, test_cell)]
            elif kind in ("display_data", "execute_result"):
                data = out.get("data", {})
                for mime in SCRIPTS:
                    if mime in data and len(data) > 1:
                        del data[mime]      # the static picture (or text) beside it shows instead
                if not data or set(data) <= set(SCRIPTS):
                    continue
                if "text/plain" in data:
                    data["text/plain"] = for_student(data["text/plain"])
            if kind == "stream" and outputs and outputs[-1].get("output_type") == "stream" \
                    and outputs[-1].get("name") == out.get("name"):
                outputs[-1]["text"] += out["text"]     # one box for what was printed together
                continue
            outputs.append(out)
        cell["outputs"] = outputs
        return cell, resources


def error_line(ename: str, message: str, lang: str, test_cell: bool) -> str:
    """An error that is not one of the course's own messages, in one line: an
    exercise not done yet, a name an earlier unfinished cell did not make, or
    the error quoted after the chapter's own words (never a traceback: a test
    cell's would quote hidden test code, a demo's would bury the cause)."""
    if ename == "NotImplementedError" and not message:
        return word("needs_unfinished", lang)
    found = re.match(r"name '(\w+)' is not defined", message)
    if ename == "NameError" and found and not test_cell:
        return word("name_missing", lang, name=found.group(1))
    return word("cell_error", lang, error=f"{ename}: {message}")


# ------------------------------------------------------------------ what markup may reach the page

MATHML = ("math", "semantics", "annotation", "mrow", "mi", "mo", "mn", "ms", "mtext", "msup", "msub", "msubsup",
          "mfrac", "msqrt", "mroot", "mover", "munder", "munderover", "mtable", "mtr", "mtd", "mspace", "mstyle",
          "mpadded", "mphantom", "menclose")
TAGS = frozenset({"a", "abbr", "b", "blockquote", "br", "caption", "code", "dd", "del", "details", "div", "dl",
                  "dt", "em", "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins",
                  "kbd", "li", "ol", "p", "pre", "q", "s", "samp", "small", "span", "strong", "sub", "summary",
                  "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "u", "ul", "var", *MATHML})
ATTRIBUTES = {"*": ["class", "id", "title", "lang", "dir", "aria-label", "aria-hidden", "role"],
              "a": ["href", "name", "rel"], "img": ["src", "alt", "width", "height"],
              "td": ["colspan", "rowspan", "align"], "th": ["colspan", "rowspan", "align", "scope"],
              "ol": ["start", "type"], "math": ["display", "xmlns"], "annotation": ["encoding"],
              "mi": ["mathvariant", "style"], "mo": ["stretchy", "fence", "separator", "lspace", "rspace", "form", "minsize", "maxsize", "movablelimits"],
              "mspace": ["width"], "mstyle": ["mathvariant", "displaystyle", "scriptlevel"],
              "mover": ["accent"], "munder": ["accentunder"], "mtable": ["columnalign", "rowspacing"],
              "mtd": ["columnalign"], "mtext": ["mathvariant"], "mn": ["mathvariant"]}
PROTOCOLS = frozenset({"http", "https", "mailto", "data"})


def _allowed(tag: str, name: str, value: str) -> bool:
    allowed = ATTRIBUTES.get(tag, []) + ATTRIBUTES["*"]
    if name not in allowed:
        return False
    if name in ("href", "src") and value.strip().lower().startswith("data:"):
        return tag == "img" and value.strip().lower().startswith("data:image/") \
            and not value.strip().lower().startswith("data:image/svg")
    return True


def clean_html(text) -> str:
    """``text`` with only the allow-listed tags and attributes left (others
    escaped, so a student sees what they wrote); no scripts, no event handlers,
    no javascript: links; maths (MathML) and images kept."""
    text = text.decode() if isinstance(text, bytes) else str(text)
    return _CLEANED.get(text, lambda: _clean_html(text))


def _clean_html(text: str) -> str:
    import bleach
    from bleach.css_sanitizer import CSSSanitizer

    return bleach.clean(text, tags=TAGS, attributes=_allowed, protocols=PROTOCOLS, strip_comments=True,
                        css_sanitizer=CSSSanitizer(allowed_css_properties=["font-weight", "font-style", "color"]))


# ------------------------------------------------------------------ the template

def nbgrader_templates() -> Path:
    import nbgrader
    return Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"


class _Compiled(jinja2.BytecodeCache):
    """Jinja's compiled templates, kept in memory for the life of the process:
    every page gets a fresh exporter (nbgrader makes one per notebook), and
    compiling a page's templates again took a quarter of its time. Jinja
    checks each template's source against what was compiled."""

    def __init__(self):
        self.store: dict[str, bytes] = {}

    def load_bytecode(self, bucket):
        if bucket.key in self.store:
            bucket.bytecode_from_string(self.store[bucket.key])

    def dump_bytecode(self, bucket):
        self.store[bucket.key] = bucket.bytecode_to_string()


_COMPILED = _Compiled()


class PageExporter(HTMLExporter):
    """nbconvert's HTMLExporter whose templates compile once per process, and
    which does not read its own page back in.

    HTMLExporter.from_notebook_node parses the finished page with BeautifulSoup
    to give an image without a text alternative nbconvert's placeholder and
    JupyterLab's cells a tabindex, then writes the whole page out again: 45 %
    of a feedback page's time. The course's template is nbgrader's classic one
    (no JupyterLab cells) and every figure the course draws has its own text,
    so what is left of that pass, the placeholder, is done on the page's
    ``<img>`` tags alone (``_alt_for_images``). The rest is HTMLExporter's, step
    for step (nbconvert 7.17)."""

    def _create_environment(self):
        env = super()._create_environment()
        env.bytecode_cache = _COMPILED
        return env

    def from_notebook_node(self, nb, resources=None, **kw):
        from nbconvert.exporters.templateexporter import TemplateExporter
        from nbconvert.filters.highlight import Highlight2HTML
        from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter

        langinfo = nb.metadata.get("language_info", {})
        lexer = langinfo.get("pygments_lexer", langinfo.get("name", None))
        self.register_filter("highlight_code", _Remembered(self.filters.get(
            "highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self))))
        resources = self._init_resources(resources)
        self.register_filter("filter_data_type", WidgetsDataTypeFilter(
            notebook_metadata=self._nb_metadata, parent=self, resources=resources))
        page, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        return _alt_for_images(page), resources

    @jinja2.pass_context
    def markdown2html(self, context, source):
        """A markdown cell's HTML, once per process for each text and context (the
        chapter's own cells are the same on every student's page)."""
        cell = context.get("cell", {})
        path = context.get("resources", {}).get("metadata", {}).get("path") if self.embed_images else None
        key = json.dumps([source, cell.get("attachments", {}), path, self.anchor_link_text,
                          self.exclude_anchor_links, self.lexer_options], sort_keys=True, default=str)
        return _MARKDOWN.get(key, lambda: super(PageExporter, self).markdown2html(context, source))


_MARKDOWN = Kept("markdown")
_MATHML = Kept("mathml")


def markdown_math(source: str) -> str:
    """The markdown with its maths as MathML (coursekit.base.mathml), kept (coursekit.grade.parts):
    a chapter's text is on every student's page."""
    return _MATHML.get(source, lambda: mathml.markdown_math(source))


_CLEANED = Kept("clean")
_IMG = re.compile(r"<img\b(?![^>]*\balt\s*=)", re.IGNORECASE)


def _alt_for_images(page: str) -> str:
    """An ``<img>`` with no text alternative gets nbconvert's placeholder, as HTMLExporter gives it."""
    return _IMG.sub('<img alt="No description has been provided for this image"', page)


class _Remembered:
    """A highlighting filter whose results are kept (``parts.Kept``): the chapter's
    own code cells are the same on every student's page."""

    kept = Kept("highlight")

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, source, language=None, metadata=None):
        key = json.dumps([getattr(self.inner, "pygments_lexer", None), source, language,
                          (metadata or {}).get("magics_language")])
        return self.kept.get(key, lambda: self.inner(source, language, metadata))


def template_config():
    """The exporter settings of the course's feedback page."""
    from traitlets.config import Config
    c = Config()
    c.HTMLExporter.template_name = TEMPLATE
    c.HTMLExporter.extra_template_basedirs = [str(TEMPLATES), str(nbgrader_templates())]
    c.HTMLExporter.extra_template_paths = [str(nbgrader_templates()),
                                           str(nbgrader_templates().parent / "static" / "node_modules" / "bootstrap"
                                               / "dist" / "css")]
    c.HTMLExporter.sanitize_html = True
    c.HTMLExporter.exclude_input_prompt = True
    c.HTMLExporter.exclude_output_prompt = True
    c.HTMLExporter.filters = {"clean_html": f"{__name__}.clean_html"}
    return c


def use_course_template(converter) -> None:
    """Make ``converter`` (an nbgrader GenerateFeedback, after its __init__)
    write its pages with the course's template and allow-list: ours is found
    first, and nbgrader's feedback template, which it extends, by its folder."""
    c = template_config()
    c.HTMLExporter.extra_template_paths = [*converter.config.HTMLExporter.get("extra_template_paths", []),
                                           *c.HTMLExporter.extra_template_paths]
    converter.update_config(c)
    converter.exporter_class = PageExporter
    names = [p if isinstance(p, str) else f"{p.__module__}.{p.__name__}" for p in converter.preprocessors]
    if f"{__name__}.CourseFrame" not in names:   # a course folder whose nbgrader_config.py predates it
        at = next((i + 1 for i, n in enumerate(names) if n.endswith("GetGrades")), 0)
        converter.preprocessors = [*converter.preprocessors[:at], CourseFrame, *converter.preprocessors[at:]]



def pages(payload: dict) -> int:
    """``nbgrader generate_feedback`` for each (chapter, student) of ``payload["notebooks"]``,
    in one process (coursekit.base.batch; run by the pipeline's feedback step, forked)."""
    from nbgrader.converters import GenerateFeedback

    from ..base.batch import convert_each, nbgrader_subapp

    class CourseFeedback(GenerateFeedback):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            use_course_template(self)   # the page names each exercise

    pairs = [tuple(p) for p in payload["notebooks"]]
    sub = nbgrader_subapp("generate_feedback", pairs[0][0], [])
    return convert_each(CourseFeedback, sub, pairs, lambda p: {"assignment_id": p[0], "student_id": p[1]})


def pages_aside(payload: dict) -> int:
    """``pages`` at the lowest priority: made while notebooks are still being
    graded, they take only the time the graded kernels leave."""
    from ..base import runner
    runner.lowest_priority()
    return pages(payload)


def page(nb, st=None, chapter: str = "") -> str:
    """The feedback page of ``nb`` for the score ``st``, without a gradebook
    (what the feedback step writes, for a notebook already graded)."""
    from nbgrader.preprocessors import ClearHiddenTests

    exporter = PageExporter(config=template_config())
    resources = {"nbgrader": {"notebook": chapter, "score": st.score if st else 0,
                              "max_score": st.max_score if st else 0, "late_penalty": 0}}
    nb, resources = frame(nb, resources, st)
    nb, resources = StudentOutputs().preprocess(nb, resources)
    nb, resources = ClearHiddenTests().preprocess(nb, resources)
    body, _ = exporter.from_notebook_node(nb, resources=resources)
    return body
