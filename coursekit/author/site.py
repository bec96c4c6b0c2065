"""The course as a static bilingual website: ``make site`` (``python course.py site``).

Why Sphinx + MyST-NB: the chapters are already Jupyter notebooks written in MyST
markdown, and MyST-NB (the Executable Books project, the renderer under Jupyter
Book 1.x) is the maintained Sphinx extension made to render notebooks with their
stored outputs. Plain Sphinx gives what the site needs without a JavaScript
build step or a download: one build per language (``language``), a search index
whose Chinese words are cut by jieba, a theme (Furo) that bundles every asset it
uses, and an extension point for maths, which this module fills with MathML
written at build time (``coursekit.base.mathml``), so no page loads MathJax
from a CDN. Jupyter Book 2 / MyST-JS would need Node and a theme fetched at
build time.

What is built, from the same ``notebooks/chNN_*.md`` as ``source/``/``release/``:

    _site/                   the Chinese site (the default language)
    _site/en/                the English site, page for page the same
    _site/**/chapters/chNN_*.html   each chapter as a student receives it
    _site/**/guides/*.html   the guides in docs/ (student, instructor, accessibility, benchmarks, deploy)

A chapter page is the STUDENT's notebook of that language (the release:
nbgrader's ClearSolutions and ClearHiddenTests applied to the language's build,
exactly what ``make release`` gives), never the solution. Its lecture cells
show the outputs of a run of the solution build (the lecture after an exercise
needs the exercise done), but only of cells that are neither answers nor tests;
errors and stderr are left out. A widget shows the still picture of its first
state that ``helpers.plots.show_widget`` puts beside it, with one line saying it
is live in JupyterLab. The cells that only ready the kernel are not what a reader
needs first: the one that sets the notebook's language is left off the page, the
imports and the like are folded under a line that opens them (``fold_setup``).
Runs are cached under ``.cache/site/`` by the hash of the built notebook and the
helpers, so a rebuild after a text edit reruns nothing.
"""
from __future__ import annotations

import ast
import copy
import hashlib
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..base import syntax
from . import build

ROOT = build.ROOT
CACHE = ROOT / ".cache" / "site"
OUT = ROOT / "_site"
CODE_STUB = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}   # nbgrader_config.py's
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
SPHINX_LANG = {"zh": "zh_CN", "en": "en"}
PREFIX = {"zh": "", "en": "en/"}           # where each language's site lies under the output folder

# guide page -> its file in docs/ per language: every guide is written in both, and each
# language's site shows its own (the Chinese site never falls back to an English page)
GUIDES = {name: {"zh": f"{name}.zh.md", "en": f"{name}.md"}
          for name in ("student", "instructor", "accessibility", "benchmarks", "deploy")}

TEXT = {
    "zh": {
        "title": "Transformer，由你亲手写出来",
        "intro": "一门自动评分的 Jupyter 课程：从 √d_k 背后的方差推导，一路写到在笔记本电脑 CPU 上训练的 GPT。"
                 "这里可以直接阅读每一章；练习和隐藏测试在你自己的 JupyterLab 里运行（见[学生指南](guides/student.md)）。",
        "chapters": "章节",
        "guides": "指南",
        "minutes": "预计学习时间：约 {m} 分钟",
        "minutes_why": "（阅读约 {r} 分钟，运行和观察 {c} 个代码单元，{n} 道练习每道约 15 分钟）",
        "run": "这一页是只读的：练习只给出起始代码，不含答案。要运行代码、拖动控件、做练习并检查答案，"
               "请下载学生包（或克隆课程）并运行 `make lab`（没有 make 时运行 `python course.py lab`），"
               "见[学生指南：如何运行一章](../guides/student.md)。",
        "widget": "上图是交互控件初始状态的静态图；在 JupyterLab 里运行这一章时，它是可以操作的。",
        "setup_show": "显示这一章导入的模块和准备工作",
        "setup_hide": "收起导入的模块和准备工作",
        "switch": "English",
        "switch_label": "切换到英文版（同一页）",
    },
    "en": {
        "title": "The Transformer, written by you",
        "intro": "An auto-graded Jupyter course: from the variance argument behind √d_k to a GPT trained on a "
                 "laptop CPU. Every chapter can be read here; its exercises and hidden tests run in your own "
                 "JupyterLab (see the [student guide](guides/student.md)).",
        "chapters": "Chapters",
        "guides": "Guides",
        "minutes": "Estimated study time: about {m} minutes",
        "minutes_why": " (reading about {r} minutes, running and looking at {c} code cells, "
                       "{n} exercises of about 15 minutes each)",
        "run": "This page is read-only: the exercises show their starting code, never the answer. To run the "
               "code, move the widgets, do the exercises and check your answers, get the student pack (or "
               "clone the course) and run `make lab` (without make: `python course.py lab`); see the "
               "[student guide: how to run a chapter](../guides/student.md).",
        "widget": "The picture above is the widget's first state; run the chapter in JupyterLab and it is live.",
        "setup_show": "Show the chapter's imports and set-up",
        "setup_hide": "Hide the imports and set-up",
        "switch": "中文",
        "switch_label": "切换到中文版（同一页）",
    },
}


