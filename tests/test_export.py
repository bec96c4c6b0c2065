"""The instructor's exports, on a synthetic gradebook: per-exercise grades with
pending shown as pending, the Canvas and Moodle import files against their
documented column rules, and the similarity ranking."""
from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
from pathlib import Path

import pytest

from coursekit.report import export, similarity

CH = "ch01_attention"
CELLS = (("test_softmax", 3.0, "code"), ("test_attention", 4.0, "code"), ("derivation", 3.0, "markdown"))


def make_gradebook(tmp_path, graded_by_hand: dict[str, float] | None = None, due_date: bool = True):
    """Three students of one chapter: alice full marks, bob half, carol late;
    the derivation awaits the instructor unless ``graded_by_hand`` gives it."""
    from nbgrader.api import Gradebook

    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    due = dt.datetime(2026, 12, 1, 12, 0, 0)
    with Gradebook(url) as gb:
        gb.add_assignment(CH, duedate=due if due_date else None)
        gb.update_or_create_notebook(CH, CH)
        for name, points, kind in CELLS:
            gb.update_or_create_grade_cell(name, CH, CH, max_score=points, cell_type=kind)
        auto = {"alice": (3.0, 4.0), "bob": (3.0, 0.0), "carol": (0.0, 4.0)}
        for student, (s1, s2) in auto.items():
            gb.add_student(student)
            late = dt.timedelta(hours=2) if student == "carol" else -dt.timedelta(hours=1)
            gb.add_submission(CH, student, timestamp=due + late)
            for gid, score in (("test_softmax", s1), ("test_attention", s2)):
                g = gb.find_grade(gid, CH, CH, student)
                g.auto_score, g.needs_manual_grade = score, False
            g = gb.find_grade("derivation", CH, CH, student)
            g.auto_score = None
            given = (graded_by_hand or {}).get(student)
            g.needs_manual_grade = given is None
            g.manual_score = given
        gb.db.commit()
    return url


TITLES = {CH: {"test_softmax": "练习 1：softmax", "test_attention": "练习 3：注意力", "derivation": "练习 4：推导"}}


def rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_per_exercise_csv_shows_pending_as_pending_and_lateness(tmp_path):
    scores = export.read_gradebook(make_gradebook(tmp_path), [CH])
    table = {r["student"]: r for r in rows(export.per_exercise_csv(scores, TITLES))}
    alice, bob, carol = table["alice"], table["bob"], table["carol"]
    assert alice[f"{CH}/test_softmax (练习 1：softmax)"] == "3"
    assert bob[f"{CH}/test_attention (练习 3：注意力)"] == "0"
    assert alice[f"{CH}/derivation (练习 4：推导)"] == "pending"
    assert (alice[f"{CH} auto"], alice[f"{CH} manual"], alice[f"{CH} awaiting grading"], alice[f"{CH} max"]) == \
        ("7", "0", "3", "10")
    assert float(carol[f"{CH} seconds late"]) == 7200 and float(alice[f"{CH} seconds late"]) == 0
    assert (alice[f"{CH} score"], alice[f"{CH} status"], bob[f"{CH} score"]) == ("7", "awaiting grading", "3")
    assert alice[f"{CH} submitted"].startswith("2026-12-01 11:00") and alice[f"{CH} due"].startswith("2026-12-01 12:00")
    # the columns come in the chapter's order, named by exercise and grade id
    head = export.per_exercise_csv(scores, TITLES).splitlines()[0]
    assert head.index("test_softmax") < head.index("test_attention") < head.index("derivation")


def test_without_a_due_date_no_one_is_late(tmp_path):
    table = rows(export.per_exercise_csv(export.read_gradebook(make_gradebook(tmp_path, due_date=False), [CH]), TITLES))
    assert [r[f"{CH} seconds late"] for r in table] == ["", "", ""]
    assert [r[f"{CH} due"] for r in table] == ["", "", ""]


