"""Start an IPython kernel for grading: the guard takes its snapshot after the
kernel is initialised and before any student code runs.

Used as the kernel command of the grading pipeline:
    python -m coursekit.kernel_boot -f CONNECTION_FILE
The seal key arrives on the file descriptor named by COURSE_SEAL_FD and is
read and closed here, so student code cannot read it from the environment.
"""
from __future__ import annotations

import os
import sys


def _read_key() -> bytes | None:
    fd = os.environ.pop("COURSE_SEAL_FD", None)
    if fd is None:
        return None
    fd = int(fd)
    chunks = []
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks) or None


def main() -> None:
    key = _read_key()
    import torch  # noqa: F401  (imported before the snapshot: the checks rely on it)
    import numpy  # noqa: F401
    import helpers.checks  # noqa: F401
    from ipykernel.kernelapp import IPKernelApp

    from grading import guard

    app = IPKernelApp.instance()
    app.initialize(sys.argv[1:])
    guard.boot(key)
    app.start()


if __name__ == "__main__":
    main()
