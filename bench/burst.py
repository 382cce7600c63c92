"""B2's client: many HTTP requests in flight at once, from a process of their own.

``python -m bench.burst`` reads ``{"url": ..., "requests": [{"body": ..., "headers": {...}}]}``
on stdin, sends every request on its own new connection (as Slack sends each click), and
prints ``[[status, ms], ...]`` in the same order.

Why a process with one thread and raw sockets: the first client ran 50 Python threads with
``http.client`` inside the bench process, beside the Slack stand-in's server threads; the
clock then measured those threads waiting for their own interpreter lock (a burst of requests
the bot refused at once still took 65 ms at p99). Here the requests are serialized before the
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


def send_all(url: str, requests: list[bytes], timeout: float = 60) -> list[tuple[int, float]]:
    """Send each request on a new connection, then wait for every answer; (status, ms)."""
    parts = urlsplit(url)
    address = (parts.hostname or "127.0.0.1", parts.port or 80)
    selector = selectors.DefaultSelector()
    results: list[tuple[int, float]] = [(0, 0.0)] * len(requests)
    for index, data in enumerate(requests):
        started = time.perf_counter()
        # Not create_connection(): its name lookup per request was a third of the client's time.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(address)
        sock.sendall(data)
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, (index, started, bytearray()))
    deadline = time.monotonic() + timeout
    while selector.get_map():
        ready = selector.select(max(0.0, deadline - time.monotonic()))
        if not ready:
            raise TimeoutError(f"{len(selector.get_map())} requests got no answer")
        for key, _ in ready:
            index, started, received = key.data
            answering = key.fileobj
            assert isinstance(answering, socket.socket)
            chunk = answering.recv(65536)
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
