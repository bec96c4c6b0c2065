"""Form checks for quiz answers (chapter 9).

A quiz answer lives in a named variable, for example ``q01_sqrt_dk = "B"``.
The functions here only check the *form* of an answer (a letter, a set of
letters, a number) and say clearly what is wrong with it; they know nothing
about which answer is right. That is decided when the work is graded.

Accepted forms:

- one letter: ``"B"`` (lower case and surrounding spaces are accepted: ``" b "``);
- several letters: ``"AC"``, ``"A, C"``, ``["A", "C"]``, ``("A", "C")`` or ``{"A", "C"}``,
  each letter at most once;
- a number: an ``int`` or ``float`` (``3.5e8``, ``2 / 3``), not a string, not ``nan``.
"""
from __future__ import annotations

import math
import numbers

from .checks import CheckFailed
from .i18n import t


class AnswerFormError(CheckFailed):
    """The answer has the wrong form (not a wrong answer: that is decided at grading)."""


def _options_text(options: str) -> str:
    return f"{options[0]}–{options[-1]}"


def _unanswered(name: str) -> AnswerFormError:
    return AnswerFormError(t(f"{name}：还没有作答（值是 None 或空）。",
                             f"{name}: not answered yet (the value is None or empty)."))


def parse_choice(answer, options: str = "ABCD", name: str = "answer") -> str:
    """One letter among ``options``, upper-cased; AnswerFormError otherwise."""
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        raise _unanswered(name)
    if isinstance(answer, bool) or isinstance(answer, numbers.Number):
        raise AnswerFormError(t(
            f"{name}：单选题的答案是 {_options_text(options)} 中的一个字母，写成带引号的字符串，"
            f"而不是数字 {answer!r}。",
            f"{name}: a single-choice answer is one letter among {_options_text(options)}, written as a "
            f"string in quotes, not the number {answer!r}."))
    if isinstance(answer, (list, tuple, set, frozenset)):
        items = list(answer)
        if len(items) == 1 and isinstance(items[0], str):
            how = t(f"写 {items[0]!r} 而不是 {answer!r}", f"write {items[0]!r}, not {answer!r}")
        else:
            how = t(f"得到 {answer!r}", f"got {answer!r}")
        raise AnswerFormError(t(
            f"{name}：这是单选题，只填一个字母字符串，不要用列表或集合：{how}。",
            f"{name}: this question has one answer; give one letter string, not a list or set: {how}."))
    if not isinstance(answer, str):
        raise AnswerFormError(t(f"{name}：答案应是字符串，得到 {type(answer).__name__}。",
                                f"{name}: the answer should be a string, got {type(answer).__name__}."))
    letter = answer.strip().upper()
    if len(letter) != 1 or letter not in options:
        more = t("这是单选题，只选一个。", "This question has one answer only.") \
            if len(letter) > 1 and all(c in options + ", " for c in letter) else ""
        raise AnswerFormError(t(f"{name}：答案必须是 {_options_text(options)} 中的一个字母，得到 {answer!r}。{more}",
                                f"{name}: the answer must be one letter among {_options_text(options)}, "
                                f"got {answer!r}. {more}".rstrip()))
    return letter


def parse_choices(answer, options: str = "ABCDE", name: str = "answer") -> frozenset[str]:
    """A non-empty set of distinct letters among ``options``; AnswerFormError otherwise."""
    if answer is None:
        raise _unanswered(name)
    if isinstance(answer, bool) or isinstance(answer, numbers.Number):
        raise AnswerFormError(t(
            f"{name}：多选题的答案是若干字母（一个字符串，或字母的列表、集合），而不是数字 {answer!r}。",
            f"{name}: a multiple-answer question takes letters (one string, or a list or set of letters), "
            f"not the number {answer!r}."))
    if isinstance(answer, str):
        items = [c for c in answer.upper() if c not in " ,;/、，"]
    elif isinstance(answer, (list, tuple, set, frozenset)):
        items = []
        for item in answer:
            if not isinstance(item, str) or len(item.strip()) != 1:
                raise AnswerFormError(t(
                    f"{name}：列表里的每一项都应是一个字母字符串，得到 {item!r}。",
                    f"{name}: every item of the list should be one letter string, got {item!r}."))
            items.append(item.strip().upper())
    else:
        raise AnswerFormError(t(f"{name}：答案应是字符串或字母列表，得到 {type(answer).__name__}。",
                                f"{name}: the answer should be a string or a list of letters, "
                                f"got {type(answer).__name__}."))
    if not items:
        raise _unanswered(name)
    bad = sorted({c for c in items if c not in options})
    if bad:
        raise AnswerFormError(t(f"{name}：只能选 {_options_text(options)}，得到不认识的 {', '.join(map(repr, bad))}。",
                                f"{name}: the options are {_options_text(options)}; "
                                f"{', '.join(map(repr, bad))} is not one of them."))
    repeated = sorted({c for c in items if items.count(c) > 1})
    if repeated:
        raise AnswerFormError(t(f"{name}：字母 {', '.join(repeated)} 重复出现了；每个选项最多写一次。",
                                f"{name}: the letter {', '.join(repeated)} appears more than once; "
                                "give each option at most once."))
    return frozenset(items)


def parse_number(answer, name: str = "answer") -> float:
    """A finite real number as float; AnswerFormError otherwise."""
    if answer is None:
        raise _unanswered(name)
    if isinstance(answer, str):
        try:
            float(answer)
            how = t(f"去掉引号：写 {answer.strip()} 而不是 {answer!r}", f"drop the quotes: {answer.strip()}, not {answer!r}")
        except ValueError:
            how = t("去掉引号，写一个数", "drop the quotes and write a number")
        raise AnswerFormError(t(f"{name}：答案应是数字，而不是字符串 {answer!r}（{how}）。",
                                f"{name}: the answer should be a number, not the string {answer!r} ({how})."))
    if isinstance(answer, bool) or not isinstance(answer, numbers.Real):
        try:  # a 0-d tensor or a numpy scalar
            if getattr(answer, "ndim", None) == 0 or getattr(answer, "shape", None) == ():
                answer = float(answer)
        except Exception:
            pass
    if isinstance(answer, bool) or not isinstance(answer, numbers.Real):
        raise AnswerFormError(t(f"{name}：答案应是一个数（int 或 float），得到 {type(answer).__name__}。",
                                f"{name}: the answer should be a number (int or float), "
                                f"got {type(answer).__name__}."))
    value = float(answer)
    if not math.isfinite(value):
        raise AnswerFormError(t(f"{name}：答案应是有限的数，得到 {value}。",
                                f"{name}: the answer should be a finite number, got {value}."))
    return value


def _ok(name: str, shown: str) -> None:
    print(t(f"✓ {name} 的格式正确（{shown}）。对错在评分时判定。",
            f"✓ {name} has the right form ({shown}). Whether it is right is decided at grading."))


def expect_choice(answer, name: str, options: str = "ABCD") -> None:
    """Visible test of a single-choice answer: form only."""
    _ok(name, repr(parse_choice(answer, options, name)))


def expect_choices(answer, name: str, options: str = "ABCDE") -> None:
    """Visible test of a multiple-answer question: form only."""
    _ok(name, "{" + ", ".join(repr(c) for c in sorted(parse_choices(answer, options, name))) + "}")


def expect_number(answer, name: str) -> None:
    """Visible test of a numeric answer: form only."""
    _ok(name, f"{parse_number(answer, name):.6g}")
