"""Why a notebook was flagged: typed values, rendered only when shown.

The grading steps signal each other and the instructor with a ``Flag`` (a
kind from the table below and a detail: a file name, grade ids, seconds);
the summary and the class report render it in the chapter's language. A
step never matches a sentence.
"""
from __future__ import annotations

from dataclasses import dataclass

# kind -> (zh, en); {detail} is filled in
TEXTS = {
    "renamed": ("笔记本改了名（{detail}），按原名评分", "renamed notebook ({detail}); graded under its release name"),
    "no_notebook": ("没有找到笔记本；按空白作业评分", "no notebook found; scored as empty"),
    "several_notebooks": ("有 {detail} 个笔记本，都不是原名；按空白作业评分",
                          "{detail} notebooks, none with the release name; scored as empty"),
    "unreadable": ("不是有效的笔记本（{detail}）；按空白作业评分", "not a valid notebook ({detail}); scored as empty"),
    "duplicated_cells": ("单元格重复：{detail}（只评一次）", "duplicated cells {detail} (graded once)"),
    "restored_cells": ("删除了只读单元格：{detail}（已恢复）", "deleted read-only cells {detail} (restored)"),
    "notebook_time_limit": ("达到整本时间上限（{detail} 秒）", "notebook time limit ({detail} s) reached"),
    "cell_time_limit": ("达到单元格时间上限", "cell time limit reached"),
    "memory_limit": ("达到内存上限", "memory limit reached"),
    "kernel_died": ("内核崩溃", "kernel died"),
    "tampering": ("检测到篡改", "tampering detected"),
    "grading_module": ("调用了评分模块", "called the grading module"),
    "forbidden_call": ("调用了禁止使用的库函数", "called a forbidden library function"),
    "seal_missing": ("{detail}：通过了但没有检查的封印（检查被绕过）；记 0 分",
                     "{detail}: passed without its checks' seal (checks bypassed); score set to 0"),
    "seals_unchecked": ("无法核对封印（{detail}）；自动评分记 0", "seals could not be checked ({detail}); auto scores set to 0"),
    "huge_output": ("输出过大（已截断）", "huge output (cut)"),
    "not_graded": ("没有评分结果", "not graded"),
    "autograde_failed": ("nbgrader 未能完成（见 .grading/logs）", "autograde failed (see .grading/logs)"),
    "gradebook_busy": ("成绩簿忙，单独重评", "gradebook busy; graded again alone"),
    "scored_empty": ("{reason}；按空白作业评分（提交的文件未改动）",
                     "{reason}; scored as empty (the submitted file is untouched)"),
    "note": ("{detail}", "{detail}"),
}
# the reason "scored as empty" gives, by the kind of failure (its detail)
REASONS = {"kernel_died": ("内核崩溃", "kernel died"),
           "notebook_time_limit": ("达到整本时间上限", "notebook time limit reached"),
           "autograde_failed": ("nbgrader 未能完成", "autograde failed")}


@dataclass(frozen=True)
class Flag:
    kind: str
    detail: str = ""

    def __post_init__(self):
        if self.kind not in TEXTS:
            raise ValueError(f"unknown flag kind {self.kind!r}")

    def render(self, lang: str = "en") -> str:
        zh, en = TEXTS[self.kind]
        return (zh if lang == "zh" else en).format(detail=self.detail, reason=reason(self.detail, lang))

    def __str__(self) -> str:
        return self.render("en")

    def to_json(self) -> dict:
        return {"kind": self.kind, "detail": self.detail}

    @classmethod
    def from_json(cls, value) -> Flag:
        """A saved flag; a sentence saved by an older grader becomes a note."""
        if isinstance(value, dict) and value.get("kind") in TEXTS:
            return cls(value["kind"], str(value.get("detail", "")))
        return cls("note", str(value))


def reason(kind: str, lang: str = "en") -> str:
    zh, en = REASONS.get(kind, REASONS["autograde_failed"])
    return zh if lang == "zh" else en


def render_all(flags, lang: str) -> str:
    return "; ".join(f.render(lang) for f in flags)