def test_once_graded_by_hand_every_output_shows_the_final_score(tmp_path):
    scores = export.read_gradebook(make_gradebook(tmp_path, {"alice": 2.5, "bob": 3.0, "carol": 0.0}), [CH])
    table = {r["student"]: r for r in rows(export.per_exercise_csv(scores, TITLES))}
    assert table["alice"][f"{CH}/derivation (练习 4：推导)"] == "2.5"
    assert (table["alice"][f"{CH} manual"], table["alice"][f"{CH} awaiting grading"]) == ("2.5", "0")
    roster = {s: dict.fromkeys(export.ROSTER_FIELDS, "") | {"student": s, "lms_id": f"10{i}"}
              for i, s in enumerate(("alice", "bob", "carol"))}
    canvas = rows(export.canvas_csv(scores, roster))
    assert [r[CH] for r in canvas[1:]] == ["9.5", "6", "4"]


def write_roster(tmp_path, text: str):
    path = tmp_path / "roster.csv"
    path.write_text(text, encoding="utf-8")
    return export.read_roster(path)


ROSTER = ("student,name,lms_id,sis_user_id,sis_login_id,section,email\n"
          "alice,\"Li, Alice\",101,S1,alice01,A,alice@example.edu\n"
          "bob,\"Wang, Bob\",102,S2,bob02,A,bob@example.edu\n")


def test_canvas_file_follows_canvas_import_rules(tmp_path):
    """Canvas: the identity columns Student, ID, SIS User ID, SIS Login ID,
    Section first and in that order; a 'Points Possible' row right under the
    header; one column per assignment; every grade numeric or blank (blank
    leaves Canvas's grade unchanged)."""
    scores = export.read_gradebook(make_gradebook(tmp_path, {"alice": 3.0}), [CH])
    roster = write_roster(tmp_path, ROSTER)
    lines = list(csv.reader(io.StringIO(export.canvas_csv(scores, roster))))
    head, points, *students = lines
    assert head[:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] and head[5:] == [CH]
    assert points[0] == "Points Possible" and points[1:5] == ["", "", "", ""] and float(points[5]) == 10
    assert all(len(r) == len(head) for r in lines)
    by_id = {r[1]: r for r in students}
    assert by_id["101"][0] == "Li, Alice" and by_id["101"][3] == "alice01" and by_id["101"][5] == "10"
    assert by_id["102"][5] == "", "bob's derivation awaits grading: his chapter must stay blank"
    assert "carol" not in {r[0] for r in students} and export.unmapped(scores, roster) == ["carol"]


def test_moodle_file_has_an_identifier_and_a_column_per_chapter(tmp_path):
    scores = export.read_gradebook(make_gradebook(tmp_path, {"alice": 1.0, "bob": 0.0}), [CH])
    table = rows(export.moodle_csv(scores, write_roster(tmp_path, ROSTER)))
    assert list(table[0]) == ["Email address", "ID number", CH]
    assert {r["Email address"]: r[CH] for r in table} == {"alice@example.edu": "8", "bob@example.edu": "3"}


def test_roster_errors_say_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="needs a 'student' column"):
        write_roster(tmp_path, "name,lms_id\nx,1\n")
    with pytest.raises(ValueError, match=r"unknown roster column\(s\) \['phone'\]"):
        write_roster(tmp_path, "student,phone\nx,1\n")


# ----------------------------------------------------------------- similarity

RELEASE = ("def softmax(x, dim=-1):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n\n"
           "def scaled_dot_product_attention(q, k, v, mask=None):\n    # YOUR CODE HERE\n"
           "    raise NotImplementedError()\n")
ALICE = '''def softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(x - m)
    total = e.sum(dim=dim, keepdim=True)
    return e / total

def scaled_dot_product_attention(q, k, v, mask=None):
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    return weights @ v, weights
'''
BOB = (ALICE.replace("total", "denominator").replace("scores", "att").replace("weights", "probs")
       .replace("d_k", "size").replace("e = ", "ex = ").replace("e /", "ex /").replace("e.sum", "ex.sum"))
