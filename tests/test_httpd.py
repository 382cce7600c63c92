"""approvals/httpd.py over real sockets: what a client (Slack, curl, a load balancer) sees, and what
the WSGI app is given.

Each server runs in this process on daemon threads, on a loopback socket of its own; requests
are written byte for byte on raw sockets (or with ``http.client``). ``serve`` has no way to
stop, so a server's threads stay blocked in ``accept()`` on its open socket after its tests.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from http import HTTPStatus
from typing import Any

import pytest

from approvals import httpd
from tests.processes import wait_until

#: The bot's own limit (bot/server.py).
MAX_BODY = 1024 * 1024
#: A limit small enough to go over cheaply.
SMALL_MAX_BODY = 1000
TIMEOUT = 5.0
SIGNATURE = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"


class EchoApp:
    """A WSGI app that records what it was given and answers it back as JSON.

    Paths with a behaviour of their own: ``/healthz`` answers ``ok``; ``/wait`` blocks until
    the test releases the gate named by the request's body; ``/raise``, ``/raise-in-body`` and
    ``/no-start`` fail; ``/headers`` sends framing headers of its own; ``/status/NNN`` answers
    with that status.
    """

    def __init__(self, tag: str = "") -> None:
        self.tag = tag
        self._lock = threading.Lock()
        self._calls: list[dict[str, Any]] = []
        self._gates: dict[str, threading.Event] = {}
        self._open = False

    @property
    def calls(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._calls)

    def reset(self) -> None:
        with self._lock:
            self._calls.clear()

    def gate(self, name: str) -> threading.Event:
        with self._lock:
            event = self._gates.setdefault(name, threading.Event())
            if self._open:
                event.set()
            return event

    def release(self, name: str) -> None:
        self.gate(name).set()

    def release_all(self) -> None:
        with self._lock:
            self._open = True
            for event in self._gates.values():
                event.set()

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        # Read the body as Bolt does: as many bytes as CONTENT_LENGTH says.
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        seen = {
            "method": environ["REQUEST_METHOD"],
            "path": environ["PATH_INFO"],
            "query": environ["QUERY_STRING"],
            "protocol": environ["SERVER_PROTOCOL"],
            "remote_addr": environ["REMOTE_ADDR"],
            "content_length": environ.get("CONTENT_LENGTH"),
            "content_type": environ.get("CONTENT_TYPE"),
            "headers": {k: v for k, v in environ.items() if k.startswith("HTTP_")},
            "body": body.decode("latin-1"),
            "tag": self.tag,
        }
        with self._lock:
            self._calls.append(seen)
        path = environ["PATH_INFO"]
        if path == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok"]
        if path == "/raise":
            raise RuntimeError("the app failed")
        if path == "/raise-in-body":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return _failing_body()
        if path == "/no-start":
            return [b"never started"]
        if path == "/headers":
            start_response(
                "200 OK",
                [
                    ("Content-Type", "text/plain"),
                    ("Content-Length", "999"),
                    ("Connection", "keep-alive"),
                    ("X-App", "echo"),
                ],
            )
            return [b"four", b" parts", b" of", b" body"]
        if path.startswith("/status/"):
            status = HTTPStatus(int(path.rsplit("/", 1)[1]))
            start_response(f"{status.value} {status.phrase}", [("Content-Type", "text/plain")])
            return [status.phrase.encode()]
        if path == "/wait":
            assert self.gate(body.decode()).wait(TIMEOUT), "the test never released the gate"
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps(seen).encode()]


def _failing_body() -> Iterator[bytes]:
    yield b"partial"
    raise RuntimeError("the body failed")


@dataclass
class Server:
    app: EchoApp
    sock: socket.socket

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.sock.getsockname()[:2]
        return str(host), int(port)

    def finish(self) -> None:
        """Let blocked requests finish. The socket stays open: ``serve`` cannot be stopped, and
        a thread that came back to ``accept()`` after a close would retry it, failing, ten times
        a second for the rest of the session."""
        self.app.release_all()


def _serve(app: EchoApp, threads: int, max_body: int, sock: socket.socket | None = None) -> Server:
    sock = sock or socket.create_server(("127.0.0.1", 0))
    threading.Thread(
        target=httpd.serve, args=(app, sock, threads, max_body), name="serve", daemon=True
    ).start()
    return Server(app, sock)


@pytest.fixture(scope="module")
def _echo_server() -> Iterator[Server]:
    server = _serve(EchoApp(), 4, MAX_BODY)
    yield server
    server.finish()


@pytest.fixture(scope="module")
def _small_server() -> Iterator[Server]:
    server = _serve(EchoApp(), 4, SMALL_MAX_BODY)
    yield server
    server.finish()


@pytest.fixture
def echo(_echo_server: Server) -> Server:
    """A server shared by the module's tests (4 threads, the bot's 1 MiB body limit)."""
    _echo_server.app.reset()
    return _echo_server


@pytest.fixture
def small(_small_server: Server) -> Server:
    """A shared server whose body limit is 1000 bytes."""
    _small_server.app.reset()
    return _small_server


@pytest.fixture
def start_server() -> Iterator[Callable[..., Server]]:
    """Servers of the test's own, for tests that occupy or count its threads."""
    servers: list[Server] = []

    def start(
        threads: int = 4,
        max_body: int = MAX_BODY,
        app: EchoApp | None = None,
        sock: socket.socket | None = None,
    ) -> Server:
        server = _serve(app or EchoApp(), threads, max_body, sock)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.finish()


