"""What the grading kernel and the grader outside it must agree on.

Both sides import this module: the kernel side (grading.core, grading.guard,
coursekit.grade.sandbox, coursekit.grade.zygote) and the grader
(coursekit.grade.pipeline and its steps, coursekit.report.report,
coursekit.grade.feedback, nbgrader_config.py). It holds no state and imports
nothing heavy, so it is safe to import anywhere.

* the seal a passed hidden check prints, and its HMAC;
* a machine-readable token for each verdict a check can print, so that the
  grader reads tokens, never the localised sentences around them;
* the names of the environment variables the grader hands the kernel's
  launcher, and the default resource limits;
* the course id and the gradebook's address.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import re

# ------------------------------------------------------------------ the course and its gradebook

COURSE_ID = "transformer"     # nbgrader's course id: the gradebook row every run shares
DB_URL_ENV = "COURSE_DB_URL"  # an SQLAlchemy URL (postgresql://...) instead of the SQLite file


def gradebook_url(root) -> str:
    """The gradebook of the course folder ``root``: COURSE_DB_URL, or root/gradebook.db."""
    return os.environ.get(DB_URL_ENV) or f"sqlite:///{os.path.join(str(root), 'gradebook.db')}"


# ------------------------------------------------------------------ environment of the kernel's launcher

ENV_ROOT = "COURSE_ROOT"                # the course folder (hidden inside the sandbox)
ENV_SANDBOX = "COURSE_SANDBOX"          # "1": bubblewrap; "0": limits only
ENV_MEM_MB = "COURSE_MEM_MB"            # address-space limit of a kernel
ENV_NPROC = "COURSE_NPROC"              # process limit of a kernel's uid
ENV_SANDBOX_UID = "COURSE_SANDBOX_UID"  # the notebook's own unprivileged uid
ENV_SEAL_FILE = "COURSE_SEAL_FILE"      # the file holding this notebook's seal key (grader side only)
ENV_SEAL_FD = "COURSE_SEAL_FD"          # the pipe the key travels on into a cold kernel
ENV_ZYGOTE = "COURSE_ZYGOTE"            # the warm kernel factory's socket
ENV_ZYGOTE_IMPORTS = "COURSE_ZYGOTE_IMPORTS"  # modules the factory imports for the run's chapters (comma-separated)
ENV_KERNEL_THREADS = "COURSE_KERNEL_THREADS"
ENV_CELL_TIMEOUT = "COURSE_CELL_TIMEOUT"  # read by nbgrader_config.py (nbgrader's Execute.timeout)
# never handed to anything that runs student code
GRADER_ONLY_ENV = (ENV_SEAL_FILE, ENV_ZYGOTE, DB_URL_ENV, "JPY_PARENT_PID")

# ------------------------------------------------------------------ resource limits (defaults)

MEM_MB = 6144                   # per kernel
NPROC = 256                     # per kernel uid
FSIZE_BYTES = 512 * 2**20       # largest file a kernel may write
WORKDIR_BYTES = 256 * 2**20     # what a warm kernel's working folder copies of the notebook's folder
CELL_TIMEOUT_S = 120            # one cell
NOTEBOOK_TIMEOUT_S = 600        # one notebook, all cells
MAX_OUTPUT_CHARS = 200_000      # one stream output kept in the feedback


def limit(env_name: str, default: int, environ=None) -> int:
    """A limit from the environment (``env_name``), or its default."""
    value = (os.environ if environ is None else environ).get(env_name, "")
    return int(value) if value.strip().isdigit() else default


# ------------------------------------------------------------------ seals

SEAL_MARK = "⟦seal:"
SEAL_END = "⟧"
SEAL_RE = re.compile(r"\s?⟦seal:[a-z0-9_]+:[0-9a-f]{32}⟧")


def seal_token(key: bytes, check_name: str) -> str:
    """The seal a passed check ``check_name`` prints under the notebook's ``key``."""
    mac = hmac.new(key, check_name.encode(), hashlib.sha256).hexdigest()[:32]
    return f"{SEAL_MARK}{check_name}:{mac}{SEAL_END}"


# ------------------------------------------------------------------ verdict tokens

BUG = "bug"                          # [bug:KEY] a known bug, named by its catalogue key
TAMPERING = "tampering"              # code replaced something the checks rely on
FORBIDDEN = "forbidden-call"         # a from-scratch exercise called the function it replaces
NOT_IMPLEMENTED = "not-implemented"  # the answer cell still raises NotImplementedError
GRADING_MODULE = "grading-module"    # the answer called a function of the grading module
VERDICTS = (TAMPERING, FORBIDDEN, NOT_IMPLEMENTED, GRADING_MODULE)

TOKEN_RE = re.compile(r"\[(bug|verdict):([A-Za-z0-9_\-]+)\]")
VERDICT_TOKEN_RE = re.compile(r"\s?\[verdict:[a-z\-]+\]")


def bug_token(key: str) -> str:
    return f"[{BUG}:{key}]"


def verdict_token(kind: str) -> str:
    if kind not in VERDICTS:
        raise ValueError(f"unknown verdict {kind!r}; one of {VERDICTS}")
    return f"[verdict:{kind}]"


def bugs_in(text: str) -> list[str]:
    """Keys of the known bugs a check named in ``text`` (in order, repeats kept)."""
    return [detail for kind, detail in TOKEN_RE.findall(text) if kind == BUG]


def verdicts_in(text: str) -> set[str]:
    """The verdicts (TAMPERING, FORBIDDEN, ...) a check printed in ``text``."""
    return {detail for kind, detail in TOKEN_RE.findall(text) if kind == "verdict"}
