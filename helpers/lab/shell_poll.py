"""Wait for a kernel's messages in short slices, in the processes that run
nbgrader: the grader's, and the student's JupyterLab server when it validates.

nbclient waits for a cell's reply with one poll of the kernel's shell socket,
as long as the cell may run (120 s). When the cell shows an ipywidgets
``Output`` widget, nbclient's handler for that widget sends on the same socket
while the poll waits, and pyzmq's asyncio poller can then miss a reply that
has already arrived (jupyter/nbclient#312): the notebook sits idle until the
cell's time limit is over, then goes on as if nothing happened. Here a chapter
with a widget took 124 s to grade instead of 4 s, about one run in three.

Polled in slices of at most a second, such a reply is found within a second;
a wait with no reply still ends when its timeout does.
"""
from __future__ import annotations

import time

SLICE_S = 1.0


def install() -> None:
    """Make jupyter_client's asyncio channels poll in slices (idempotent)."""
    from queue import Empty

    from jupyter_client.channels import AsyncZMQSocketChannel

    if getattr(AsyncZMQSocketChannel.get_msg, "in_slices", False):
        return

    async def get_msg(self, timeout: float | None = None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = SLICE_S if deadline is None else min(SLICE_S, max(0.0, deadline - time.monotonic()))
            if await self.socket.poll(int(left * 1000)):
                return await self._recv()
            if deadline is not None and time.monotonic() >= deadline:
                raise Empty

    get_msg.in_slices = True
    get_msg.__doc__ = AsyncZMQSocketChannel.get_msg.__doc__
    AsyncZMQSocketChannel.get_msg = get_msg
