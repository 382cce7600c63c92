"""B2's client: many HTTP requests in flight at once, from a process of their own.

``python -m bench.burst`` reads ``{"url": ..., "requests": [{"body": ..., "headers": {...}}]}``
on stdin, sends every request on its own new connection (as Slack sends each click), and
prints ``[[status, ms], ...]`` in the same order.

It only sends to ``127.0.0.1`` (it refuses any other host), and the whole burst is bounded
in time: an answer that has not come by the deadline, or a connection that fails, counts as
status 0, a failure of the figure, not a hang of the run.

Why a process with one thread and raw sockets: a client of many Python threads inside the
bench process, beside the Slack stand-in's server threads, measures those threads waiting for
their own interpreter lock rather than the bot. Here the requests are serialized before the
clock starts, and one ``select`` loop reads the answers, so the time is the bot's.
"""

from __future__ import annotations

import json
import selectors
import socket
import sys
import time
from typing import Any
from urllib.parse import urlsplit

LOOPBACK = "127.0.0.1"


def raw_request(url: str, body: bytes, headers: dict[str, str]) -> bytes:
    """The bytes of one ``POST`` that closes its connection after the answer."""
    parts = urlsplit(url)
    lines = [
        f"POST {parts.path} HTTP/1.1",
        f"Host: {parts.hostname}:{parts.port}",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def send_all(url: str, requests: list[bytes], timeout: float = 30) -> list[tuple[int, float]]:
    """Send each request on a new connection, then wait for every answer; (status, ms).

    Status 0: no connection, or no complete answer within ``timeout`` of the first send.
    """
    parts = urlsplit(url)
    if parts.hostname != LOOPBACK:
        raise ValueError(f"the burst only targets {LOOPBACK}, not {parts.hostname}")
    address = (LOOPBACK, parts.port or 80)
    selector = selectors.DefaultSelector()
    results: list[tuple[int, float]] = [(0, timeout * 1000)] * len(requests)
    deadline = time.monotonic() + timeout
    for index, data in enumerate(requests):
        started = time.perf_counter()
        # Not create_connection(): it looks the name up again for every request.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            sock.connect(address)
            sock.sendall(data)
        except OSError:
            sock.close()
            continue
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, (index, started, bytearray()))
    while selector.get_map():
        ready = selector.select(max(0.0, deadline - time.monotonic()))
        if not ready:
            for key in list(selector.get_map().values()):
                late = key.fileobj
                selector.unregister(late)
                if isinstance(late, socket.socket):
                    late.close()
            break
        for key, _ in ready:
            index, started, received = key.data
            answering = key.fileobj
            assert isinstance(answering, socket.socket)
            try:
                chunk = answering.recv(65536)
            except OSError:
                chunk = b""
            if chunk:
                received += chunk
                continue
            ms = (time.perf_counter() - started) * 1000
            selector.unregister(answering)
            answering.close()
            results[index] = (_status(bytes(received)), ms)

    return results


def _status(response: bytes) -> int:
    """The status code of a raw HTTP response (0 when there is none)."""
    fields = response.split(b" ", 2)
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0


def main() -> None:
    spec: dict[str, Any] = json.load(sys.stdin)
    requests = [
        raw_request(spec["url"], r["body"].encode("latin-1"), r["headers"])
        for r in spec["requests"]
    ]
    json.dump(send_all(spec["url"], requests), sys.stdout)


if __name__ == "__main__":
    main()
