"""Fixtures of the tests against a real daemon. internal/sdkgen/python's Go
test (TestPythonSDK) starts the daemon and runs pytest with its address in
AGENTBOX_URL, its token in AGENTBOX_TOKEN and its data directory in
AGENTBOX_TEST_DATA_DIR; without them the daemon tests skip. The daemon
answers by AGENTBOX_TEST_PROXY_HOST (--allowed-hosts), where the cutting
proxy listens."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest


@pytest.fixture
def daemon_env() -> dict[str, str]:
    url, token = os.environ.get("AGENTBOX_URL"), os.environ.get("AGENTBOX_TOKEN")
    if not url or not token:
        pytest.skip("no daemon: AGENTBOX_URL and AGENTBOX_TOKEN are unset (go test ./internal/sdkgen/python runs these tests against one)")
    return {"url": url, "token": token, "data_dir": os.environ.get("AGENTBOX_TEST_DATA_DIR", "")}


class CutProxy:
    """A TCP forwarder in front of the daemon whose cut() breaks every
    connection it carries, as a network failure would, and keeps listening."""

    def __init__(self, target: str, host: str) -> None:
        u = urlsplit(target)
        self._target = (u.hostname, u.port)
        self._ln = socket.create_server((host, 0))
        self.url = f"http://{host}:{self._ln.getsockname()[1]}"
        self._mu = threading.Lock()
        self._conns: list[socket.socket] = []
        self.accepted = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self._ln.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self._target)
            except OSError:
                c.close()
                continue
            with self._mu:
                if self._closed:
                    c.close()
                    up.close()
                    return
                self._conns += [c, up]
                self.accepted += 1
            threading.Thread(target=self._pipe, args=(c, up), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, c), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                dst.sendall(b)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        with self._mu:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        with self._mu:
            self._closed = True
        self._ln.close()
        self.cut()


@pytest.fixture
def cut_proxy(daemon_env: dict[str, str]) -> Iterator[CutProxy]:
    p = CutProxy(daemon_env["url"], os.environ.get("AGENTBOX_TEST_PROXY_HOST") or "127.0.0.1")
    yield p
    p.close()
