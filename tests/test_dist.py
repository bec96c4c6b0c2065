"""The student packs: what is in them, what never is, and that a student can
start from one with the command its README gives."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile

import nbformat
import pytest
from harness import ROOT, make_submission

from coursekit.author import build, dist

CJK = re.compile(r"[\u4e00-\u9fff]")
LATIN_WORD = re.compile(r"[A-Za-z]{3,}")
SECRETS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS",
           "参考答案", "Model answer", "check_softmax")
GRADING_IMPORT = re.compile(r"^\s*(from grading\b|import grading\b)", re.M)


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    return {lang: dist.make_pack(lang, out) for lang in build.LANGS}


def names(zpath):
    with zipfile.ZipFile(zpath) as z:
        return z.namelist()


@pytest.mark.parametrize("lang", build.LANGS)
def test_pack_holds_release_helpers_and_environment_only(packs, lang):
    files = names(packs[lang])
    top = f"{dist.COURSE}-student-{lang}/"
    rel = {f[len(top):] for f in files}
    for must in ("README.md", "course.py", "requirements.txt", "environment.yml", "pyproject.toml",
                 "helpers/__init__.py", "helpers/checks.py"):
        assert must in rel, f"{must} missing from the {lang} pack"
    for ch in build.chapters():
        assert f"release/{ch}/{ch}.ipynb" in rel, f"{ch} missing from the {lang} pack"
    for f in rel:
        assert not f.startswith(("source/", "grading/", "coursekit/", "autograded/", "submitted/", "feedback/",
                                 "tests/", "notebooks/")), f"{f} must not be in a student pack"
        assert not f.endswith((".db", ".pyc")), f"{f} must not be in a student pack"


@pytest.mark.parametrize("lang", build.LANGS)
def test_pack_starts_a_students_workspace_with_student_commands_only(packs, lang):
    top = f"{dist.COURSE}-student-{lang}/"
    with zipfile.ZipFile(packs[lang]) as z:
        shipped = z.read(top + "lab_workspace.py")
        makefile = z.read(top + "Makefile").decode()
        readme = z.read(top + "README.md").decode()
        req = z.read(top + "requirements.txt").decode()
    assert shipped == (ROOT / "coursekit" / "student" / "workspace.py").read_bytes()   # course.py lab imports it
    assert re.findall(r"^([a-z-]+):", makefile, re.M) == ["help", "lab", "env"], makefile
    assert "workspace/" in readme and "python course.py lab" in readme
    assert re.search(r"^jupyterlab-language-pack-zh-CN==", req, re.M), req


def test_pack_environment_is_the_course_stack_without_test_tools(packs):
    with zipfile.ZipFile(packs["zh"]) as z:
        req = z.read(f"{dist.COURSE}-student-zh/requirements.txt").decode()
    pins = {line.split("==")[0].strip().lower() for line in req.splitlines() if "==" in line}
    assert {"torch", "nbgrader", "jupyterlab", "ipywidgets", "matplotlib", "numpy"} <= pins, req
    assert not pins & dist.DEV_ONLY, f"test-only packages in a student pack: {pins & dist.DEV_ONLY}"
    assert "torch==2.13.0" in req


@pytest.mark.parametrize("lang", build.LANGS)
def test_pack_contains_no_solution_or_hidden_test(packs, lang):
    with zipfile.ZipFile(packs[lang]) as z:
        for info in z.infolist():
            text = z.read(info).decode("utf-8", errors="replace")
            for secret in SECRETS:
                assert secret not in text, f"{info.filename} in the {lang} pack contains {secret!r}"
            assert not GRADING_IMPORT.search(text), f"{info.filename} in the {lang} pack imports grading"


@pytest.mark.parametrize("lang", build.LANGS)
def test_built_notebooks_hold_only_their_language(lang):
    for ch in build.chapters():
        nb = build.build_chapter(ch, lang)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "markdown":
                continue
            cjk = len(CJK.findall(cell.source))
            latin = len(LATIN_WORD.findall(re.sub(r"\$[^$]*\$|`[^`]*`", "", cell.source)))
            if lang == "en":
                # a few Chinese characters are fine (ch11 quotes Chinese numerals): more of them than
                # English words is a cell left in Chinese
                assert cjk <= 12 or latin >= cjk, f"{ch} (en) cell {i} looks Chinese:\n{cell.source[:200]}"
            else:
                assert cjk > 0 or latin < 8, f"{ch} (zh) cell {i} looks English:\n{cell.source[:200]}"


@pytest.mark.skipif(os.environ.get("COURSE_SKIP_PACK_INSTALL") == "1", reason="COURSE_SKIP_PACK_INSTALL=1")
@pytest.mark.system
def test_student_starts_from_the_pack_and_visible_tests_pass(packs, tmp_path):
    """Unpack the zh pack into an empty folder, run `python course.py env` as
    its README says, and run ch01 with the model answers filled in: its
    visible tests pass inside the pack's own environment."""
    with zipfile.ZipFile(packs["zh"]) as z:
        z.extractall(tmp_path)
    pack = tmp_path / f"{dist.COURSE}-student-zh"
    assert "python course.py lab" in (pack / "README.md").read_text(encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    # pip's byte-compiling of every installed module is a third of the install here (136 s with
    # it, 100 s without, 2 cores); what the test proves does not depend on it: Python compiles
    # what the pack imports when it imports it
    env["PIP_COMPILE"] = "0"
    subprocess.run([sys.executable, "course.py", "env"], cwd=pack, env=env, check=True, timeout=900)
    ch = "ch01_attention"
    release_nb = nbformat.read(pack / "release" / ch / f"{ch}.ipynb", as_version=4)
    source_nb = nbformat.read(ROOT / "source" / ch / f"{ch}.ipynb", as_version=4)
    nb = make_submission(release_nb, source_nb, None)
    # the pack's environment must not see this repository's packages
    probe = subprocess.run([str(pack / ".venv" / "bin" / "python"), "-c",
                            "import helpers, importlib.util as u; print(helpers.__file__, u.find_spec('grading'))"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert str(pack) in probe.stdout and "None" in probe.stdout, probe.stdout
    locales = subprocess.run([str(pack / ".venv" / "bin" / "python"), "-c",
                              "from jupyterlab_server.translation_utils import get_language_packs as g; "
                              "print(sorted(g()[0]))"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert "zh_CN" in locales.stdout, locales.stdout + locales.stderr   # the zh pack's JupyterLab can speak Chinese
    work = pack / "release" / ch / "done.ipynb"
    nbformat.write(nb, work)
    # with a per-cell limit: without one, this nbconvert run never finished (killed
    # after 300 s, in CI too); with one, the same notebook finishes in ~15 s
    run = subprocess.run([str(pack / ".venv" / "bin" / "jupyter"), "nbconvert", "--to", "notebook", "--execute",
                          "--ExecutePreprocessor.timeout=120", "--inplace", str(work)], cwd=work.parent, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(work.read_text(encoding="utf-8"))
    texts = "".join("".join(o.get("text", "")) for c in out["cells"] for o in c.get("outputs", []))
    assert texts.count("✓") >= 3, texts[-1000:]


def _dockerfile() -> tuple[dict[str, str], list[str]]:
    """deploy/Dockerfile's ARG and ENV defaults and its instructions (one line each)."""
    text = (ROOT / "deploy" / "Dockerfile").read_text(encoding="utf-8")
    lines = [line.strip() for line in text.splitlines() if not line.lstrip().startswith("#")]
    steps = [" ".join(s.split()) for s in "\n".join(lines).replace("\\\n", " ").splitlines() if s.strip()]
    values = {}
    for step in steps:
        kind, _, rest = step.partition(" ")
        if kind in ("ARG", "ENV"):
            for name, value in re.findall(r"(\w+)=(\S+)", rest):
                values[name] = re.sub(r"\$\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), value)
    return values, steps


@pytest.mark.parametrize("lang", build.LANGS)
def test_the_student_images_steps_hold_for_each_pack(packs, tmp_path, lang):
    """No container engine runs here, so the student image (deploy/Dockerfile)
    is checked by replaying its steps on each pack: the pack folder it copies is
    the one `make dist` makes for that language, the hub it installs is the one
    the course pins, and its configuration step, run on the unpacked pack as
    the image runs it, writes the student-only configuration in that language."""
    values, steps = _dockerfile()
    with zipfile.ZipFile(packs[lang]) as z:
        z.extractall(tmp_path)
    pack = tmp_path / f"{dist.COURSE}-student-{lang}"
    assert pack.is_dir() and (pack / "course.py").exists()
    assert values["PACK"] == "pack/" + f"{dist.COURSE}-student-zh" and values["LANG_CODE"] == "zh"
    assert "COPY ${PACK} ${COURSE}" in steps                      # the pack, whole, at COURSE
    pin = re.search(r"^jupyterhub==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M).group(1)
    install = next(s for s in steps if s.startswith("RUN pip install"))
    assert f'"jupyterhub=={pin}"' in install and "-r ${COURSE}/requirements.txt" in install
    assert (pack / "requirements.txt").exists() and (pack / "pyproject.toml").exists()   # what `pip install COURSE` needs
    copy = next(s for s in steps if s.startswith("COPY student_config.py"))
    assert (ROOT / "deploy" / copy.split()[1]).exists()
    config = next(s for s in steps if "student_config.py /etc/jupyter" in s)
    dest = tmp_path / "etc-jupyter"
    args = (config.split(" ", 1)[1].replace("/usr/local/share/transformer-course/student_config.py",
                                             str(ROOT / "deploy" / "student_config.py"))
            .replace("/etc/jupyter/course-student", str(dest)).replace("${LANG_CODE}", lang)
            .replace("${EXCHANGE}", values["EXCHANGE"]).replace("${COURSE}", str(pack))).split()
    assert args[0] == "python"
    subprocess.run([sys.executable, *args[1:]], check=True, capture_output=True, timeout=120)
    assert values["JUPYTER_CONFIG_PATH"] == "/etc/jupyter/course-student"
    server = json.loads((dest / "jupyter_server_config.json").read_text())
    assert str(pack / "helpers" / "lab" / "labextension") in json.dumps(server)
    page = json.loads((dest / "labconfig" / "page_config.json").read_text())
    assert any("formgrader" in name for name in json.dumps(page).split('"'))   # the instructor's tools are off
    locale = json.loads((dest / "labconfig" / "default_setting_overrides.json").read_text())
    assert json.dumps(locale).count("zh_CN" if lang == "zh" else "en") >= 1
    assert values["EXCHANGE"] in (dest / "nbgrader_config.py").read_text()
