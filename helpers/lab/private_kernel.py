"""Kernels whose sockets cannot collide with another process's.

jupyter_client gives a kernel TCP ports by binding port 0 and closing the
socket at once; the kernel binds the ports a second or two later, when it has
started. In between, any other process of the machine that asks for a port
(another grader, a second Validate, a test starting kernels, a Dask worker) can
be handed the same one. Then the kernel cannot bind it and dies, or a client
connects to another process's kernel, which drops its requests as badly signed,
and the client waits for a reply until its cell's time limit with both sides
idle (jupyter_client#487; its ``LocalPortCache`` only keeps one process from
handing a port out twice). Seen here as ``nbgrader autograde`` runs stalling for
the 120 s cell limit while another process started kernels.

A ``PrivateKernelManager`` kernel talks over IPC: Unix socket files in a folder
of its own, made by ``mkdtemp`` (created atomically under a fresh name, mode
0700) and removed when the kernel is shut down. No other process can be handed
those names. The course's grader does the same for every graded kernel (each
notebook's socket folder, ``--KernelManager.transport=ipc``); Validate and the
tests that run notebooks use this class.
"""
from __future__ import annotations

import os
import shutil
import tempfile

from jupyter_client import AsyncKernelManager


def private_folder() -> str:
    """A new folder of this kernel's own for its socket files (a short path: a
    Unix socket's path may not exceed 107 bytes)."""
    base = "/tmp" if os.path.isdir("/tmp") else None
    return tempfile.mkdtemp(prefix="kipc-", dir=base)


class PrivateKernelManager(AsyncKernelManager):
    """An AsyncKernelManager whose kernel listens on IPC sockets in a folder of its own."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._private = private_folder()
        self.transport = "ipc"
        self.ip = os.path.join(self._private, "k")

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if not restart:
            shutil.rmtree(self._private, ignore_errors=True)
