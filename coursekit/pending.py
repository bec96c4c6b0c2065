"""Points awaiting the instructor: manually graded cells nobody has graded yet.

nbgrader scores such a cell 0 until someone grades it in the formgrader; the
course's outputs (summary, feedback, grades.csv, class report) show it as
"awaiting grading" with its points instead, apart from the auto points, and
the final score once it is graded.
"""
from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field

WORDS = {"zh": ("待批改", "自动评分", "分"), "en": ("awaiting grading", "auto", "points")}


def is_pending(grade) -> bool:
    """A manually graded cell no one has graded yet."""
    return grade.auto_score is None and grade.manual_score is None


@dataclass
class Standing:
    """A submission's points: auto and manual scores so far, and what awaits grading."""
    score: float = 0.0        # everything scored so far (auto + manual)
    max_score: float = 0.0    # every cell's points
    auto: float = 0.0
    auto_max: float = 0.0
    pending: dict[str, float] = field(default_factory=dict)   # grade id -> its points

    @property
    def pending_points(self) -> float:
        return sum(self.pending.values())

    @property
    def final(self) -> bool:
        return not self.pending

    def render(self, lang: str = "en") -> str:
        waiting, auto, points = WORDS.get(lang, WORDS["en"])
        if self.final:
            return f"{self.score:g}/{self.max_score:g}"
        sep = "，" if lang == "zh" else ", "
        return (f"{self.score:g}/{self.max_score - self.pending_points:g} ({auto} {self.auto:g}/{self.auto_max:g})"
                f"{sep}{waiting} {self.pending_points:g} {points}")


def standing(submission_notebook) -> Standing:
    s = Standing()
    for g in submission_notebook.grades:
        s.max_score += g.max_score or 0.0
        if is_pending(g):
            s.pending[g.name] = g.max_score or 0.0
            continue
        s.score += g.score or 0.0
        if g.auto_score is not None and g.manual_score is None:
            s.auto += g.auto_score
            s.auto_max += g.max_score or 0.0
    return s


def standings(gb, chapter: str) -> dict[str, Standing]:
    """student -> Standing, for every graded submission of ``chapter``."""
    out = {}
    for sub in gb.assignment_submissions(chapter):
        for nb in sub.notebooks:
            out[sub.student.id] = standing(nb)
    return out


def annotate_csv(text: str, lookup) -> str:
    """grades.csv with three columns more: auto_score, awaiting_grading (points)
    and status ("final" or "awaiting grading"). ``lookup(assignment, student)``
    gives a Standing or None."""
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        return text
    cols = list(rows[0].keys()) + ["auto_score", "awaiting_grading", "status"]
    out = io.StringIO()
    w = csv.DictWriter(out, cols, lineterminator="\n")
    w.writeheader()
    for row in rows:
        st = lookup(row["assignment"], row["student_id"])
        row["auto_score"] = f"{st.auto:g}" if st else ""
        row["awaiting_grading"] = f"{st.pending_points:g}" if st else "0"
        row["status"] = "final" if not st or st.final else "awaiting grading"
        w.writerow(row)
    return out.getvalue()


def annotate_feedback(html: str, st: Standing, lang: str) -> str:
    """The feedback page with each pending cell's score shown as awaiting
    grading (its points), and the total split into scored and awaiting."""
    waiting, _, points = WORDS.get(lang, WORDS["en"])
    for gid, pts in st.pending.items():
        note = f"{waiting} ({pts:g} {points})"
        g = re.escape(gid)
        html = re.sub(rf'(<a href="#{g}">[^<]*</a> \()Score: [0-9.]+ / [0-9.]+\)', rf"\g<1>{note})", html)
        html = re.sub(rf'(<a name="{g}"></a>(?:(?!<a name=)[\s\S]){{0,600}}?<span class="pull-right">\s*)'
                      r"Score: [0-9.]+ / [0-9.]+", rf"\g<1>{note}", html)
    if not st.final:
        html = re.sub(r"\(Score: [0-9.]+ / [0-9.]+\)</h4>",
                      f"(Score: {st.score:g} / {st.max_score - st.pending_points:g}; "
                      f"{waiting}: {st.pending_points:g} {points})</h4>", html, count=1)
    return html
