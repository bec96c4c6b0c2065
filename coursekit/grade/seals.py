"""The seal check: an auto-graded cell keeps its points only if each hidden
check it calls printed a valid seal (grading.protocol) under this notebook's
key. Also reads the verdicts the kernel printed (tokens, never sentences)
and the signs of the limits a notebook reached."""
from __future__ import annotations

import re

import nbformat

from grading import protocol

CHECK_RE = re.compile(r"\b(check_\w+)\(")
# what an output shows when a limit stopped the kernel (nbgrader's and Python's own words, not the course's)
LIMIT_SIGNS = (("Timeout", "cell_time_limit"), ("MemoryError", "memory_limit"),
               ("DeadKernelError", "kernel_died"), ("Kernel died", "kernel_died"))
VERDICT_FLAGS = {protocol.TAMPERING: "tampering", protocol.GRADING_MODULE: "grading_module",
                 protocol.FORBIDDEN: "forbidden_call"}


def expected_checks(source_nb) -> dict[str, list[str]]:
    """grade id -> names of the hidden checks its test cell calls."""
    out = {}
    for cell in source_nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and "### BEGIN HIDDEN TESTS" in cell.source:
            hidden = cell.source.split("### BEGIN HIDDEN TESTS", 1)[1].split("### END HIDDEN TESTS", 1)[0]
            names = CHECK_RE.findall(hidden)
            if names:
                out[meta["grade_id"]] = names
    return out


def outputs_text(cell) -> str:
    parts = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            parts.append(o.get("text", ""))
        elif o.get("output_type") == "error":
            parts.append(f"{o.get('ename')}: {o.get('evalue')}\n" + "\n".join(o.get("traceback", [])))
        else:
            parts.append(str(o.get("data", {}).get("text/plain", "")))
    return "".join(parts)


def cell_texts(nb) -> dict[str, str]:
    return {c.metadata.get("nbgrader", {}).get("grade_id"): outputs_text(c) for c in nb.cells}


def flags_from_outputs(all_text: str) -> list[str]:
    """Flag kinds the outputs show: limits reached, and the kernel's verdict tokens."""
    kinds = [kind for sign, kind in LIMIT_SIGNS if sign in all_text]
    kinds += [VERDICT_FLAGS[v] for v in sorted(protocol.verdicts_in(all_text)) if v in VERDICT_FLAGS]
    return list(dict.fromkeys(kinds))


def unsealed(grades, checks: dict[str, list[str]], texts: dict[str, str], key: bytes | None) -> list:
    """The grades that scored although a check they call left no valid seal."""
    out = []
    for grade in grades:
        names = checks.get(grade.name)
        if not names or not grade.auto_score:
            continue
        text = texts.get(grade.name, "")
        if key is None or not all(protocol.seal_token(key, n) in text for n in names):
            out.append(grade)
    return out


def cut_huge_outputs(nb, limit: int = protocol.MAX_OUTPUT_CHARS) -> bool:
    """Cut stream outputs longer than ``limit`` characters; True when any was cut."""
    note = "\n… [output cut by the grader]\n"
    cut = False
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream" and len(o.get("text", "")) > limit:
                o["text"] = o["text"][:limit - len(note)] + note   # at most ``limit``: cutting twice changes nothing
                cut = True
    return cut


def read(path):
    return nbformat.read(path, as_version=4)
