"""What a student reads, checked for words that are not meant for them: the
grader's tokens, exception class names, seals, and (in a zh chapter) English
sentences outside code."""
from __future__ import annotations

import re
from html.parser import HTMLParser

INTERNAL = re.compile(r"\[bug:|\[verdict:|GradingFailure|CheckFailed|NotDoneYet|⟦seal:|Traceback|"
                      r"NotImplementedError(?!\(\))")   # "raise NotImplementedError()" is the stub's own code
# four or more English words in a row (a sentence), outside code and maths
# an error's own message, or a line of the student's code, quoted after the course's words
QUOTED_ERROR = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Warning)(?:: |：|\()[^\n]*|(?:出错的一行：|failing line: )[^\n]*"
                          r"|'[^'\n]*'|“[\x20-\x7e]*”")   # a string value; a work's title in quotes
VALUES = {"nan", "inf", "true", "false", "none", "tensor", "dtype", "float", "int"}   # printed values, not words
ENGLISH = re.compile(r"\b[A-Za-z][a-z']+(?:[ ,]+[A-Za-z][a-z']+){3,}")


class _Reader(HTMLParser):
    """Collects the text of a page outside code, maths, scripts and styles."""
    # a link's text and an emphasised phrase may be a work's English title
    SKIP_TAGS = {"script", "style", "math", "code", "title", "a", "em"}
    SKIP_CLASSES = {"input_area", "highlight"}
    VOID = {"br", "img", "hr", "meta", "link", "input", "col", "area", "base", "wbr", "source"}

    def __init__(self, printed: bool = True):
        super().__init__(convert_charrefs=True)
        self.stack: list[bool] = []
        self.graded: list[bool] = []
        self.parts: list[str] = []
        self.printed = printed

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        classes = set((dict(attrs).get("class") or "").split())
        graded = "celltag_graded" in classes or bool(self.graded and self.graded[-1])
        self.graded.append(graded)
        printout = not self.printed and "output_stdout" in classes and not graded
        self.stack.append(tag in self.SKIP_TAGS or bool(classes & self.SKIP_CLASSES) or printout
                          or (bool(self.stack) and self.stack[-1]))

    def handle_endtag(self, tag):
        if tag not in self.VOID and self.stack:
            self.stack.pop()
            self.graded.pop()

    def handle_data(self, data):
        if not (self.stack and self.stack[-1]):
            self.parts.append(data)


def page_text(page: str, printed: bool = True) -> str:
    """The words of an HTML page a student reads, without the code it shows
    (input areas, <code>), maths, scripts and the page's own markup; without
    what demo cells print (a corpus sample, a generated text) unless ``printed``."""
    reader = _Reader(printed)
    reader.feed(page)
    return " ".join(reader.parts)


def internal_words(text: str) -> list[str]:
    return sorted(set(INTERNAL.findall(text)))


def english_sentences(text: str, allowed=()) -> list[str]:
    """English runs in a text that should be Chinese, outside the titles of
    works (《Attention Is All You Need》, or a name in parentheses: （Natural
    Language Processing with Deep Learning）) and ``allowed`` phrases."""
    found = []
    text = re.sub(r"《[^》]*》|（[\x20-\x7e]*）", " ", text)
    text = QUOTED_ERROR.sub(" ", text)       # an error's own message, quoted after the course's words
    for m in ENGLISH.finditer(text):
        phrase = m.group(0)
        words = {w.lower() for w in re.findall(r"[A-Za-z']+", phrase)} - VALUES
        if len(words) >= 2 and not any(a in phrase or phrase in a for a in allowed):
            found.append(phrase)
    return found