CAROL = '''def softmax(x, dim=-1):
    shifted = x - torch.max(x, dim, keepdim=True).values
    shifted = torch.nan_to_num(shifted, nan=float("-inf"))
    ex = shifted.exp()
    return ex / ex.sum(dim, keepdim=True)

def scaled_dot_product_attention(q, k, v, mask=None):
    s = torch.einsum("...qd,...kd->...qk", q, k) * q.size(-1) ** -0.5
    if mask is not None:
        s = torch.where(mask, s, torch.full_like(s, -1e9))
    p = softmax(s)
    return torch.einsum("...qk,...kd->...qd", p, v), p
'''
DAVE = '''def softmax(x, dim=-1):
    x = x.transpose(dim, -1)
    mx = x.max(-1, keepdim=True)[0].clamp(min=-1e30)
    y = torch.exp(x - mx)
    y = y / y.sum(-1, keepdim=True)
    return y.transpose(dim, -1)

def scaled_dot_product_attention(q, k, v, mask=None):
    scale = 1.0 / math.sqrt(k.shape[-1])
    logits = torch.matmul(q, k.transpose(-1, -2)) * scale
    if mask is not None:
        logits = logits.masked_fill(mask.logical_not(), -float("inf"))
    attn = softmax(logits, -1)
    return torch.matmul(attn, v), attn
'''


def test_a_renamed_copy_ranks_first_and_independent_answers_do_not():
    assert BOB != ALICE
    ranked = similarity.rank(CH, {"alice": ALICE, "bob": BOB, "carol": CAROL, "dave": DAVE}, RELEASE)
    top, *rest = ranked
    assert (top.a, top.b) == ("alice", "bob") and top.score > 0.8
    assert all(p.score < 0.3 for p in rest), [(p.a, p.b, p.score) for p in rest]


def test_the_release_code_never_counts_as_shared():
    stub_only = {"erin": RELEASE, "finn": RELEASE}
    (pair,) = similarity.rank(CH, stub_only, RELEASE)
    assert pair.score == 0 and pair.shared_tokens == 0


def test_side_by_side_view_marks_the_shared_code_and_says_it_is_no_proof(tmp_path):
    import nbformat

    root = tmp_path
    def notebook(code: str):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_markdown_cell("# 练习"),
                    nbformat.v4.new_code_cell(code, metadata={"nbgrader": {"solution": True, "grade_id": "a"}})]
        return nb
    (root / "release" / CH).mkdir(parents=True)
    nbformat.write(notebook(RELEASE), root / "release" / CH / f"{CH}.ipynb")
    for name, code in (("alice", ALICE), ("bob", BOB), ("carol", CAROL)):
        (root / "submitted" / name / CH).mkdir(parents=True)
        nbformat.write(notebook(code), root / "submitted" / name / CH / f"{CH}.ipynb")
    pairs = similarity.chapter_pairs(root, CH, root / "reports" / "similar")
    assert (pairs[0].a, pairs[0].b) == ("alice", "bob")
    page = (root / "reports" / pairs[0].view).read_text(encoding="utf-8")
    assert "<mark>" in page and "not proof" in page and 'lang="en"' in page and "不是" not in page
    assert "white-space:pre-wrap" in page                     # long lines wrap, never cut at the edge
    # the release's own lines (the signatures it gives) are never marked, however much the answers share
    for signature in ("def softmax(x, dim=-1):", "def scaled_dot_product_attention(q, k, v, mask=None):"):
        assert signature in page and f"<mark>{signature}" not in page
    zh = similarity.chapter_pairs(root, CH, root / "reports" / "similar_zh", lang="zh")
    assert "不是抄袭的证据" in (root / "reports" / zh[0].view).read_text(encoding="utf-8")


