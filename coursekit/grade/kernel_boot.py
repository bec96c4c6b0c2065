"""Start an IPython kernel for grading: the guard takes its snapshot after the
kernel is initialised and before any student code runs.

Used as the kernel command of the grading pipeline:
    python -m coursekit.grade.kernel_boot -f CONNECTION_FILE
The seal key arrives on the file descriptor named by COURSE_SEAL_FD and is
read and closed here, so student code cannot read it from the environment.
"""
from __future__ import annotations

import os
import re
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

    app = graded_app(IPKernelApp).instance()
    app.initialize(argv)
    inline_figures(app.shell)
    guard.boot(key)
    del key
    app.start()


OPTION = re.compile(r"--([A-Za-z_]\w*)\.([A-Za-z_]\w*)=(.*)", re.S)


def simple_config(argv: list[str]):
    """The kernel's command line as traitlets would read it, when it holds only
    what a grading kernel is given (``-f CONNECTION_FILE`` and
    ``--Class.trait=value`` options); None for anything else."""
    from traitlets.config import Config
    from traitlets.config.loader import DeferredConfigString
    cfg = Config()
    args = iter(argv)
    for arg in args:
        if arg == "-f":
            path = next(args, None)
            if path is None:
                return None
            cfg.IPKernelApp.connection_file = DeferredConfigString(path)
            continue
        m = OPTION.fullmatch(arg)
        if m is None:
            return None
        cfg[m.group(1)][m.group(2)] = DeferredConfigString(m.group(3))
    return cfg


def graded_app(base):
    """IPKernelApp, reading its few options without building traitlets' parser
    of every option of every class (argparse over ~40 classes: 0.17 s of a
    forked kernel's 0.22 s start); any other command line is read as before."""

    class GradedKernelApp(base):
        def parse_command_line(self, argv=None):
            argv = sys.argv[1:] if argv is None else list(argv)
            cfg = simple_config(argv)
            if cfg is None:
                return super().parse_command_line(argv)
            self.argv = argv
            self.cli_config = cfg
            self.update_config(cfg)
            self.extra_args = []
    return GradedKernelApp


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
