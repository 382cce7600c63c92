"""An HTTP server of threads that each take one connection, answer it and close it.

Slack sends every click, command and event to the bot as one small signed ``POST``. This
server does that one thing, for a WSGI app, and nothing else (no keep-alive, no pipelining, no
TLS: put a proxy in front for TLS, as with any WSGI server). The benchmark's Slack stand-in
uses it too, for the same kind of traffic (``SlackStandIn.start(threads=...)``).

Why not waitress (used before): bench B2, 50 clicks in flight on two cores. With a WSGI app
that only reads the body, waitress answered a burst of 50 in 5.6 ms at the median and 15.6 ms
at p99, gunicorn's sync workers in 5.5 / 11.4 ms, and this design in 1.8 / 3.4 ms. And its
I/O thread accepts every connection it sees, whether or not a request thread is free, so two
processes on one socket split a burst unevenly (8 against 42 in a traced burst); here a
thread accepts only when it is free, so each process takes what it can answer.

Why a connection is closed after its answer: a thread that waited on an idle kept-alive
connection could not accept a new one. gunicorn's sync workers, which Bolt's documentation
recommends, answer the same way.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote_to_bytes, urlsplit

log = logging.getLogger(__name__)

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

#: Request line and headers together; Slack's are well under 2 kB.
MAX_HEAD_BYTES = 64 * 1024
#: A client has this long for each read of its request (a stalled one frees its thread).
READ_TIMEOUT = 10.0
#: After refusing a request whose body was not read, how long its body may still be drained
#: so that closing does not reset the connection before the client reads the answer.
DRAIN_SECONDS = 1.0


class Refused(Exception):
    """A request answered with an error before it reached the app."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class Request:
    """One parsed request: its head, and its body once read."""

    method: str
    target: str
    version: str
    headers: dict[str, str]
    body: bytes = b""