def test_a_shared_span_is_marked_on_whole_tokens_and_leaves_given_lines_alone():
    import numpy as np
    code = "def softmax(x, dim=-1):\n    big = 100_000 + x\n    return None\n"
    start = code.index("big") + 1                      # copydetect's offsets can land inside a token
    end = code.index("None") + 2
    spans = similarity.shared_spans(code, np.array([[start], [end]]), {"def softmax(x, dim=-1):"})
    shown = [code[a:b] for a, b in spans]
    assert shown[0].startswith("big") and shown[-1].endswith("None"), shown
    assert all("100_000" in s or "0" not in s for s in shown)
    everything = np.array([[0], [len(code)]])
    assert all("def softmax" not in code[a:b] for a, b in similarity.shared_spans(code, everything,
                                                                                 {"def softmax(x, dim=-1):"}))


# ----------------------------------------------------------------- class report

def report_data():
    import collections

    from coursekit.report import score
    data = {"scores": collections.defaultdict(dict), "bugs": collections.defaultdict(collections.Counter),
            "flags": {}, "said": {}}
    cells = {"alice": ((3.0, None), (4.0, None), (None, None)), "bob": ((3.0, None), (0.0, None), (None, 0.0))}
    for student, values in cells.items():
        data["scores"][CH][student] = score.Standing(student, CH, [
            score.CellScore(gid, points, auto, manual, answer=gid == "derivation")
            for (gid, points, _), (auto, manual) in zip(CELLS, values)])
    data["flags"][("bob", CH)] = []
    return data


def test_report_has_a_row_per_student_with_the_one_score_and_a_feedback_link():
    from coursekit.report import report
    page = report._student_table(report_data(), {CH: "zh"}, "zh")
    alice = page[page.index("<th scope='row'>alice</th>"):page.index("<th scope='row'>bob</th>")]
    assert "7 / 10 分，3 分待批改" in alice
    assert f"../feedback/alice/{CH}/{CH}.html" in alice and ">反馈<" in alice
    bob = page[page.index("<th scope='row'>bob</th>"):]
    assert "3 / 10 分" in bob and "待批改" not in bob
    en = report._student_table(report_data(), {CH: "en"}, "en")
    assert "7 / 10 points, 3 awaiting grading" in en and "<h2>Students</h2>" in en


def test_report_rates_each_exercise_by_full_marks_and_mean():
    from coursekit.report import report
    page = report._difficulty_table(report_data(), CH, TITLES[CH], "zh")
    assert "<h3>各练习的难度</h3>" in page
    row = page[page.index("练习 3：注意力"):].split("</tr>")[0]
    assert "50%" in row and "2.00 / 4" in row                   # one of two full, mean (4 + 0) / 2
    # a cell still awaiting grading is left out of its own difficulty, not counted as 0
    derivation = page[page.index("练习 4：推导"):].split("</tr>")[0]
    assert "0%" in derivation and "0.00 / 3" in derivation     # only bob's graded 0 counts


def test_report_names_each_diagnosed_bug_as_the_student_was_told_it():
    import nbformat

    from coursekit.report import report
    data = report_data()
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("check()", metadata={"nbgrader": {"grade_id": "test_attention"}})
    said = "softmax 的维度不对：每一行（每个查询）的权重之和应为 1。"
    cell.outputs = [nbformat.v4.new_output("error", ename="GradingFailure",
                                           evalue=f"x [bug:att_softmax_dim] {said}\x1b[31m✗\x1b[0m attention: n=4"),
                    nbformat.v4.new_output("stream", text="[bug:att_softmax_dim] again\n")]
    nb.cells.append(cell)
    report._count_bugs(nb, CH, data["bugs"], data["said"])
    assert data["bugs"][(CH, "test_attention")]["att_softmax_dim"] == 1   # once per notebook, not per output
    page = "".join(report._chapter_tables(data, CH, "zh"))
    assert "最常见的错误" in page
    assert f"{said} <small>(att_softmax_dim)</small> × 1" in page


