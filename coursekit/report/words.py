"""What the course's own pages and summaries say, in the chapter's language.

Every sentence a grading run writes for a student or an instructor (the
terminal summary, the feedback page's frame, the class report, the similarity
pages) comes from here, so that each build speaks one language and the same
thing is said with the same words everywhere. Machine-readable values (CSV
column names, statuses) stay English and are not here.
"""
from __future__ import annotations

LANGS = ("zh", "en")
HTML_LANG = {"zh": "zh-CN", "en": "en"}

TEXT = {
    # scores
    "points": ("分", "points"),
    "awaiting": ("待批改", "awaiting grading"),
    "no_answer": ("未作答", "no answer"),
    "graded_by_hand": ("人工评分", "graded by hand"),
    # the feedback page's frame
    "feedback_title": ("{chapter} 的反馈", "Feedback on {chapter}"),
    "total": ("总分", "Score"),
    "your_answer": ("你的答案", "your answer"),
    "figure": ("图", "Figure"),
    "test": ("测试", "tests"),
    "task": ("任务", "task"),
    "to_top": ("回到顶部", "back to top"),
    "comments": ("老师的评语：", "Instructor's comments:"),
    "comment_on": ("{exercise} · 评语", "{exercise} · comments"),
    "late_penalty": ("迟交扣分", "Late submission penalty"),
    "contents": ("目录", "Contents"),
    "input": ("代码", "code"),
    "name_missing": ("… 这个单元格用到的 {name} 没有定义：给出它的单元格没有运行完（多半是因为还没有完成的练习）。",
                     "… {name} is not defined here: the cell that makes it did not finish (most likely because of "
                     "an exercise not done yet)."),
    "cell_error": ("这个单元格出错了：{error}", "This cell raised an error: {error}"),
    "needs_unfinished": ("… 这个单元格用到了还没有完成的练习（它仍然是 raise NotImplementedError()），所以没有运行完。",
                         "… this cell uses an exercise that is not done yet (it still raises NotImplementedError()), "
                         "so it did not finish."),
    # the terminal summary
    "student": ("学生", "student"),
    "chapter": ("章节", "chapter"),
    "score": ("得分", "score"),
    "flags": ("标记", "flags"),
    "kept": ("（沿用上次结果）", "(kept from an earlier run)"),
    # the class report
    "report_title": ("班级报告", "Class report"),
    "report_counts": ("{students} 名学生，评了 {notebooks} 份作业。", "{students} students, {notebooks} notebooks graded."),
    "students": ("学生", "Students"),
    "feedback_link": ("反馈", "feedback"),
    "distribution": ("得分分布", "score distribution"),
    "distribution_axis": ("目前得分（占总分的百分比）；柱高：学生人数", "score so far (% of points); bars: students"),
    "full_marks_rate": ("满分的比例（已评分的学生）", "full marks (% of graded students)"),
    "awaiting_n": ("{n} 份待批改", "{n} awaiting grading"),
    "hardness": ("各练习的难度", "Exercises: how hard they were"),
    "exercise": ("练习", "exercise"),
    "grade_id": ("grade id", "grade id"),
    "full_marks": ("满分比例", "full marks"),
    "mean_score": ("平均分", "mean score"),
    "frequent_bugs": ("最常见的错误（值得再讲一遍）", "Most frequent diagnosed bugs (re-teach these)"),
    "bug_times_students": ("错误 × 学生人数", "bug × students"),
    "awaiting_section": ("待批改（在 formgrader 里批改）", "Awaiting grading (formgrader)"),
    "submissions": ("份数", "submissions"),
    "flagged": ("被标记的作业", "Flagged submissions"),
    "why": ("原因", "why"),
    "similar": ("相似的答案", "Similar answers"),
    "similar_note": ("<b>相似只是值得看一眼的理由，不是抄袭的证据</b>：同一道题的简短答案往往相像，学生也可能参考了同一段课堂代码。"
                     "只比较学生自己写的部分（发布版里原有的代码不算），并且忽略变量名，改名藏不住抄袭。",
                     "<b>Similarity is a reason to look, not proof</b>: short answers to the same exercise often look "
                     "alike, and students may have worked from the same lecture code. Only what the students wrote is "
                     "compared (the release's code is left out); names are ignored, so renaming does not hide a copy."),
    "similar_students": ("学生", "students"),
    "similar_shared": ("相同部分", "shared"),
    "similar_view": ("对照", "view"),
    "side_by_side": ("并排对照", "side by side"),
    "tokens": ("{n} 个词元", "{n} tokens"),
    "similarity_failed": ("{chapter}：没有算出相似度（{error}）", "{chapter}: similarity not computed ({error})"),
    "similar_page_title": ("{chapter}：{a} 与 {b} 的答案", "{chapter}: answers of {a} and {b}"),
    "similar_page_note": ("高亮的是两份答案里相同的部分（忽略变量名）；发布版里原有的代码不高亮。",
                          "Highlighted: what the two answers share (names ignored); the release's own code is "
                          "never highlighted."),
    "helper_match": ("与课程 helpers/ 里的代码相近的答案", "Answers close to code the course ships in helpers/"),
    "helper_match_note": ("后面的章节会在 helpers/ 里给出前面练习的可用代码（例如第 9 章的备用模型里有因果注意力和 "
                          "get_batch）：学生包里就有这些代码。这里列出大部分内容与之相同的答案，是值得看一眼的理由，"
                          "不是抄袭的证据。",
                          "Later chapters ship working code for earlier exercises in helpers/ (chapter 9's fallback "
                          "model holds causal attention and a get_batch, for example), and every student pack has it. "
                          "Answers that are mostly that code are listed here: a reason to look, not proof."),
    "helper_file": ("helpers 里的文件", "file in helpers/"),
}


def word(key: str, lang: str, **fields) -> str:
    zh, en = TEXT[key]
    text = zh if lang == "zh" else en
    return text.format(**fields) if fields else text


def num(x: float | None) -> str:
    return "" if x is None else f"{x:g}"


def score_line(score: float, max_score: float, pending: float, lang: str) -> str:
    """"6 / 12 分，3 分待批改" / "6 / 12 points, 3 awaiting grading"."""
    if lang == "zh":
        return f"{num(score)} / {num(max_score)} 分" + (f"，{num(pending)} 分待批改" if pending else "")
    return f"{num(score)} / {num(max_score)} points" + (f", {num(pending)} awaiting grading" if pending else "")


def cell_score(status: str, score: float | None, max_score: float, lang: str) -> str:
    """One cell's score as shown next to it."""
    if status == "pending":
        return f"待批改（{num(max_score)} 分）" if lang == "zh" else f"awaiting grading ({num(max_score)} points)"
    if status == "no_answer":
        return f"未作答（0 / {num(max_score)} 分）" if lang == "zh" else f"no answer (0 / {num(max_score)} points)"
    if lang == "zh":
        return f"{num(score)} / {num(max_score)} 分"
    return f"{num(score)} / {num(max_score)} points"


def language_of(langs) -> str:
    """The one language of several chapters (zh if they disagree: the course's default)."""
    found = set(langs)
    return found.pop() if len(found) == 1 else "zh"