# ------------------------------------------------------------------ the student's notebook


def student_notebook(chapter: str, lang: str):
    """The release notebook of ``lang``: ``make release`` in-process (nbgrader's own
    ClearSolutions and ClearHiddenTests on the language's build)."""
    from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions

    nb = build.build_chapter(chapter, lang)
    nb, _ = ClearSolutions(text_stub=build.TEXT_STUBS[lang], code_stub=CODE_STUB).preprocess(nb, {})
    nb, _ = ClearHiddenTests().preprocess(nb, {})
    return nb


def _is_exercise(cell) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return bool(meta.get("solution") or meta.get("grade") or meta.get("task"))


# ------------------------------------------------------------------ running the chapter (cached)


def _helpers_hash() -> str:
    h = hashlib.sha256()
    for path in sorted((ROOT / "helpers").rglob("*.py")):
        h.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def run_key(chapter: str, lang: str) -> str:
    """What a chapter's run depends on: its built notebook (solutions included) and the helpers."""
    nb = build.build_chapter(chapter, lang)
    h = hashlib.sha256(build.dumps(nb).encode())
    h.update(_helpers_hash().encode())
    return h.hexdigest()[:16]


def executed(chapter: str, lang: str, cache: Path = CACHE, timeout: int = 1800):
    """The solution build of ``chapter`` in ``lang``, run top to bottom in a kernel
    (cached under ``cache/runs/`` by run_key). Used only for its lecture cells' outputs."""
    from nbclient import NotebookClient

    path = Path(cache) / "runs" / f"{chapter}.{lang}.{run_key(chapter, lang)}.ipynb"
    if path.exists():
        return nbformat.read(path, as_version=4)
    nb = build.build_chapter(chapter, lang)
    env_before = os.environ.get("PYTHONPATH")
    with tempfile.TemporaryDirectory(prefix=f"site-{chapter}-") as work:
        os.environ["PYTHONPATH"] = str(ROOT) + (os.pathsep + env_before if env_before else "")
        try:
            client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                                    resources={"metadata": {"path": work}})
            client.execute()
        finally:
            if env_before is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = env_before
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in path.parent.glob(f"{chapter}.{lang}.*.ipynb"):
        old.unlink()
    tmp = path.with_suffix(".tmp")
    nbformat.write(nb, tmp)
    tmp.replace(path)
    return nb


# ------------------------------------------------------------------ the page


def _widget_still(output, lang: str):
    """A widget's output as its still picture (show_widget puts a PNG beside the widget) and one line."""
    data = output.get("data", {})
    png = data.get("image/png")
    alt = output.get("metadata", {}).get("image/png", {}).get("alt") or data.get("text/plain", "")
    note = html.escape(TEXT[lang]["widget"])
    if png:
        body = (f'<figure class="widget-still"><img src="data:image/png;base64,{png}" '
                f'alt="{html.escape(alt, quote=True)}"><figcaption>{note}</figcaption></figure>')
    else:
        body = f'<p class="widget-still">{note}</p>'
    return nbformat.v4.new_output("display_data", data={"text/html": body, "text/plain": alt or note})


