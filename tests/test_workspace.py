"""The student's workspace (coursekit/student/workspace.py) and the commands around it
in course.py: a student's work is never overwritten, a changed release arrives
beside it once, and a student's JupyterLab has only student tools."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from harness import ROOT

from coursekit.author import dist
from coursekit.student import workspace as ws

DAY = "2026-12-01"


def nb_bytes(text: str) -> bytes:
    return json.dumps({"cells": [{"cell_type": "code", "source": text}],
                       "metadata": {"course": {"lang": "zh"}}, "nbformat": 4, "nbformat_minor": 5}).encode()


@pytest.fixture
def course(tmp_path):
    rel, work = tmp_path / "release", tmp_path / "workspace"
    for ch in ("ch01_attention", "ch02_causal_mask"):
        (rel / ch).mkdir(parents=True)
        (rel / ch / f"{ch}.ipynb").write_bytes(nb_bytes(f"# {ch} v1"))
    (rel / "ch01_attention" / ".ipynb_checkpoints").mkdir()
    (rel / "ch01_attention" / ".ipynb_checkpoints" / "x.ipynb").write_bytes(b"{}")
    return rel, work


def snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_first_start_copies_the_release_and_a_second_start_does_nothing(course):
    rel, work = course
    changes = ws.sync(rel, work, DAY)
    assert sorted((c.kind, c.path) for c in changes) == [
        ("new", "ch01_attention/ch01_attention.ipynb"), ("new", "ch02_causal_mask/ch02_causal_mask.ipynb")]
    for ch in ("ch01_attention", "ch02_causal_mask"):
        assert (work / ch / f"{ch}.ipynb").read_bytes() == (rel / ch / f"{ch}.ipynb").read_bytes()
    assert not (work / "ch01_attention" / ".ipynb_checkpoints").exists()
    record = json.loads((work / ws.MANIFEST).read_text())["files"]
    assert record["ch01_attention/ch01_attention.ipynb"]["release"] == ws.sha256(rel / "ch01_attention" /
                                                                                 "ch01_attention.ipynb")
    before = snapshot(work)
    assert ws.sync(rel, work, DAY) == []
    assert snapshot(work) == before


def test_a_changed_release_arrives_beside_the_students_work_once(course):
    rel, work = course
    ws.sync(rel, work, DAY)
    mine = work / "ch01_attention" / "ch01_attention.ipynb"
    mine.write_bytes(nb_bytes("my answer"))
    (rel / "ch01_attention" / "ch01_attention.ipynb").write_bytes(nb_bytes("# ch01 v2"))
    changes = ws.sync(rel, work, DAY)
    assert changes == [ws.Change("offered", "ch01_attention/ch01_attention.ipynb",
                                 f"ch01_attention.new-{DAY}.ipynb")]
    assert mine.read_bytes() == nb_bytes("my answer")
    assert (work / "ch01_attention" / f"ch01_attention.new-{DAY}.ipynb").read_bytes() == nb_bytes("# ch01 v2")
    assert ws.sync(rel, work, DAY) == []                     # told once
    (rel / "ch01_attention" / "ch01_attention.ipynb").write_bytes(nb_bytes("# ch01 v3"))
    again = ws.sync(rel, work, DAY)
    assert [c.beside for c in again] == [f"ch01_attention.new-{DAY}-2.ipynb"]
    assert mine.read_bytes() == nb_bytes("my answer")
    assert (work / "ch01_attention" / f"ch01_attention.new-{DAY}.ipynb").read_bytes() == nb_bytes("# ch01 v2")


def test_an_untouched_copy_is_brought_up_to_date(course):
    rel, work = course
    ws.sync(rel, work, DAY)
    (rel / "ch02_causal_mask" / "ch02_causal_mask.ipynb").write_bytes(nb_bytes("# ch02 v2"))
    assert ws.sync(rel, work, DAY) == [ws.Change("updated", "ch02_causal_mask/ch02_causal_mask.ipynb")]
    assert (work / "ch02_causal_mask" / "ch02_causal_mask.ipynb").read_bytes() == nb_bytes("# ch02 v2")
    assert list((work / "ch02_causal_mask").iterdir()) == [work / "ch02_causal_mask" / "ch02_causal_mask.ipynb"]


def test_a_copy_opened_and_saved_untouched_is_still_brought_up_to_date(course):
    """JupyterLab rewrites a notebook it opens and saves (metadata such as
    language_info, outputs when cells run): that is not the student's work.
    A change to a cell's source is."""
    rel, work = course
    ws.sync(rel, work, DAY)
    mine = work / "ch02_causal_mask" / "ch02_causal_mask.ipynb"
    opened = json.loads(mine.read_text())
    opened["metadata"]["language_info"] = {"name": "python", "version": "3.11.7"}
    opened["cells"][0].update(outputs=[{"output_type": "stream", "name": "stdout", "text": "ran\n"}],
                              execution_count=3)
    opened["cells"][0]["source"] = [opened["cells"][0]["source"]]       # saved as a list of lines
    mine.write_text(json.dumps(opened, indent=1))
    (rel / "ch02_causal_mask" / "ch02_causal_mask.ipynb").write_bytes(nb_bytes("# ch02 v2"))
    assert ws.sync(rel, work, DAY) == [ws.Change("updated", "ch02_causal_mask/ch02_causal_mask.ipynb")]
    assert mine.read_bytes() == nb_bytes("# ch02 v2")
    # a changed cell is the student's: the next release goes beside it
    edited = json.loads(mine.read_text())
    edited["cells"][0]["source"] = "# ch02 v2\nmy answer"
    mine.write_text(json.dumps(edited))
    (rel / "ch02_causal_mask" / "ch02_causal_mask.ipynb").write_bytes(nb_bytes("# ch02 v3"))
    assert [c.kind for c in ws.sync(rel, work, DAY)] == ["offered"]
    assert "my answer" in mine.read_text()


