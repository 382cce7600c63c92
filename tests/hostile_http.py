"""Hostile HTTP requests, written byte by byte to a real socket: the twin of the Slack body
fuzz (``tests/bot/test_hostile_input.py``) for every other HTTP surface (the bot's
``/metrics``, ``/.well-known/jwks.json`` and ``/healthz``, the worker's metrics port, the
dev sandbox).

``http.client`` refuses to send most of what an attacker sends (control characters in the
path, a method that is not a token, a ``Content-Length`` that lies), so requests are built
here and written raw; the socket is then half-closed, so a server still waiting for a body
it was promised reads the end of it instead of waiting for ever. The answer's status line is
all that is read back: ``exchange`` returns its status, or None when the server closed the
connection without one, and fails when nothing happens within its deadline (a hang).
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from urllib.parse import quote_from_bytes

from hypothesis import strategies as st

#: Methods HTTP defines (RFC 9110 and PATCH): each must get an answer below 500. A method
#: outside it may get 501, as RFC 9110 asks of a server that does not recognize a method.
STANDARD_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT")
#: Seconds a server has to answer one request before it counts as a hang.
DEADLINE = 15.0

_TOKEN = "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

METHODS = st.sampled_from(STANDARD_METHODS) | st.sampled_from(
    ["get", "PROPFIND", "M-SEARCH", "BREW", "G ET", "GET\x00", "\u00c9T", ""]
)
#: Bytes an attacker puts in a path or a query: escapes that decode to nothing UTF-8 can
#: carry, traversal, NUL, very long segments.
_PIECES = st.sampled_from(
    [
        "%ff",
        "%",
        "%zz",
        "%00",
        "/..",
        "/%2e%2e",
        "//",
        ";x",
        "%2f",
        "\u00e9",
        "a" * 5000,
        "name[]=x",
        "&&&",
        "=",
        "?",
        "#frag",
    ]
)
QUERIES = st.one_of(
    st.just(""),
    st.lists(_PIECES, max_size=4).map("".join),
    st.binary(max_size=60).map(lambda raw: quote_from_bytes(raw, safe="=&")),
    st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=3).map(
        lambda d: "&".join(
            f"{quote_from_bytes(k.encode('utf-8', 'surrogatepass'))}="
            f"{quote_from_bytes(v.encode('utf-8', 'surrogatepass'))}"
            for k, v in d.items()
        )
    ),
)
#: Headers that confuse servers: wrong or missing lengths and types, compression asked for,
#: upgrades, a Host that is not this server, values in Latin-1, one very long line.
HEADERS = st.lists(
    st.sampled_from(
        [
            ("Content-Type", "application/json"),
            ("Content-Type", "text/plain; charset=utf-16"),
            ("Content-Type", "multipart/form-data; boundary="),
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("Content-Length", "abc"),
            ("Content-Length", "-1"),
            ("Content-Length", "0"),
            ("Content-Length", "99999999999999999999"),
            ("Content-Length", "5, 6"),
            ("Transfer-Encoding", "chunked"),
            ("Transfer-Encoding", "gzip, chunked"),
            ("Accept-Encoding", "gzip"),
            ("Accept-Encoding", "br;q=\u00ff"),
            ("Accept", "application/openmetrics-text; version=0.0.1"),
            ("Accept", "*/*; q=nan"),
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Expect", "100-continue"),
            ("Host", "evil.test"),
            ("Host", ""),
            ("Origin", "https://evil.test"),
            ("X-Forwarded-For", "127.0.0.1, \u00e9"),
            ("Cookie", "a" * 9000),
            ("Authorization", "Bearer \u00ff"),
            ("X-Slack-Signature", "v0=00"),
        ]
    ),
    max_size=4,
)
BODIES = st.one_of(
    st.just(b""),
    st.binary(max_size=300),
    st.sampled_from([b"{", b"[" * 5000, b'{"user": [1]}', b"0\r\n\r\n", b"zz\r\n"]),
)


@dataclass(frozen=True)
class Request:
    """One request as drawn: everything ``raw`` writes."""

    method: str
    target: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def raw(self, host: str) -> bytes:
        """The bytes on the wire: a ``Host`` and a ``Content-Length`` true to the body,
        unless the drawn headers say otherwise (then theirs, as drawn)."""
        names = {name.lower() for name, _ in self.headers}
        lines = [f"{self.method} {self.target} HTTP/1.1"]
        if "host" not in names:
            lines.append(f"Host: {host}")
        if not names & {"content-length", "transfer-encoding"} and self.body:
            lines.append(f"Content-Length: {len(self.body)}")
        lines += [f"{name}: {value}" for name, value in self.headers]
        lines.append("Connection: close")
        head = "\r\n".join(lines) + "\r\n\r\n"
        return head.encode("utf-8", "surrogateescape") + self.body


def requests(paths: list[str]) -> st.SearchStrategy[Request]:
    """Requests for ``paths`` (and the paths next to them), with hostile methods, queries,
    headers and bodies."""
    targets = st.one_of(
        st.sampled_from(paths),
        st.tuples(st.sampled_from(paths), _PIECES).map("".join),
        st.tuples(st.sampled_from(paths), QUERIES).map(lambda p: f"{p[0]}?{p[1]}"),
        st.sampled_from(["*", "http://evil.test/metrics", "/" + "a" * 9000, "/\x7f", "/ a"]),
    )
    return st.builds(Request, METHODS, targets, HEADERS.map(tuple), BODIES)


def exchange(host: str, port: int, request: Request) -> int | None:
    """Send ``request``; the status the server answered, or None when it closed without
    one. Fails (AssertionError) when it neither answers nor closes within ``DEADLINE``."""
    began = time.monotonic()
    with socket.create_connection((host, port), timeout=DEADLINE) as conn:
        try:
            conn.sendall(request.raw(f"{host}:{port}"))
            conn.shutdown(socket.SHUT_WR)
        except OSError:  # broken pipe, reset, not connected
            pass  # it answered (or hung up) before reading everything: read what it said
        received = b""
        try:
            while b"\r\n" not in received:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                received += chunk
        except TimeoutError:
            raise AssertionError(
                f"no answer in {time.monotonic() - began:.0f}s to {request!r}"[:600]
            ) from None
        except ConnectionResetError:
            pass
    parts = received.split(b"\r\n", 1)[0].split()
    if len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1].isdigit():
        return int(parts[1])
    return None


def acceptable(request: Request, status: int | None) -> bool:
    """Below 500, or 501 for a method HTTP does not define (RFC 9110, 15.6.2)."""
    if status is None:
        return True  # closed: the server refused to read it at all, which is no error
    return status < 500 or (status == 501 and request.method not in STANDARD_METHODS)
