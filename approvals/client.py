"""``Client``: ask people through ``approvals api`` from any Python program, and wait.

The seed pattern: ``request`` what you are about to do, ``wait`` for the decision, act on
``decision["arguments"]`` (a reviewer may have edited them), then ``report`` what happened.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from approvals.errors import ApprovalsError

#: The API answers a single wait after at most this many seconds; ``wait`` asks again.
LONGEST_WAIT = 60.0


class ApiError(ApprovalsError):
    """The API refused a request; ``status`` is the HTTP status, ``detail`` its explanation."""

    def __init__(self, status: int, detail: Any) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


class Client:
    """A caller of ``approvals api`` at ``url`` with a bearer ``token`` (one per agent)."""

    def __init__(self, url: str, token: str, timeout: float = 10.0) -> None:
        self._http = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
        )

    def request(self, tool: str, arguments: dict[str, Any], **fields: Any) -> dict[str, Any]:
        """Ask for a decision on calling ``tool`` with ``arguments``; returns the new approval
        (``id``, ``status``). ``fields`` are the other fields of ``POST /v1/approvals``
        (``summary``, ``preview``, ``schema``, ``expires_in``, ``idempotency_key``...)."""
        body = {"tool": tool, "arguments": arguments, **fields}
        return self._call("POST", "/v1/approvals", json=body)

    def get(self, approval_id: str, wait: float = 0) -> dict[str, Any]:
        """The approval as it stands, waiting up to ``wait`` seconds (at most 60) for a decision."""
        wait = min(max(wait, 0.0), LONGEST_WAIT)
        return self._call(
            "GET", f"/v1/approvals/{approval_id}", params={"wait": wait}, extra_timeout=wait
        )

    def wait(self, approval_id: str, timeout: float | None = None) -> dict[str, Any]:
        """Block until the approval is decided (or ``timeout`` seconds passed); returns it.

        Each round is one long poll that the API answers the moment people decide.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = LONGEST_WAIT if deadline is None else max(0.0, deadline - time.monotonic())
            answer = self.get(approval_id, wait=min(left, LONGEST_WAIT))
            if answer["status"] != "pending":
                return answer
            if deadline is not None and time.monotonic() >= deadline:
                return answer

    def report(self, approval_id: str, ok: bool, output: str = "") -> dict[str, Any]:
        """Tell people what happened when you acted on the decision (shown in the thread)."""
        body = {"ok": ok, "output": output}
        return self._call("POST", f"/v1/approvals/{approval_id}/result", json=body)

    def pending(self) -> list[dict[str, Any]]:
        """This agent's approvals still waiting for a decision."""
        answer = self._call("GET", "/v1/approvals", params={"status": "pending"})
        return list(answer["approvals"])

    def find(self, idempotency_key: str) -> dict[str, Any] | None:
        """The approval this agent asked for with ``idempotency_key``, whatever its status
        (None: none, or it is gone)."""
        answer = self._call("GET", "/v1/approvals", params={"idempotency_key": idempotency_key})
        found = list(answer["approvals"])
        return found[0] if found else None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self, method: str, path: str, extra_timeout: float = 0, **kwargs: Any
    ) -> dict[str, Any]:
        timeout = self._http.timeout.read or 10.0
        response = self._http.request(method, path, timeout=timeout + extra_timeout, **kwargs)
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail")
            except ValueError:
                detail = response.text
            raise ApiError(response.status_code, detail)
        data: dict[str, Any] = response.json()
        return data