# Requests and responses, byte for byte.


def http_request(
    method: str,
    target: str,
    headers: Sequence[tuple[str, str]] = (),
    body: bytes = b"",
    version: str = "HTTP/1.1",
) -> bytes:
    lines = [f"{method} {target} {version}", "Host: test", *(f"{n}: {v}" for n, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def post(target: str, body: bytes, headers: Sequence[tuple[str, str]] = ()) -> bytes:
    return http_request("POST", target, [("Content-Length", str(len(body))), *headers], body)


def chunked(*chunks: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


def read_all(client: socket.socket) -> bytes:
    """Everything the server sends until it closes (a timeout fails the test)."""
    data = bytearray()
    while chunk := client.recv(65536):
        data += chunk
    return bytes(data)


def read_until(client: socket.socket, marker: bytes) -> bytes:
    data = bytearray()
    while marker not in data:
        chunk = client.recv(65536)
        assert chunk, f"closed before {marker!r}; got {bytes(data)!r}"
        data += chunk
    return bytes(data)


def read_response(client: socket.socket) -> bytes:
    """One response, as far as its Content-Length says, without waiting for the close."""
    data = read_until(client, b"\r\n\r\n")
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(parse(head + b"\r\n\r\n", head=True).header("Content-Length"))
    while len(body) < length:
        chunk = client.recv(65536)
        assert chunk, "closed in the middle of the body"
        body += chunk
    return head + b"\r\n\r\n" + body


def exchange(address: tuple[str, int], data: bytes) -> bytes:
    with socket.create_connection(address, timeout=TIMEOUT) as client:
        client.sendall(data)
        return read_all(client)


@dataclass
class Response:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str:
        """The value of a header sent exactly once."""
        values = [v for n, v in self.headers if n.lower() == name.lower()]
        assert len(values) == 1, f"{name}: {values}"
        return values[0]

    def json(self) -> Any:
        return json.loads(self.body)


def parse(raw: bytes, *, head: bool = False) -> Response:
    """One whole response, framed as this server frames all of them."""
    head_bytes, blank, body = raw.partition(b"\r\n\r\n")
    assert blank, f"no complete response in {raw[:200]!r}"
    status_line, *lines = head_bytes.decode("latin-1").split("\r\n")
    version, code, reason = status_line.split(" ", 2)
    assert version == "HTTP/1.1"
    headers = []
    for line in lines:
        name, colon, value = line.partition(":")
        assert colon and name == name.strip(), f"malformed response header {line!r}"
        headers.append((name, value.strip()))
    response = Response(int(code), reason, headers, body)
    assert response.header("Connection") == "close"
    content_length = int(response.header("Content-Length"))
    assert len(body) == (0 if head else content_length), "the body does not match its framing"
    return response


def request(address: tuple[str, int], data: bytes) -> Response:
    return parse(exchange(address, data))


def stays(predicate: Callable[[], bool], seconds: float) -> bool:
    """Whether ``predicate`` holds throughout ``seconds`` (to see that something does not
    happen; never to wait for something)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not predicate():
            return False
        time.sleep(0.02)
    return predicate()


# A normal request.


def test_a_post_reaches_the_app_with_its_exact_body_and_headers(echo):
    """Slack's signed POST: the app gets the exact bytes and headers, the client a framed
    answer, and the connection is closed after it."""
    body = b"payload=%7B%22type%22%3A%22block_actions%22%7D&note=caf\xc3\xa9\x00\xff"
    data = post(
        "/slack/events",
        body,
        [
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("X-Slack-Signature", SIGNATURE),
            ("x-slack-request-timestamp", "1531420618"),
        ],
    )
    with socket.create_connection(echo.address, timeout=TIMEOUT) as client:
        client.sendall(data)
        raw = read_response(client)
        assert client.recv(1) == b"", "the server closes the connection after its answer"
    response = parse(raw)

    assert (response.status, response.reason) == (200, "OK")
    [seen] = echo.app.calls
    assert seen["method"] == "POST"
    assert seen["path"] == "/slack/events"
    assert seen["protocol"] == "HTTP/1.1"
    assert seen["remote_addr"] == "127.0.0.1"
    assert seen["body"].encode("latin-1") == body
    assert seen["content_length"] == str(len(body))
    assert seen["content_type"] == "application/x-www-form-urlencoded"
    assert seen["headers"] == {
        "HTTP_HOST": "test",
        "HTTP_X_SLACK_SIGNATURE": SIGNATURE,
        "HTTP_X_SLACK_REQUEST_TIMESTAMP": "1531420618",
    }
    assert response.json() == seen
    assert response.header("Content-Type") == "application/json"
    sent = parsedate_to_datetime(response.header("Date"))
    assert sent.tzinfo is not None
    assert abs(sent.timestamp() - time.time()) < 5


def test_a_large_body_from_http_client_arrives_intact(echo):
    """A body much larger than one read (Slack's views reach 250 kB), from a stock client."""
    body = bytes(range(256)) * 2000
    conn = http.client.HTTPConnection(*echo.address, timeout=TIMEOUT)
    with contextlib.closing(conn):
        conn.request("POST", "/slack/events?ssl_check=1", body, {"Content-Type": "x/binary"})
        response = conn.getresponse()
        payload = response.read()
        assert response.status == 200
        assert response.getheader("Connection") == "close"
        assert response.will_close
    [seen] = echo.app.calls
    assert seen["body"].encode("latin-1") == body
    assert seen["content_length"] == str(len(body))
    assert seen["query"] == "ssl_check=1"
    assert json.loads(payload) == seen


@pytest.mark.parametrize(
    ("target", "path", "query"),
    [
        ("/plain", "/plain", ""),
        # PATH_INFO is decoded (UTF-8 bytes as latin-1 text, PEP 3333); QUERY_STRING is raw.
        ("/slack/a%20b/caf%C3%A9?x=1&y=%20z&e=", "/slack/a b/caf\xc3\xa9", "x=1&y=%20z&e="),
        ("/what%3F?q=%3F", "/what?", "q=%3F"),
        ("/slack/events?", "/slack/events", ""),
        ("http://example.com/healthz?probe=1", "/healthz", "probe=1"),
        # A path, not a host named "slack".
        ("//slack/events?x=1", "//slack/events", "x=1"),
    ],
)
def test_get_paths_are_decoded_and_query_strings_passed_raw(echo, target, path, query):
    response = request(echo.address, http_request("GET", target))
    assert response.status == 200
    [seen] = echo.app.calls
    assert (seen["method"], seen["path"], seen["query"]) == ("GET", path, query)
    assert seen["body"] == ""
    assert seen["content_length"] == "0"


def test_head_gets_the_get_s_headers_and_no_body(echo):
    """A load balancer's HEAD /healthz: the headers a GET would get, then nothing."""
    get = request(echo.address, http_request("GET", "/healthz"))
    raw = exchange(echo.address, http_request("HEAD", "/healthz"))
    assert raw.endswith(b"\r\n\r\n"), "nothing may follow the head of a HEAD answer"
    head = parse(raw, head=True)
    assert head.status == 200
    assert head.body == b""
    assert head.header("Content-Type") == "text/plain"
    assert head.header("Content-Length") == get.header("Content-Length") == "2"
    assert [call["method"] for call in echo.app.calls] == ["GET", "HEAD"]


def test_an_http_1_0_request_is_answered(echo):
    """curl -0 and old health checkers: no Host header, HTTP/1.0."""
    response = parse(exchange(echo.address, b"GET /healthz HTTP/1.0\r\n\r\n"))
    assert (response.status, response.body) == (200, b"ok")
    assert echo.app.calls[0]["protocol"] == "HTTP/1.0"


@pytest.mark.parametrize("status", [401, 404])
def test_the_app_s_status_reaches_the_client(echo, status):
    """Bolt answers a bad signature with 401; the client sees that code."""
    raw = exchange(echo.address, http_request("GET", f"/status/{status}"))
    assert parse(raw).status == status


def test_the_server_frames_the_answer_itself(echo):
    """An app's own Content-Length or keep-alive cannot make clients wait or misread."""
    response = request(echo.address, http_request("GET", "/headers"))
    assert response.status == 200
    assert response.body == b"four parts of body"
    assert response.header("Content-Length") == "18"
    assert response.header("Connection") == "close"
    assert response.header("X-App") == "echo"


# Expect: 100-continue (curl sends it for bodies over 1 kB).


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_expect_100_continue_is_answered_before_the_body_is_sent(echo, framing):
    body = b'{"type": "url_verification", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWM"}'
    if framing == "chunked":
        headers, wire = [("Transfer-Encoding", "chunked")], chunked(body[:10], body[10:])
    else:
        headers, wire = [("Content-Length", str(len(body)))], body
    head = http_request(
        "POST",
        "/slack/events",
        [("Content-Type", "application/json"), *headers, ("Expect", "100-continue")],
    )
    with socket.create_connection(echo.address, timeout=TIMEOUT) as client:
        client.sendall(head)
        assert read_until(client, b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        assert echo.app.calls == []
        client.sendall(wire)
        response = parse(read_all(client))
    assert response.status == 200
    [seen] = echo.app.calls
    assert seen["body"].encode() == body
    assert seen["headers"]["HTTP_EXPECT"] == "100-continue"


def test_a_too_large_body_announced_with_expect_is_refused_before_it_is_sent(small):
    """No 100 Continue: the client learns at once, and never sends the body."""
    head = http_request(
        "POST", "/slack/events", [("Content-Length", "5000"), ("Expect", "100-continue")]
    )
    response = parse(exchange(small.address, head))
    assert response.status == 413
    assert small.app.calls == []


# Chunked bodies.


def test_a_chunked_body_is_decoded_with_its_extensions_and_trailers(echo):
    wire = (
        b"5;name=value\r\nhello\r\n"
        b"A\r\n, chunked!\r\n"
        b'1;quoted="a;b"\r\n.\r\n'
        b"0;last\r\nX-Trailer: dropped\r\nX-Checksum: 1\r\n\r\n"
    )
    data = http_request("POST", "/slack/events", [("Transfer-Encoding", "chunked")], wire)
    response = request(echo.address, data)
    assert response.status == 200
    [seen] = echo.app.calls
    assert seen["body"] == "hello, chunked!."
    # Bolt reads CONTENT_LENGTH bytes: it is the decoded body's length.
    assert seen["content_length"] == "16"
    assert "HTTP_X_TRAILER" not in seen["headers"]
    assert "HTTP_X_CHECKSUM" not in seen["headers"]


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_request_that_arrives_one_byte_at_a_time_is_read_whole(echo, framing):
    body = b"payload=" + b"x" * 100
    if framing == "chunked":
        wire = chunked(body[:7], body[7:50], body[50:])
        data = http_request("POST", "/slack/events", [("Transfer-Encoding", "chunked")], wire)
    else:
        data = post("/slack/events", body)
    with socket.create_connection(echo.address, timeout=TIMEOUT) as client:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(data)):
            client.sendall(data[i : i + 1])
        response = parse(read_all(client))
    assert response.status == 200
    assert echo.app.calls[0]["body"].encode() == body


@pytest.mark.parametrize(
    "wire",
    [
        b"zz\r\nhello\r\n0\r\n\r\n",
        b"-5\r\nhello\r\n0\r\n\r\n",
        b"\r\nhello\r\n0\r\n\r\n",
        b"5\r\nhelloXY0\r\n\r\n",
    ],
    ids=["not hex", "negative", "empty size line", "no CRLF after the data"],
)
def test_a_malformed_chunk_gets_400(echo, wire):
    data = http_request("POST", "/slack/events", [("Transfer-Encoding", "chunked")], wire)
    response = request(echo.address, data)
    assert response.status == 400
    assert echo.app.calls == []


# Body limits.


def test_a_body_over_the_limit_gets_413_while_the_client_is_still_sending_it(small):
    """The app is not called, and the answer is not lost to a connection reset: the server
    reads (and drops) the body the client goes on sending."""
    body = b"x" * (4 << 20)  # more than the kernel's buffers hold
    data = post("/slack/events", body)
    with socket.create_connection(small.address, timeout=TIMEOUT) as client:
        client.sendall(data)
        response = parse(read_all(client))
    assert response.status == 413
    assert response.header("Content-Type") == "text/plain"
    assert small.app.calls == []


def test_a_chunked_body_over_the_limit_gets_413(small):
    wire = chunked(b"a" * 600, b"b" * 600)
    data = http_request("POST", "/slack/events", [("Transfer-Encoding", "chunked")], wire)
    assert request(small.address, data).status == 413
    assert small.app.calls == []


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_body_at_the_limit_is_accepted(small, framing):
    body = b"y" * SMALL_MAX_BODY
    if framing == "chunked":
        wire = chunked(body[:500], body[500:])
        data = http_request("POST", "/slack/events", [("Transfer-Encoding", "chunked")], wire)
    else:
        data = post("/slack/events", body)
    assert request(small.address, data).status == 200
    assert small.app.calls[0]["body"].encode() == body


# Requests refused before the app.


def _with_header(line: bytes) -> bytes:
    return b"GET /slack/events HTTP/1.1\r\nHost: test\r\n" + line + b"\r\n\r\n"


def _post_with(header_lines: bytes, body: bytes = b"hello") -> bytes:
    return b"POST /slack/events HTTP/1.1\r\nHost: test\r\n" + header_lines + b"\r\n\r\n" + body


REFUSED = {
    "post without length": (b"POST /slack/events HTTP/1.1\r\nHost: test\r\n\r\n", 411),
    "length and chunked": (
        _post_with(b"Content-Length: 5\r\nTransfer-Encoding: chunked", b"5\r\nhello\r\n0\r\n\r\n"),
        400,
    ),
    "gzip coding": (_post_with(b"Transfer-Encoding: gzip"), 501),
    "gzip then chunked": (_post_with(b"Transfer-Encoding: gzip, chunked"), 501),
    "length not a number": (_post_with(b"Content-Length: five"), 400),
    "negative length": (_post_with(b"Content-Length: -5"), 400),
    "signed length": (_post_with(b"Content-Length: +5"), 400),
    "length with a superscript digit": (_post_with(b"Content-Length: \xb2"), 400),
    "length of 19 digits": (_post_with(b"Content-Length: " + b"1" * 19), 400),
    "length repeated": (_post_with(b"Content-Length: 5\r\nContent-Length: 5"), 400),
    "length list": (_post_with(b"Content-Length: 5, 5"), 400),
    "host repeated": (_with_header(b"Host: other"), 400),
    "request line of two parts": (b"GET /slack/events\r\nHost: test\r\n\r\n", 400),
    "request line with a double space": (b"GET  /slack/events HTTP/1.1\r\n\r\n", 400),
    "lowercase method": (b"get /slack/events HTTP/1.1\r\n\r\n", 400),
    "not http": (b"GET /slack/events FTP/1.1\r\n\r\n", 400),
    "garbage": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
    "http/2.0": (b"GET /slack/events HTTP/2.0\r\nHost: test\r\n\r\n", 505),
    "header without colon": (_with_header(b"X-Slack-Signature v0=abc"), 400),
    "space in header name": (_with_header(b"X Slack: v0=abc"), 400),
    "space before colon": (_with_header(b"X-Slack-Signature : v0=abc"), 400),
    "empty header name": (_with_header(b": v0=abc"), 400),
    "folded header": (_with_header(b"X-Slack-Signature: v0=\r\n abc"), 400),
}


@pytest.mark.parametrize(("data", "status"), REFUSED.values(), ids=REFUSED.keys())
def test_a_malformed_or_unsupported_request_is_refused_before_the_app(echo, data, status):
    response = request(echo.address, data)
    assert response.status == status
    assert response.header("Content-Type") == "text/plain"
    assert response.body, "the refusal says why"
    assert echo.app.calls == []


def test_a_request_head_over_64_kb_gets_431(echo):
    data = http_request("GET", "/slack/events", [("X-Big", "a" * (70 * 1024))])
    response = request(echo.address, data)
    assert response.status == 431
    assert echo.app.calls == []


def test_a_request_head_just_under_64_kb_is_accepted(echo):
    value = "b" * (63 * 1024)
    response = request(echo.address, post("/slack/events", b"body", [("X-Big", value)]))
    assert response.status == 200
    [seen] = echo.app.calls
    assert seen["headers"]["HTTP_X_BIG"] == value
    assert seen["body"] == "body"


# Headers as the app sees them.


@pytest.mark.parametrize("forged_first", [True, False])
def test_a_header_with_an_underscore_does_not_reach_the_app(echo, forged_first):
    """ "X_Slack_Signature" would land on HTTP_X_SLACK_SIGNATURE, the signed header's key."""
    headers = [("X-Slack-Signature", "v0=real"), ("X_Slack_Signature", "v0=forged")]
    if forged_first:
        headers.reverse()
    assert request(echo.address, http_request("GET", "/a", headers)).status == 200
    assert request(echo.address, http_request("GET", "/b", [("X_Foo", "forged")])).status == 200
    with_both, underscore_only = echo.app.calls
    assert with_both["headers"]["HTTP_X_SLACK_SIGNATURE"] == "v0=real"
    assert "HTTP_X_FOO" not in underscore_only["headers"]
    assert set(underscore_only["headers"]) == {"HTTP_HOST"}


def test_repeated_headers_are_joined_and_values_trimmed(echo):
    data = http_request(
        "GET",
        "/",
        [("Accept", "text/plain"), ("X-Multi", "a"), ("x-multi", "b"), ("X-Pad", " \t v w \t")],
    )
    assert request(echo.address, data).status == 200
    headers = echo.app.calls[0]["headers"]
    assert headers["HTTP_X_MULTI"] == "a, b"
    assert headers["HTTP_X_PAD"] == "v w"
    assert headers["HTTP_ACCEPT"] == "text/plain"


# Failures of the app or of the client: the server goes on answering.


@pytest.mark.parametrize("path", ["/raise", "/raise-in-body", "/no-start"])
def test_a_failing_app_gets_500_and_the_thread_goes_on_serving(start_server, caplog, path):
    server = start_server(threads=1)  # the thread that failed must answer the next request
    response = request(server.address, http_request("POST", path, [("Content-Length", "0")]))
    assert response.status == 500
    assert b"partial" not in response.body
    assert any(r.name == "approvals.httpd" and r.levelno >= logging.ERROR for r in caplog.records)
    after = request(server.address, http_request("GET", "/healthz"))
    assert (after.status, after.body) == (200, b"ok")


HALF_HEAD = b"POST /slack/events HTTP/1.1\r\nHost: test\r\nContent-Le"
HALF_BODY = b"POST /slack/events HTTP/1.1\r\nHost: test\r\nContent-Length: 10\r\n\r\nabc"


@pytest.mark.parametrize(
    ("sent", "reset"),
    [(b"", False), (HALF_HEAD, False), (HALF_BODY, False), (HALF_BODY, True)],
    ids=["nothing", "half a head", "half a body", "reset in the body"],
)
def test_a_client_that_leaves_early_does_not_stop_the_server(start_server, sent, reset):
    server = start_server(threads=1)
    with socket.create_connection(server.address, timeout=TIMEOUT) as client:
        client.sendall(sent)
        if reset:  # close with RST rather than FIN
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    after = request(server.address, http_request("GET", "/healthz"))
    assert (after.status, after.body) == (200, b"ok")
    assert [call["path"] for call in server.app.calls] == ["/healthz"]


@pytest.mark.parametrize("sent", [HALF_HEAD, HALF_BODY], ids=["half a head", "half a body"])
def test_a_stalled_client_is_dropped_after_the_read_timeout(start_server, monkeypatch, sent):
    """With one thread, a request queued behind a stalled one is answered once the stalled
    one has had READ_TIMEOUT to send more."""
    server = start_server(threads=1)
    # Set after the server started: it is read as each connection is taken.
    monkeypatch.setattr(httpd, "READ_TIMEOUT", 0.3)
    with (
        socket.create_connection(server.address, timeout=TIMEOUT) as stalled,
        socket.create_connection(server.address, timeout=TIMEOUT) as later,
    ):
        stalled.sendall(sent)
        started = time.monotonic()
        later.sendall(http_request("GET", "/healthz"))
        response = parse(read_all(later))
        waited = time.monotonic() - started
        assert read_all(stalled) == b"", "a stalled request is dropped without an answer"
    assert (response.status, response.body) == (200, b"ok")
    assert 0.25 <= waited < 3
    assert [call["path"] for call in server.app.calls] == ["/healthz"]


# Threads.


def test_n_threads_answer_n_requests_at_once_and_the_next_waits_for_a_free_one(start_server):
    server = start_server(threads=4)
    with contextlib.ExitStack() as stack:

        def send(name: str) -> socket.socket:
            client = stack.enter_context(socket.create_connection(server.address, TIMEOUT))
            client.sendall(post("/wait", name.encode()))
            return client

        first = [send(str(i)) for i in range(4)]
        wait_until(lambda: len(server.app.calls) == 4, TIMEOUT, "4 requests in the app at once")
        assert {call["body"] for call in server.app.calls} == {"0", "1", "2", "3"}

        fifth = send("4")  # connected, in the kernel's queue: no thread is free to take it
        assert stays(lambda: len(server.app.calls) == 4, 0.3)

        server.app.release("2")
        assert parse(read_all(first[2])).status == 200
        wait_until(lambda: len(server.app.calls) == 5, TIMEOUT, "the 5th request in the app")
        assert server.app.calls[4]["body"] == "4"

        for name in ("0", "1", "3", "4"):
            server.app.release(name)
        for client in [*first[:2], first[3], fifth]:
            response = parse(read_all(client))
            assert response.status == 200
            assert response.json()["path"] == "/wait"


def test_two_sets_of_threads_on_one_socket_each_take_what_they_can_answer(start_server):
    """Replicas sharing one socket: a busy thread does not take a connection, so 8 requests
    in flight occupy the 4 threads of each set."""
    first = start_server(threads=4, app=EchoApp("first"))
    second = start_server(threads=4, app=EchoApp("second"), sock=first.sock)
    apps = (first.app, second.app)
    with contextlib.ExitStack() as stack:
        clients = []
        for i in range(8):
            client = stack.enter_context(socket.create_connection(first.address, TIMEOUT))
            client.sendall(post("/wait", str(i).encode()))
            clients.append(client)
        wait_until(lambda: sum(len(a.calls) for a in apps) == 8, TIMEOUT, "8 requests in apps")
        assert (len(first.app.calls), len(second.app.calls)) == (4, 4)
        for app in apps:
            app.release_all()
        tags = [parse(read_all(client)).json()["tag"] for client in clients]
    assert sorted(tags) == ["first"] * 4 + ["second"] * 4
