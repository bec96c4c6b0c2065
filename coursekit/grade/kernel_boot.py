"""Start an IPython kernel for grading: the guard takes its snapshot after the
kernel is initialised and before any student code runs.

Used as the kernel command of the grading pipeline:
    python -m coursekit.grade.kernel_boot -f CONNECTION_FILE
The seal key arrives on the file descriptor named by COURSE_SEAL_FD and is
read and closed here, so student code cannot read it from the environment.
"""
from __future__ import annotations

import os
import sys


def _read_key() -> bytes | None:
    from grading import protocol
    fd = os.environ.pop(protocol.ENV_SEAL_FD, None)
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


def start(argv: list[str], key: bytes | None) -> None:
    """Initialise the kernel, boot the guard with ``key``, then serve (the cold
    kernel here and each warm kernel the zygote forks both start this way)."""
    import numpy  # noqa: F401
    import torch  # noqa: F401  (imported before the snapshot: the checks rely on it)
    from ipykernel.kernelapp import IPKernelApp

    import helpers.checks  # noqa: F401
    from grading import guard

    app = IPKernelApp.instance()
    app.initialize(argv)
    inline_figures(app.shell)
    guard.boot(key)
    del key
    app.start()


def inline_figures(shell) -> None:
    """Figures drawn by a cell become images in its output, as in JupyterLab.

    matplotlib's inline backend sets itself up when it is imported into a
    running IPython; a warm kernel imported it in the factory, before any
    shell existed, so without this its figures would reach the graded notebook
    as "<Figure size 1200x360 with 1 Axes>" and the feedback page would show
    no picture."""
    backend = "module://matplotlib_inline.backend_inline"
    if os.environ.get("MPLBACKEND", backend) != backend:
        return
    from IPython.core.pylabtools import activate_matplotlib
    from matplotlib_inline import backend_inline

    if backend_inline.flush_figures in shell.events.callbacks.get("post_execute", []):
        return
    activate_matplotlib(backend)
    backend_inline.configure_inline_support(shell, backend)


def main() -> None:
    start(sys.argv[1:], _read_key())


if __name__ == "__main__":
    main()
