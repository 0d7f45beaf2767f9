"""The base of the local fake servers (ops/fake_llm.py, ops/fake_channels.py): a Starlette app served by
uvicorn, on a background daemon thread for tests (`start`/`stop`, or `with`) or in the foreground for the
CLI (`serve_forever`). The socket is bound before the server starts, so port 0 resolves to a free port and
`base_url` is known as soon as `start` returns."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from types import TracebackType
from typing import Self

import uvicorn
from starlette.applications import Starlette


class FakeServer:
    """Serves `app` (the subclass's routes); subclasses name themselves in `label`."""

    label = "fake server"  # "<label> server did not start"; the thread is named after it

    def __init__(self, app: Starlette, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self.host = host
        self.port = port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thaw = threading.Event()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> Self:
        """Serve on a background thread; returns once the socket is accepting connections."""
        sock = self._bind()
        self._server = uvicorn.Server(self._config())
        self._thread = threading.Thread(
            target=asyncio.run,
            args=(self._serve(self._server, sock),),
            name=self.label.lower().replace(" ", "-"),
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{self.label} server did not start")
            time.sleep(0.01)
        return self

    async def _serve(self, server: uvicorn.Server, sock: socket.socket) -> None:
        self._loop = asyncio.get_running_loop()
        await server.serve(sockets=[sock])

    def freeze(self, seconds: float) -> None:
        """Stop answering for `seconds` (or until `thaw`), as a process under SIGSTOP would: connections are
        still accepted by the kernel, but no request, in flight or new, gets a byte until then. Returns at
        once. (The server runs in the caller's process, which a SIGSTOP would freeze too.)"""
        if self._loop is None:
            raise RuntimeError(f"{self.label} server is not running")
        self._thaw.clear()
        # Blocks the server's event loop on purpose: everything it serves waits.
        self._loop.call_soon_threadsafe(self._thaw.wait, seconds)

    def thaw(self) -> None:
        self._thaw.set()

    def stop(self) -> None:
        self.thaw()
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        self._server = None
        self._thread = None

    def serve_forever(self) -> None:
        """Run in the foreground (the CLI); Ctrl-C stops it. Prints `listening_message` once bound."""
        sock = self._bind()
        print(self.listening_message(), flush=True)
        uvicorn.Server(self._config()).run(sockets=[sock])

    def listening_message(self) -> str:
        return f"{self.label} listening on {self.base_url}"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _bind(self) -> socket.socket:
        # Binding here, not in uvicorn, lets port 0 resolve to a free port before the thread starts.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        return sock

    def _config(self) -> uvicorn.Config:
        return uvicorn.Config(
            self.app, log_level="critical", access_log=False, lifespan="off", timeout_graceful_shutdown=1
        )
