"""The grader's side of a graded kernel's start: a kernel client that waits
for the kernel no longer than it has to.

jupyter_client's ``wait_for_ready`` (what nbclient, hence nbgrader's Execute,
calls before the first cell) ends by reading the kernel's IOPub channel until
it stays quiet for 0.2 s: a fixed 0.2 s on every notebook, 0.2 s of a forked
kernel's whole 0.5 s start. Nothing needs it here: nbclient (and the
preflight) read each cell's output by the id of the request that asked for
it, so a late message about the kernel_info handshake is skipped anyway.

Its sockets also try a connection again every 10 ms instead of ZeroMQ's
100 ms: the client connects as soon as the kernel is launched, before a
forked kernel has bound its IPC socket files, and the first try fails.

``--AsyncKernelManager.client_class=coursekit.grade.kernel_client.ReadyClient``
(the pipeline's autograde) makes nbgrader's kernels use it.

The end of a graded kernel has the same kind of wait: jupyter_client asks the
kernel to shut down, then looks whether it has gone every 0.1 s, so the first
look comes 0.1 s after a request the kernel answers in a few milliseconds.
``QuickStop`` (the manager the course's Execute step, coursekit.grade.replay,
gives its kernels) looks every 5 ms, within the same time limits.
"""
from __future__ import annotations

import time
from queue import Empty

import zmq
import zmq.asyncio
from jupyter_client import AsyncKernelManager
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.utils import ensure_async

NAME = f"{__name__}.ReadyClient"
RECONNECT_MS = 10
STOP_POLL_S = 0.005


class ReadyClient(AsyncKernelClient):

    def _context_default(self) -> zmq.asyncio.Context:
        self._created_context = True
        ctx = zmq.asyncio.Context()
        ctx.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS)   # the default for every socket made from it
        return ctx

    async def _async_wait_for_ready(self, timeout: float | None = None) -> None:
        """jupyter_client's handshake (a kernel_info reply on the shell channel,
        then a message on IOPub, which proves IOPub is connected), without the
        0.2 s of IOPub silence it waits for at the end."""
        deadline = time.time() + (float("inf") if timeout is None else timeout)
        while True:
            self.kernel_info()
            try:
                msg = await ensure_async(self.shell_channel.get_msg(timeout=1))
            except Empty:
                pass
            else:
                if msg["msg_type"] == "kernel_info_reply":
                    try:
                        await ensure_async(self.iopub_channel.get_msg(timeout=0.2))
                    except Empty:
                        pass
                    else:
                        self._handle_kernel_info_reply(msg)
                        return
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.time() > deadline:
                raise RuntimeError("Kernel didn't respond in %d seconds" % timeout)

    wait_for_ready = _async_wait_for_ready


class QuickStop(AsyncKernelManager):
    """A kernel manager that sees a kernel it asked to shut down go within 5 ms."""

    async def _async_finish_shutdown(self, waittime: float | None = None, pollinterval: float = 0.1,
                                     restart: bool = False) -> None:
        await super()._async_finish_shutdown(waittime, min(pollinterval, STOP_POLL_S), restart)