def test_report_lists_similar_pairs_with_the_caveat(tmp_path):
    import nbformat

    from coursekit.report import report

    def notebook(code):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(code, metadata={"nbgrader": {"solution": True, "grade_id": "a"}})]
        return nb
    (tmp_path / "release" / CH).mkdir(parents=True)
    nbformat.write(notebook(RELEASE), tmp_path / "release" / CH / f"{CH}.ipynb")
    for name, code in (("alice", ALICE), ("bob", BOB), ("dave", DAVE)):
        (tmp_path / "submitted" / name / CH).mkdir(parents=True)
        nbformat.write(notebook(code), tmp_path / "submitted" / name / CH / f"{CH}.ipynb")
    section = report._similarity_section(tmp_path, [CH], lang="en")
    assert "reason to look, not proof" in section
    assert "alice ~ bob" in section and "dave" not in section   # independent answers share nothing listed
    assert "side by side" in section and (tmp_path / "reports" / "similar").is_dir()


def test_the_similarity_findings_are_made_once_ahead_and_again_only_where_an_answer_changed(tmp_path, monkeypatch):
    """The grader makes a chapter's findings while the class is graded (precompute_aside,
    at the lowest priority); the report then reads them from .grading/similarity/ instead
    of comparing again. A changed answer (a late submission) is compared again with each
    other answer, and only it: the pairs of answers that did not change are kept. A
    side-by-side page that is gone, or wanted in another language, is made again
    without comparing anything again."""
    import nbformat

    import helpers
    from coursekit.report import report

    def notebook(code):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(code, metadata={"nbgrader": {"solution": True, "grade_id": "a"}})]
        return nb

    def hand_in(name, code):
        (tmp_path / "submitted" / name / CH).mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook(code), tmp_path / "submitted" / name / CH / f"{CH}.ipynb")
    (tmp_path / "release" / CH).mkdir(parents=True)
    nbformat.write(notebook(RELEASE), tmp_path / "release" / CH / f"{CH}.ipynb")
    for name, code in (("alice", ALICE), ("bob", BOB), ("dave", DAVE)):
        hand_in(name, code)
    request = report.similarity_request(tmp_path, [CH], {CH: "en"})
    assert request["lang"] == "en" and request["top"] == report.SIMILAR_TOP
    assert request["helpers"] == str(Path(helpers.__file__).parent)
    assert similarity.precompute_aside(request) == 0
    assert (tmp_path / ".grading" / "similarity" / f"{CH}.json").exists()
    compared = []
    real = similarity._compare
    monkeypatch.setattr(similarity, "_compare",
                        lambda a, b: compared.append((a.filename, b.filename)) or real(a, b))
    section = report._similarity_section(tmp_path, [CH], lang="en")
    assert compared == [] and "alice ~ bob" in section          # read, not compared again
    hand_in("dave", ALICE)                                        # a late answer, copied from alice
    section = report._similarity_section(tmp_path, [CH], lang="en")
    assert sorted(compared) == [("alice.py", "dave.py"), ("bob.py", "dave.py")]   # alice ~ bob kept
    assert "alice ~ dave" in section and "alice ~ bob" in section
    for page in (tmp_path / "reports" / "similar").glob("*.html"):
        page.unlink()
    report._similarity_section(tmp_path, [CH], lang="en")
    assert len(compared) == 2 and any((tmp_path / "reports" / "similar").glob("*.html"))
    report._similarity_section(tmp_path, [CH], lang="zh")         # another language: other pages
    assert len(compared) == 2
    assert all("不是抄袭的证据" in page.read_text(encoding="utf-8")
               for page in (tmp_path / "reports" / "similar").glob("*.html"))


