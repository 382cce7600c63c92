"""Serving the API on uvicorn (``approvals api``), from a socket bound here so that port 0
works and the line saying where it listens names the real port."""

from __future__ import annotations

import socket

import uvicorn

from approvals.api.app import build_app
from approvals.config import Settings


def serve(settings: Settings, host: str, port: int) -> None:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: without it an answer written in two parts waits for
    # the client's delayed ACK (Nagle's algorithm), which every request paid.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    print(f"approvals api listening on http://{host}:{bound}", flush=True)
    config = uvicorn.Config(
        build_app(settings), log_level="warning", backlog=2048, timeout_graceful_shutdown=5
    )
    uvicorn.Server(config).run(sockets=[sock])