def serve(app: WSGIApp, sock: socket.socket, threads: int, max_body: int) -> None:
    """Answer requests on ``sock`` with ``threads`` threads until the process ends.

    Every thread blocks in ``accept()`` on the shared socket: the kernel wakes one waiter per
    connection, so only a free thread (in this process or another on the same socket) takes it.
    """
    sock.setblocking(True)
    server = _Server(app, sock, max_body)
    workers = [
        threading.Thread(target=server.run, name=f"http-{i + 1}", daemon=True)
        for i in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


class _Server:
    def __init__(self, app: WSGIApp, sock: socket.socket, max_body: int) -> None:
        self.app = app
        self.sock = sock
        self.max_body = max_body
        host, port = sock.getsockname()[:2]
        self.server_name = str(host)
        self.server_port = str(port)

    def run(self) -> None:
        while True:
            try:
                conn, address = self.sock.accept()
            except OSError as exc:
                if exc.errno in (errno.EBADF, errno.EINVAL):
                    return  # the socket was closed: the server is stopping
                log.warning("accept failed: %s", exc)  # e.g. too many open files: back off
                time.sleep(0.1)
                continue
            try:
                self.answer(conn, address)
            except Exception:
                log.exception("answering %s failed", address[0] if address else "?")
            finally:
                conn.close()

    def answer(self, conn: socket.socket, address: Any) -> None:
        """Read one request from ``conn``, answer it; the caller closes the connection."""
        request: Request | None = None
        try:
            request = read_request(conn, self.max_body, time.monotonic() + READ_TIMEOUT)
            if request is None:
                return  # closed before sending anything
            response = self.call_app(request, address)
        except Refused as refused:
            status = f"{refused.status} {HTTPStatus(refused.status).phrase}"
            headers = [("Content-Type", "text/plain")]
            response = response_bytes(status, headers, refused.reason.encode())
        except (TimeoutError, ConnectionError):
            return  # the client stalled or went away: nobody to answer
        with contextlib.suppress(OSError):
            conn.sendall(response)
            if request is None:  # refused before its body was read
                _drain(conn)

    def call_app(self, request: Request, address: Any) -> bytes:
        """The whole response of the app to ``request`` (a 500 when the app fails)."""
        started: list[tuple[str, list[tuple[str, str]]]] = []
        written: list[bytes] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], None]:
            if exc_info is not None and started:
                raise exc_info[1].with_traceback(exc_info[2])
            started[:] = [(status, headers)]
            return written.append

        try:
            result = self.app(self.environ(request, address), start_response)
            try:
                written.extend(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
            if not started:
                raise RuntimeError("the app returned without calling start_response")
            status, headers = started[0]
            if not _STATUS.fullmatch(status):
                raise ValueError(f"the app answered with a malformed status {status!r}")
            body = b"".join(written)
            if request.method == "HEAD":  # the GET's headers, its Content-Length too, no body
                return response_bytes(status, headers, b"", len(body))
            return response_bytes(status, headers, body)
        except Exception:
            log.exception("the app failed on %s %s", request.method, request.target)
            return response_bytes(
                "500 Internal Server Error", [("Content-Type", "text/plain")], b"internal error"
            )

    def environ(self, request: Request, address: Any) -> dict[str, Any]:
        """The WSGI environ (PEP 3333) of ``request``."""
        if request.target.startswith("/"):  # urlsplit would read "//a/b" as host a, path /b
            path, _, query = request.target.partition("?")
        else:  # absolute form: http://host/path?query
            target = urlsplit(request.target)
            path, query = target.path, target.query
        environ: dict[str, Any] = {
            "REQUEST_METHOD": request.method,
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
            "QUERY_STRING": query,
            "SERVER_NAME": self.server_name,
            "SERVER_PORT": self.server_port,
            "SERVER_PROTOCOL": request.version,
            "REMOTE_ADDR": str(address[0]) if address else "",
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(request.body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }
        for name, value in request.headers.items():
            if name == "content-type":
                environ["CONTENT_TYPE"] = value
            elif name == "content-length":
                environ["CONTENT_LENGTH"] = value
            else:
                environ["HTTP_" + name.upper().replace("-", "_")] = value
        environ["CONTENT_LENGTH"] = str(len(request.body))  # chunked bodies are decoded
        return environ


def read_request(conn: socket.socket, max_body: int, deadline: float) -> Request | None:
    """Read one request (head and body) from ``conn`` by ``deadline`` (``time.monotonic()``);
    None if it closes before sending any.

    Raises:
        Refused: the request is malformed, too large, or asks for what this server does not do.
        TimeoutError, ConnectionError: the client stalled or went away.
    """
    reader = _Reader(conn, deadline)
    if not reader.fill():
        return None
    request = parse_head(reader.until(b"\r\n\r\n", Refused(431, "request head too large")))
    if "transfer-encoding" in request.headers:
        if "content-length" in request.headers:
            raise Refused(400, "both Content-Length and Transfer-Encoding")
        if request.headers["transfer-encoding"].lower() != "chunked":
            raise Refused(501, "only the chunked transfer coding is supported")
        _continue(conn, request)
        request.body = _read_chunked(reader, max_body)
    else:
        length = content_length(request)
        if length > max_body:
            raise Refused(413, "request body too large")
        if length:
            _continue(conn, request)
        request.body = reader.exactly(length)
    return request


def parse_head(head: bytes) -> Request:
    """The request line and headers of ``head`` (without its final blank line)."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes any byte
        raise Refused(400, "undecodable request head") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise Refused(400, "malformed request line")
    method, target, version = parts
    if not method.isalpha() or not method.isupper():
        raise Refused(400, "malformed method")
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        if version.startswith("HTTP/"):
            raise Refused(505, "HTTP/1.1 only")
        raise Refused(400, "malformed request line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or not _is_token(name):
            raise Refused(400, "malformed header")
        key = name.lower()
        if "_" in key:
            continue  # would collide with its dashed twin in the environ (waitress drops them too)
        value = value.strip(" \t")
        if key in headers:
            if key in ("content-length", "host", "transfer-encoding"):
                raise Refused(400, f"repeated {name} header")
            headers[key] += ", " + value
        else:
            headers[key] = value
    return Request(method, target, version, headers)


def content_length(request: Request) -> int:
    value = request.headers.get("content-length")
    if value is None:
        if request.method in ("POST", "PUT", "PATCH"):
            raise Refused(411, "Content-Length required")
        return 0
    # isascii(): isdigit() alone takes "\xb2" (superscript two), which int() refuses.
    if not (value.isascii() and value.isdigit()) or len(value) > 18:
        raise Refused(400, "malformed Content-Length")
    return int(value)


def response_bytes(
    status: str, headers: list[tuple[str, str]], body: bytes, length: int | None = None
) -> bytes:
    """The whole response: status line, the app's headers plus framing, body.

    Raises:
        UnicodeEncodeError: a header is not latin-1 (WSGI allows no other).
    """
    lines = [f"HTTP/1.1 {status}"]
    for name, value in headers:
        if name.lower() not in ("content-length", "connection", "transfer-encoding", "date"):
            lines.append(f"{name}: {value}")
    lines += [
        f"Content-Length: {len(body) if length is None else length}",
        "Connection: close",
        f"Date: {_date()}",
        "",
        "",
    ]
    return "\r\n".join(lines).encode("latin-1") + body


#: A WSGI status: code and reason phrase.
_STATUS = re.compile(r"[1-5][0-9][0-9] [^\r\n]*")
#: A header name (RFC 9110 ``token``).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def _is_token(name: str) -> bool:
    return _TOKEN.fullmatch(name) is not None


def _continue(conn: socket.socket, request: Request) -> None:
    """``Expect: 100-continue`` (curl sends it for bodies over 1 kB): tell it to go on."""
    expect = request.headers.get("expect", "").lower()
    if request.version == "HTTP/1.1" and expect == "100-continue":
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")


def _recv(conn: socket.socket, size: int, deadline: float) -> bytes:
    """``conn.recv(size)``, or TimeoutError at ``deadline``: a client trickling its request
    in a byte at a time does not hold a thread for longer than one that sends nothing."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the request took too long to arrive")
    conn.settimeout(left)
    return conn.recv(size)


def _read_chunked(reader: _Reader, max_body: int) -> bytes:
    body = bytearray()
    while True:
        size_line = reader.until(b"\r\n", Refused(400, "chunk line too long"))
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise Refused(400, "malformed chunk size") from None
        if size < 0:
            raise Refused(400, "malformed chunk size")
        if size == 0:
            while reader.until(b"\r\n", Refused(400, "trailer too long")):  # up to the blank line
                pass
            return bytes(body)
        if len(body) + size > max_body:
            raise Refused(413, "request body too large")
        body += reader.exactly(size)
        if reader.exactly(2) != b"\r\n":
            raise Refused(400, "malformed chunk")


class _Reader:
    """A request's bytes from its socket, by the request's deadline, through one buffer."""

    def __init__(self, conn: socket.socket, deadline: float) -> None:
        self.conn = conn
        self.deadline = deadline
        self.buffer = bytearray()

    def fill(self) -> bool:
        """Read what has arrived (waiting for some); False when the client closed."""
        chunk = _recv(self.conn, 65536, self.deadline)
        self.buffer += chunk
        return bool(chunk)

    def _more(self) -> None:
        if not self.fill():
            raise ConnectionResetError("closed in the middle of the request")

    def until(self, separator: bytes, too_long: Refused) -> bytes:
        """The bytes before ``separator`` (taken with it); ``too_long`` past MAX_HEAD_BYTES."""
        while (end := self.buffer.find(separator)) < 0:
            if len(self.buffer) > MAX_HEAD_BYTES:
                raise too_long
            self._more()
        if end > MAX_HEAD_BYTES:
            raise too_long
        data = bytes(self.buffer[:end])
        del self.buffer[: end + len(separator)]
        return data

    def exactly(self, count: int) -> bytes:
        while len(self.buffer) < count:
            self._more()
        data = bytes(self.buffer[:count])
        del self.buffer[:count]
        return data


def _drain(conn: socket.socket) -> None:
    """Close the sending side, then read what the client still sends, for a moment.

    Closing a socket with unread data resets the connection, and a reset can reach the
    client before it has read the answer (a 413 sent while the body is still arriving).
    """
    conn.shutdown(socket.SHUT_WR)
    deadline = time.monotonic() + DRAIN_SECONDS
    while (left := deadline - time.monotonic()) > 0:
        conn.settimeout(left)
        try:
            if not conn.recv(65536):
                return
        except OSError:
            return


_date_cache: tuple[int, str] = (0, "")


def _date() -> str:
    """The ``Date`` header, formatted once a second."""
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, formatdate(now, usegmt=True))
    return _date_cache[1]