def lecture_outputs(cell, lang: str) -> list:
    """The outputs a reader sees of a lecture cell: no errors, no stderr, widgets as stills."""
    kept = []
    for out in cell.get("outputs", []):
        kind = out.get("output_type")
        if kind == "error" or (kind == "stream" and out.get("name") != "stdout"):
            continue
        if kind in ("display_data", "execute_result"):
            if WIDGET_VIEW in out.get("data", {}):
                kept.append(_widget_still(out, lang))
                continue
            out = copy.deepcopy(out)
            out["data"] = {k: v for k, v in out["data"].items() if not k.startswith("application/vnd.jupyter")}
            if not out["data"]:
                continue
        kept.append(out)
    return kept


def _cjk(text: str) -> int:
    return len(re.findall(r"[\u3400-\u9fff]", text))


@dataclass
class StudyTime:
    minutes: int
    reading: int
    code_cells: int
    exercises: int


def study_time(chapter: str) -> StudyTime:
    """An estimate from the chapter itself (the same number in both languages): the Chinese
    text read at 300 characters a minute, a minute for each lecture code cell to run and look
    at, 15 minutes for each exercise (answer cell), rounded up to 5 minutes."""
    nb = build.build_chapter(chapter, "zh")
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    reading = max(1, round(_cjk(prose) / 300 + len(re.findall(r"[A-Za-z]+", prose)) / 200))
    code = sum(1 for c in nb.cells if c.cell_type == "code" and not _is_exercise(c))
    exercises = sum(1 for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    total = reading + code + 15 * exercises
    return StudyTime(-(-total // 5) * 5, reading, code, exercises)


# A set-up cell readies the kernel and shows nothing: imports, the chapter's language,
# the plots' style, a seed, an object of a class it imports (the visible tests' inputs).
# Its statements are imports; calls of SETUP_CALLS, alone or as ``_ = call(...)``; and
# ``name = Imported(...)`` for a name the cell imports with ``from ... import``.
SETUP_CALLS = frozenset({"set_language", "setup", "manual_seed", "seed", "filterwarnings", "set_printoptions"})


def setup_kind(source: str) -> str | None:
    """``"language"`` for a cell that only chooses the notebook's language
    (``set_language("zh")``), ``"setup"`` for any other set-up cell, None for the rest."""
    try:
        body = syntax.parse(source).body
    except SyntaxError:                       # IPython syntax (%magic): not plain set-up
        return None
    imported = {alias.asname or alias.name for stmt in body if isinstance(stmt, ast.ImportFrom)
                for alias in stmt.names}
    calls = []
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(stmt, ast.Expr):
            value, target = stmt.value, "_"
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            value, target = stmt.value, stmt.targets[0].id
        else:
            return None
        if not isinstance(value, ast.Call):
            return None
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        builds = target != "_" and isinstance(func, ast.Name) and func.id in imported
        if not (name in SETUP_CALLS and target == "_") and not builds:
            return None
        calls.append(name)
    if not body:
        return None
    return "language" if calls and set(calls) == {"set_language"} and len(calls) == len(body) else "setup"


def fold_setup(nb, lang: str) -> None:
    """What a reader needs first is the chapter, not its set-up: a cell that only sets
    the notebook's language is left out (the page is in its language already), and the
    other set-up cells (imports, plot style, seed) are folded under a line in the page's
    language. A set-up cell that printed something is left as it is. The notebook keeps
    them all."""
    words = TEXT[lang]
    kept = []
    for cell in nb.cells:
        kind = setup_kind(cell.source) if cell.cell_type == "code" and not _is_exercise(cell) else None
        if kind and not cell.get("outputs"):
            if kind == "language":
                continue
            cell.metadata.setdefault("tags", []).append("hide-input")
            cell.metadata["mystnb"] = {"code_prompt_show": words["setup_show"],
                                       "code_prompt_hide": words["setup_hide"]}
        kept.append(cell)
    nb.cells = kept


def page_notebook(chapter: str, lang: str, run=None):
    """The chapter page: the student's notebook, lecture outputs from ``run`` (an
    executed solution build, or None for none), its set-up cells folded, its study
    time and how to run it."""
    nb = student_notebook(chapter, lang)
    if run is not None:
        outputs = {c.id: c for c in run.cells if c.cell_type == "code"}
        for cell in nb.cells:
            if cell.cell_type == "code" and not _is_exercise(cell) and cell.id in outputs:
                cell.outputs = lecture_outputs(outputs[cell.id], lang)
    fold_setup(nb, lang)
    st = study_time(chapter)
    words = TEXT[lang]
    info = (f"**{words['minutes'].format(m=st.minutes)}**"
            f"{words['minutes_why'].format(r=st.reading, c=st.code_cells, n=st.exercises)}\n\n{words['run']}")
    cell = nbformat.v4.new_markdown_cell(info)
    cell.metadata = {"tags": ["course-site-info"]}
    nb.cells.insert(1, cell)
    nb.metadata.pop("widgets", None)
    nb.metadata["course"] = {"chapter": chapter, "lang": lang, "study_minutes": st.minutes}
    return nb


def chapter_title(nb) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return nb.metadata.get("course", {}).get("chapter", "")


# ------------------------------------------------------------------ the Sphinx project of one language


def guide_text(name: str, lang: str) -> str:
    """The guide's page in ``lang``, from its own file (a guide missing in a language stops the build)."""
    path = ROOT / "docs" / GUIDES[name][lang]
    if not path.exists():
        raise build.BuildError(f"site: the {name} guide has no {lang} text ({path.relative_to(ROOT)})")
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"\]\((\w+)\.zh\.md", r"](\1.md", text)          # links between guides: one page name
    text = re.sub(r"\n(-{3,}|\*{3,})\s*$", "\n", text)             # a closing rule: docutils refuses to end on one
    return text


def conf_py(lang: str) -> str:
    words = TEXT[lang]
    return f'''# Generated by coursekit/author/site.py: edit that, not this.
project = {words["title"]!r}
html_title = {words["title"]!r}
language = {SPHINX_LANG[lang]!r}
extensions = ["myst_nb", "sphinx_copybutton", "coursekit.author.site_sphinx"]
html_theme = "furo"
html_theme_options = {{"announcement": "lang"}}   # the bar the language switch is drawn in (site_theme)
html_use_index = False
course_lang = {lang!r}
course_prefix = {PREFIX!r}
nb_execution_mode = "off"
nb_ipywidgets_js = {{}}
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
html_math_renderer = "course_mathml"
html_copy_source = False
html_show_sourcelink = False
html_show_copyright = False
html_show_sphinx = False
html_last_updated_fmt = None
copybutton_exclude = ".linenos, .gp, .go"
suppress_warnings = ["myst.header", "misc.highlighting_failure", "myst.xref_missing", "toc.not_included"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
'''


def write_project(stage: Path, lang: str, pages: dict[str, object], guides: list[str]) -> None:
    """The Sphinx source folder of one language: conf.py, index.md, chapters/, guides/."""
    if stage.exists():
        shutil.rmtree(stage)
    (stage / "chapters").mkdir(parents=True)
    (stage / "guides").mkdir()
    (stage / "conf.py").write_text(conf_py(lang), encoding="utf-8")
    words = TEXT[lang]
    rows = []
    for chapter, nb in pages.items():
        nbformat.write(nb, stage / "chapters" / f"{chapter}.ipynb")
        minutes = nb.metadata["course"]["study_minutes"]
        rows.append(f"- [{chapter_title(nb)}](chapters/{chapter}.ipynb) · "
                    + words["minutes"].format(m=minutes))
    written = []
    for name in guides:
        (stage / "guides" / f"{name}.md").write_text(guide_text(name, lang), encoding="utf-8")
        written.append(name)
    index = [f"# {words['title']}", "", words["intro"], "", f"## {words['chapters']}", "", *rows, "",
             "```{toctree}", ":hidden:", f":caption: {words['chapters']}", "",
             *(f"chapters/{c}" for c in pages), "```", ""]
    if written:
        titles = {g: next((line[2:].strip() for line in (stage / "guides" / f"{g}.md").read_text(
            encoding="utf-8").splitlines() if line.startswith("# ")), g) for g in written}
        index += [f"## {words['guides']}", "", *(f"- [{titles[g]}](guides/{g}.md)" for g in written), "",
                  "```{toctree}", ":hidden:", f":caption: {words['guides']}", "",
                  *(f"guides/{g}" for g in written), "```", ""]
    (stage / "index.md").write_text("\n".join(index), encoding="utf-8")


def sphinx(stage: Path, out: Path, doctrees: Path, log: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    log.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-E", "-d", str(doctrees),
                             str(stage), str(out)], stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)


# ------------------------------------------------------------------ the whole site


@dataclass
class SiteReport:
    out: Path
    chapters: list[str]
    seconds: float = 0.0
    run_seconds: dict = field(default_factory=dict)
    warnings: dict = field(default_factory=dict)


def build_site(out: Path = OUT, chapters: list[str] | None = None, langs=build.LANGS, guides=tuple(GUIDES),
               cache: Path = CACHE, run: bool = True, jobs: int | None = None, say=print) -> SiteReport:
    """Build the site into ``out`` (zh at its root, en under en/). ``run=False`` leaves
    the lecture outputs out (no chapter is run: a quick look at the text)."""
    start = time.perf_counter()
    out, cache = Path(out), Path(cache)
    chapters = list(chapters or build.chapters())
    report = SiteReport(out, chapters)
    runs: dict = {}
    if run:
        todo = [(c, lang) for c in chapters for lang in langs]

        def one(pair):
            t0 = time.perf_counter()
            nb = executed(*pair, cache=cache)
            report.run_seconds["/".join(pair)] = round(time.perf_counter() - t0, 1)
            say(f"site: ran {pair[0]} ({pair[1]}) in {report.run_seconds['/'.join(pair)]} s (cached after)")
            return pair, nb

        with ThreadPoolExecutor(max_workers=jobs or max(1, min(len(todo), os.cpu_count() or 1))) as pool:
            runs = dict(pool.map(one, todo))
    # each language is built in a folder of its own (no build sees the other's pages; two
    # builds at once, a test's and make site's, share nothing but the cached runs)
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=cache))
    try:
        procs = {}
        for lang in langs:
            pages = {c: page_notebook(c, lang, runs.get((c, lang))) for c in chapters}
            write_project(work / "src" / lang, lang, pages, list(guides))
            procs[lang] = sphinx(work / "src" / lang, work / "html" / lang, work / "doctrees" / lang,
                                 work / f"sphinx.{lang}.log")
        failed = []
        for lang, proc in procs.items():
            log = work / f"sphinx.{lang}.log"
            code = proc.wait()
            shutil.copy(log, cache / log.name)            # the last build's log, for reading afterwards
            if code != 0:
                failed.append(f"{lang}:\n{log.read_text(errors='replace')[-3000:]}")
            report.warnings[lang] = [line for line in log.read_text(errors="replace").splitlines()
                                     if "WARNING" in line]
        if failed:
            raise build.BuildError("site: Sphinx failed for " + "\n".join(failed))
        for lang in langs:
            html_dir = work / "html" / lang
            for extra in (".buildinfo", ".doctrees", "jupyter_execute", "_sources"):
                target = html_dir / extra
                if target.is_dir():
                    shutil.rmtree(target)
                elif target.exists():
                    target.unlink()
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        for lang in sorted(langs, key=lambda lang: PREFIX[lang]):     # the root language first
            dest = out / PREFIX[lang]
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(work / "html" / lang), str(dest))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report.seconds = round(time.perf_counter() - start, 1)
    return report


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="course site", description=__doc__.splitlines()[0])
    ap.add_argument("chapters", nargs="*", help="only these chapters (default: all)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--no-run", action="store_true", help="leave lecture outputs out (runs no chapter)")
    ap.add_argument("--jobs", type=int, help="chapters run at once (default: number of cores)")
    args = ap.parse_args(argv)
    report = build_site(args.out, args.chapters or None, run=not args.no_run, jobs=args.jobs)
    for lang, warnings in report.warnings.items():
        for line in warnings[:20]:
            print(f"site ({lang}): {line}")
    print(f"site: {report.out} ({len(report.chapters)} chapters, zh at the root, en under en/) in "
          f"{report.seconds} s; open {report.out / 'index.html'} or serve it: "
          f"python -m http.server -d {report.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