def test_new_chapters_are_added_and_a_deleted_copy_comes_back(course):
    rel, work = course
    ws.sync(rel, work, DAY)
    (work / "ch01_attention" / "ch01_attention.ipynb").write_bytes(nb_bytes("my answer"))
    (work / "ch02_causal_mask" / "ch02_causal_mask.ipynb").unlink()
    (rel / "ch03_multi_head").mkdir()
    (rel / "ch03_multi_head" / "ch03_multi_head.ipynb").write_bytes(nb_bytes("# ch03"))
    changes = {c.path: c.kind for c in ws.sync(rel, work, DAY)}
    assert changes == {"ch02_causal_mask/ch02_causal_mask.ipynb": "restored",
                       "ch03_multi_head/ch03_multi_head.ipynb": "new"}
    assert (work / "ch01_attention" / "ch01_attention.ipynb").read_bytes() == nb_bytes("my answer")
    assert (work / "ch03_multi_head" / "ch03_multi_head.ipynb").read_bytes() == nb_bytes("# ch03")


def test_without_a_record_a_different_copy_counts_as_the_students(course):
    rel, work = course
    ws.sync(rel, work, DAY)
    (work / ws.MANIFEST).write_text("not json")
    (work / "ch01_attention" / "ch01_attention.ipynb").write_bytes(nb_bytes("my answer"))
    changes = ws.sync(rel, work, DAY)
    assert [(c.kind, c.path) for c in changes] == [("offered", "ch01_attention/ch01_attention.ipynb")]
    assert (work / "ch01_attention" / "ch01_attention.ipynb").read_bytes() == nb_bytes("my answer")