def test_an_answer_copied_from_the_courses_helpers_is_flagged_and_an_independent_one_is_not(tmp_path):
    """Later chapters ship working code for earlier exercises in helpers/ (and
    every student pack has it): ch07's get_batch taken from ch09's fallback and
    ch03's attention taken from ch05's given module are listed in the class
    report; the model answers, written apart from them, are not."""
    import inspect
    import shutil
    import sys

    import nbformat
    from harness import ROOT, make_submission

    from coursekit.report import report
    sys.path.insert(0, str(ROOT / "notebooks" / "given"))      # what ch05 and ch09 hand out in their own folders
    import block_attention
    import tiny_gpt
    copied = {
        "ch07_gpt": {"get_batch": inspect.getsource(tiny_gpt.get_batch)},
        "ch03_multi_head": {"causal_self_attention": inspect.getsource(block_attention.CausalAttention)
                            .replace("CausalAttention", "CausalSelfAttention")}}
    for ch, answer in copied.items():
        shutil.copytree(ROOT / "release" / ch, tmp_path / "release" / ch)
        rel = nbformat.read(ROOT / "release" / ch / f"{ch}.ipynb", as_version=4)
        src = nbformat.read(ROOT / "source" / ch / f"{ch}.ipynb", as_version=4)
        for student, replace in (("copier", answer), ("honest", None)):
            (tmp_path / "submitted" / student / ch).mkdir(parents=True)
            nbformat.write(make_submission(rel, src, replace), tmp_path / "submitted" / student / ch / f"{ch}.ipynb")
    section = report._similarity_section(tmp_path, sorted(copied), lang="en")
    rows = section[section.index("Answers close to code the course ships"):]
    assert "<td>copier</td><td>ch07_gpt</td><td>get_batch</td><td>release/ch09_inside_gpt/tiny_gpt.py</td>" in rows
    assert ("<td>copier</td><td>ch03_multi_head</td><td>causal_self_attention</td>"
            "<td>release/ch05_block/block_attention.py</td>") in rows
    assert "honest" not in rows and rows.count("<tr>") == 3          # a header and the two copies


def test_the_helpers_tokens_kept_between_runs_flag_what_fresh_ones_flag(tmp_path):
    """helpers/ is tokenised once per machine: later processes (each with its
    own string hashing) read the kept tokens and flag the same answer with the
    same share as the first, and a kept file that cannot be read is made again."""
    import subprocess
    import sys
    probe = (
        "import inspect, json\n"
        "from pathlib import Path\n"
        "from coursekit.report import similarity\n"
        "import sys\n"
        "from helpers import ch09_inside_gpt\n"
        "helpers = similarity.helper_sources(Path(ch09_inside_gpt.__file__).parent)\n"
        "sys.path.insert(0, str(Path(ch09_inside_gpt.__file__).parent.parent / 'notebooks' / 'given'))\n"
        "import tiny_gpt\n"
        "copied = inspect.getsource(tiny_gpt.get_batch)\n"
        "answers = {'copier': {'get_batch': copied}, 'honest': {'get_batch': 'def get_batch(d, n):\\n    return d[:n]\\n'}}\n"
        "found = similarity.helper_matches('ch07_gpt', answers, {'get_batch': ''}, helpers)\n"
        "print(json.dumps([[m.student, m.helper, round(m.share, 9), m.shared_tokens] for m in found]))\n")

    def flagged(seed: int):
        env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), PYTHONHASHSEED=str(seed))
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    first = flagged(1)
    kept = sorted((tmp_path / "transformer-course" / "similarity").glob("*.txt"))
    assert [row[:2] for row in first] == [["copier", "release/ch09_inside_gpt/tiny_gpt.py"]] and kept
    assert flagged(2) == first                      # read back, in a process that hashes differently
    biggest = max(kept, key=lambda p: p.stat().st_size)
    text = biggest.read_text(encoding="utf-8")
    biggest.write_bytes(b"\xff\xfe not text")
    assert flagged(3) == first and biggest.read_text(encoding="utf-8") == text
