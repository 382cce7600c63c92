"""Input that once made ``approvals api`` hang or answer 500 now gets a prompt, documented
answer, and a refused request creates nothing. Against the API alone (``lone_api``): a real
process, its own Redis database."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx

from approvals.api.bodies import MAX_DEPTH
from tests.api.conftest import LoneApi
from tests.api.contract import check

ROUTE = "/v1/approvals"
ONE = "/v1/approvals/{approval_id}"


def _headers(api: LoneApi, agent: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api.token(agent)}", "Content-Type": "application/json"}


def _create(api: LoneApi, headers: dict[str, str]) -> str:
    made = httpx.post(api.url + ROUTE, json={"tool": "deploy", "arguments": {}}, headers=headers)
    assert made.status_code == 201, made.text
    approval_id: str = made.json()["id"]
    return approval_id


def _nested_body(depth: int) -> str:
    """A request whose objects and arrays nest ``depth`` deep, the body itself included."""
    arrays = depth - 2  # the body and its arguments are the first two levels
    return '{"tool": "deploy", "arguments": {"a": ' + "[" * arrays + "1" + "]" * arrays + "}}"


def _strict(raw: bytes) -> Any:
    """JSON as a strict parser reads it: NaN or Infinity fail it."""

    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} is not JSON")

    return json.loads(raw.decode("ascii"), parse_constant=refuse)


def test_a_wait_shorter_than_a_millisecond_answers_at_once(lone_api: LoneApi) -> None:
    """``?wait=0.0005`` answers the pending approval at once (it was rounded to Redis's
    ``BLOCK 0``, forever, and answered 500 when the socket gave up)."""
    headers = _headers(lone_api, "hasty")
    approval_id = _create(lone_api, headers)
    url = f"{lone_api.url}{ROUTE}/{approval_id}"
    for wait in ("0.0005", "1e-9", "0.001"):
        started = time.monotonic()
        answer = httpx.get(url, params={"wait": wait}, headers=headers, timeout=30)
        assert answer.status_code == 200 and answer.json()["status"] == "pending"
        assert time.monotonic() - started < 10


def test_arguments_nested_too_deep_get_422_naming_the_field(lone_api: LoneApi) -> None:
    """Arguments nested deeper than ``MAX_DEPTH`` (the body being the first level) get a 422
    naming ``arguments``, however deep; nothing is created. At the limit they are taken."""
    headers = _headers(lone_api, "deep")
    url = lone_api.url + ROUTE
    before = lone_api.state()
    # Past the parser's own stack (Python's recursion limit) only the body can be named.
    named = {MAX_DEPTH + 1: ["body", "arguments"], 500: ["body", "arguments"], 5000: ["body"]}
    for depth, loc in named.items():
        answer = httpx.post(url, content=_nested_body(depth), headers=headers)
        assert answer.status_code == 422, answer.text
        (problem,) = answer.json()["detail"]
        assert problem["type"] == "json_too_deep" and str(MAX_DEPTH) in problem["msg"]
        assert problem["loc"] == loc
        check(lone_api.url, ROUTE, "POST", answer)
    assert lone_api.state() == before
    deepest = httpx.post(url, content=_nested_body(MAX_DEPTH), headers=headers)
    assert deepest.status_code == 201


def test_a_stored_lone_surrogate_is_answered_escaped(lone_api: LoneApi) -> None:
    """A decision holding a lone surrogate (as an older version could store) is answered, as
    ASCII JSON with the surrogate escaped, by every read: never a 500."""
    headers = _headers(lone_api, "surrogates")
    approval_id = _create(lone_api, headers)
    lone_api.decide(approval_id, {"path": "a\ud800b"}, actor_name="\udfff")
    url = f"{lone_api.url}{ROUTE}/{approval_id}"
    for _ in range(2):
        answer = httpx.get(url, headers=headers)
        assert answer.status_code == 200, answer.text
        assert b"a\\ud800b" in answer.content
        decision = _strict(answer.content)["decision"]
        assert decision["arguments"] == {"path": "a\ud800b"} and decision["actor_name"] == "\udfff"
        check(lone_api.url, ONE, "GET", answer)


def test_nan_and_infinity_are_refused_at_the_door(lone_api: LoneApi) -> None:
    """``NaN``, ``Infinity`` and ``-Infinity`` are not JSON (422 naming the argument), and
    ``1e999`` is no number a double holds: nothing created (they were taken, and came back as
    ``null``)."""
    headers = _headers(lone_api, "not-a-number")
    url = lone_api.url + ROUTE
    before = lone_api.state()
    for constant in ("NaN", "Infinity", "-Infinity", "1e999", "-1E400"):
        raw = f'{{"tool": "deploy", "arguments": {{"x": {constant}}}}}'
        answer = httpx.post(url, content=raw, headers=headers)
        assert answer.status_code == 422, answer.text
        (problem,) = answer.json()["detail"]
        named = ["body", "arguments", "x"] if "e" not in constant.lower() else ["body"]
        assert problem["loc"] == named and problem["type"] == "json_invalid"
        assert constant.lstrip("-") in problem["msg"]
        check(lone_api.url, ROUTE, "POST", answer)
    assert lone_api.state() == before


def test_a_stored_non_finite_number_is_answered_as_valid_json(lone_api: LoneApi) -> None:
    """A NaN an older version stored is answered as ``null`` in valid JSON, never a 500."""
    headers = _headers(lone_api, "old-nan")
    approval_id = _create(lone_api, headers)
    lone_api.decide(approval_id, {"x": float("nan"), "y": [float("inf")]})
    answer = httpx.get(f"{lone_api.url}{ROUTE}/{approval_id}", headers=headers)
    assert answer.status_code == 200
    assert _strict(answer.content)["decision"]["arguments"] == {"x": None, "y": [None]}


def test_repeated_keys_and_other_encodings_are_refused(lone_api: LoneApi) -> None:
    """A key twice in one object (which would hide a value) and a body not in UTF-8: 422."""
    headers = _headers(lone_api, "twice")
    url = lone_api.url + ROUTE
    before = lone_api.state()
    twice = '{"tool": "deploy", "arguments": {"path": "docs/", "path": "/"}}'
    utf16 = '{"tool": "deploy", "arguments": {}}'.encode("utf-16")
    for raw, words in ((twice.encode(), "'path' twice"), (utf16, "utf-8")):
        answer = httpx.post(url, content=raw, headers=headers)
        assert answer.status_code == 422 and words in answer.json()["detail"][0]["msg"]
        check(lone_api.url, ROUTE, "POST", answer)
    assert lone_api.state() == before


def test_options_the_api_does_not_offer_are_refused_and_create_nothing(
    lone_api: LoneApi,
) -> None:
    """A token chooses who decides, not where the approval's events go, whether its
    requester may approve, or what a rejection ends: those options are unknown fields (422
    naming each), and nothing is created."""
    headers = _headers(lone_api, "overreach")
    url = lone_api.url + ROUTE
    before = lone_api.state()
    refused = {"webhook": "https://elsewhere.example", "allow_self_approval": True,
               "on_reject": "stop"}  # fmt: skip
    for name, value in refused.items():
        body = {"tool": "deploy", "arguments": {}, name: value}
        answer = httpx.post(url, json=body, headers=headers)
        assert answer.status_code == 422, answer.text
        assert [p["loc"] for p in answer.json()["detail"]] == [["body", name]]
        check(lone_api.url, ROUTE, "POST", answer)
    assert lone_api.state() == before


def test_a_chunked_body_over_the_cap_gets_413(lone_api: LoneApi) -> None:
    """A body sent in chunks (no Content-Length) past ``APPROVALS_API_MAX_BODY`` gets the
    documented 413 (it got 400), on both routes that read one; nothing is created."""
    headers = _headers(lone_api, "chunky")
    approval_id = _create(lone_api, headers)
    before = lone_api.state()

    def chunks() -> Iterator[bytes]:
        yield b'{"tool": "deploy", "arguments": {"x": "'
        for _ in range(20):
            yield b"y" * 8192
        yield b'"}}'

    for route, path in ((ROUTE, ROUTE), (ONE + "/result", f"{ROUTE}/{approval_id}/result")):
        answer = httpx.post(lone_api.url + path, content=chunks(), headers=headers)
        assert answer.status_code == 413, answer.text
        assert "over" in answer.json()["detail"]
        check(lone_api.url, route, "POST", answer)
    assert lone_api.state() == before