def test_what_the_student_is_told_names_both_files_in_their_language():
    change = ws.Change("offered", "ch03_multi_head/ch03_multi_head.ipynb", f"ch03_multi_head.new-{DAY}.ipynb")
    zh, en = ws.describe([change], "zh")[0], ws.describe([change], "en")[0]
    for line in (zh, en):
        assert change.path in line and change.beside in line
    assert "新版本" in zh and "new version" in en
    assert ws.describe([ws.Change("new", "ch09_inside_gpt/ch09_inside_gpt.ipynb")], "zh") == [
        "ch09_inside_gpt/ch09_inside_gpt.ipynb：新章节"]


def test_student_configuration_hides_instructor_tools(tmp_path):
    cfg = ws.configure(tmp_path, "zh")
    disabled = json.loads((cfg / "labconfig" / "page_config.json").read_text())["disabledExtensions"]
    assert all(disabled[p] for p in ws.INSTRUCTOR_PLUGINS + ws.EXCHANGE_PLUGINS)
    assert disabled["@jupyterlab/apputils-extension:announcements"], "the first start would ask about Jupyter news"
    servers = json.loads((cfg / "jupyter_server_config.json").read_text())["ServerApp"]["jpserver_extensions"]
    assert servers == {"nbgrader.server_extensions.formgrader": False,
                       "nbgrader.server_extensions.course_list": False,
                       "nbgrader.server_extensions.assignment_list": False}
    assert "Exchange" not in (cfg / "nbgrader_config.py").read_text()
    assert json.loads((cfg / ws.TRANSLATION_SETTINGS).read_text()) == {"locale": "zh_CN"}

    cfg = ws.configure(tmp_path, "zh", exchange="/srv/nbgrader/exchange")
    disabled = json.loads((cfg / "labconfig" / "page_config.json").read_text())["disabledExtensions"]
    assert disabled["@jupyter/nbgrader:assignment-list"] is False and disabled["@jupyter/nbgrader:formgrader"]
    assert "c.Exchange.root = '/srv/nbgrader/exchange'" in (cfg / "nbgrader_config.py").read_text()


def test_the_course_validate_replaces_nbgraders_in_a_course_folder(tmp_path):
    cfg = ws.configure(tmp_path / "ws", "en", course=ROOT)
    disabled = json.loads((cfg / "labconfig" / "page_config.json").read_text())["disabledExtensions"]
    assert disabled["@jupyter/nbgrader:validate-assignment"] is True
    server = json.loads((cfg / "jupyter_server_config.json").read_text())
    assert server["ServerApp"]["jpserver_extensions"]["helpers.lab"] is True
    (path,) = server["LabApp"]["extra_labextensions_path"]
    package = json.loads((ROOT / "helpers" / "lab" / "labextension" / "transformer-course-validate" /
                          "package.json").read_text())
    assert path == str(ROOT / "helpers" / "lab" / "labextension")
    assert (ROOT / "helpers" / "lab" / "labextension" / package["name"] / package["jupyterlab"]["_build"]["load"]).is_file()


def test_student_configuration_is_valid_nbgrader_config_and_keeps_the_students_language(tmp_path):
    cfg = ws.configure(tmp_path, "zh", exchange="/x")
    ns = {}
    from traitlets.config import Config
    conf = Config()
    ns["get_config"] = lambda: conf
    exec((cfg / "nbgrader_config.py").read_text(), ns)
    assert conf.Exchange.root == "/x" and conf.CourseDirectory.course_id == "transformer"
    (cfg / ws.TRANSLATION_SETTINGS).write_text(json.dumps({"locale": "en"}))   # the student switched
    ws.configure(tmp_path, "zh")
    assert json.loads((cfg / ws.TRANSLATION_SETTINGS).read_text()) == {"locale": "en"}
    env = ws.lab_environment(tmp_path, {"PATH": "/bin"})
    assert env["JUPYTER_CONFIG_DIR"] == str(cfg) and env["PATH"] == "/bin"
    assert env["JUPYTERLAB_SETTINGS_DIR"].startswith(str(tmp_path))


def test_exchange_is_found_only_where_configured(tmp_path, monkeypatch):
    assert ws.find_exchange({"COURSE_EXCHANGE": str(tmp_path)}) == str(tmp_path)
    monkeypatch.setattr(ws, "DEFAULT_EXCHANGES", (str(tmp_path / "missing"),))
    assert ws.find_exchange({}) is None
    (tmp_path / "missing").mkdir()
    assert ws.find_exchange({}) == str(tmp_path / "missing")


def test_release_language_comes_from_the_notebooks(course):
    rel, _ = course
    assert ws.release_language(rel) == "zh"
    (rel / "ch01_attention" / "ch01_attention.ipynb").write_text(
        json.dumps({"cells": [], "metadata": {"course": {"lang": "en"}}}))
    assert ws.release_language(rel) == "en"


# ------------------------------------------------------------------ course.py


def load_course_py(path):
    spec = importlib.util.spec_from_file_location(f"course_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_workspace_is_git_ignored_and_release_is_not():
    def ignored(path):
        return subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0
    assert ignored("workspace/ch01_attention/ch01_attention.ipynb")
    assert ignored(f"workspace/{ws.MANIFEST}")
    assert not ignored("release/ch01_attention/ch01_attention.ipynb")


def test_student_lab_serves_the_workspace_with_the_student_configuration(tmp_path, monkeypatch):
    course = load_course_py(ROOT / "course.py")
    monkeypatch.setenv("LAB_TOKEN", "t0ken")
    monkeypatch.delenv("COURSE_EXCHANGE", raising=False)
    args, env, cwd, url = course.student_lab(tmp_path / "ws")
    assert cwd == (tmp_path / "ws").resolve()
    assert f"--ServerApp.root_dir={cwd}" in args and not any(str(ROOT / "release") in a for a in args)
    assert env["JUPYTER_CONFIG_DIR"] == str(cwd / ws.CONFIG)
    assert url.endswith("/lab?token=t0ken")
    chapters = sorted(p.name for p in (ROOT / "release").iterdir() if p.is_dir())
    assert sorted(p.name for p in cwd.iterdir() if not p.name.startswith(".")) == chapters


def test_help_lists_what_works_in_a_clone_and_only_lab_and_env_in_a_pack(tmp_path):
    full = subprocess.run([sys.executable, str(ROOT / "course.py"), "help"], capture_output=True, text=True,
                          check=True).stdout
    for cmd in ("lab", "instructor-lab", "release", "grade", "dist", "test"):
        assert f"\n  {cmd} " in full, full
    pack = dist.assemble_pack(ROOT / "release", "zh", tmp_path / "pack")
    shown = subprocess.run([sys.executable, "course.py", "help"], cwd=pack, capture_output=True, text=True,
                           check=True).stdout
    listed = [line.split()[0] for line in shown.splitlines() if line.startswith("  ")]
    assert listed == ["lab", "env"], shown
    refused = subprocess.run([sys.executable, "course.py", "grade"], cwd=pack, capture_output=True, text=True)
    assert refused.returncode == 2 and "lab, env" in refused.stdout, refused.stdout
    assert not (pack / ".venv").exists()                     # refused before creating an environment


def test_instructor_lab_serves_the_whole_course_with_the_instructors_own_configuration(monkeypatch):
    course = load_course_py(ROOT / "course.py")
    seen = []
    monkeypatch.setattr(course, "serve", lambda args, cwd, environ: seen.append((args, cwd, environ)) or 0)
    monkeypatch.delenv("JUPYTER_CONFIG_DIR", raising=False)
    assert course.cmd_instructor_lab([]) == 0
    args, cwd, environ = seen[0]
    assert f"--ServerApp.root_dir={ROOT}" in args and cwd == ROOT
    assert "JUPYTER_CONFIG_DIR" not in environ                # the student configuration is not used
    assert course.available("instructor-lab") and "instructor-lab:" in (ROOT / "Makefile").read_text()
