"""The OpenAPI document is a contract the live API keeps: it declares the bearer scheme and
every answer each route can give, with its body's schema, and Schemathesis (from the
document alone) finds no answer outside it: no 5xx, no undocumented status, content type,
header or body, invalid data refused, every route refusing a missing or wrong token.

Against ``approvals api`` alone on its own Redis database (``lone_api``); bounded so that it
costs seconds (a few examples per route and phase; long polls cut to a hundredth of a second).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import settings
from schemathesis.generation.stateful.state_machine import APIStateMachine

from approvals.api.app import build_app
from approvals.config import Settings
from tests.api.conftest import LoneApi
from tests.api.contract import document

#: The answers each route can give, as docs/api.md lists them.
ANSWERS = {
    ("post", "/v1/approvals"): {"201", "401", "403", "413", "422", "429", "503"},
    ("get", "/v1/approvals"): {"200", "401", "413", "422", "429"},
    ("get", "/v1/approvals/{approval_id}"): {"200", "401", "404", "413", "422", "429"},
    ("post", "/v1/approvals/{approval_id}/result"): {
        *("200", "401", "404", "409", "413", "422", "429"),
    },
}
#: A long poll holds its answer up to ``wait`` seconds: the fuzzers wait this long at most.
SHORT_WAIT = 0.01
CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "ignored_auth",
    "unsupported_method",
    "missing_required_header",
]


def test_the_document_declares_the_bearer_scheme_and_every_answer(lone_api: LoneApi) -> None:
    """Bearer auth on every route (Swagger UI's Authorize button), each route's answers with
    a schema each, and no ``HTTPValidationError``: the 422 body is the API's own."""
    doc = document(lone_api.url)
    assert doc["components"]["securitySchemes"] == {
        "bearer": {"type": "http", "scheme": "bearer", "description": _anything()}
    }
    for (method, path), statuses in ANSWERS.items():
        operation = doc["paths"][path][method]
        assert operation["security"] == [{"bearer": []}]
        assert set(operation["responses"]) == statuses, (method, path)
        for status, response in operation["responses"].items():
            schema = response["content"]["application/json"]["schema"]
            name = schema["$ref"].rsplit("/", 1)[1]
            expected = {"4": "Invalid" if status == "422" else "Refusal", "5": "Refusal"}
            assert name == expected.get(status[0], name), (method, path, status)
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    links = doc["paths"]["/v1/approvals"]["post"]["responses"]["201"]["links"]
    assert {link["operationId"] for link in links.values()} == {"get_approval", "post_result"}


def test_swagger_ui_has_an_authorize_button(lone_api: LoneApi) -> None:
    """/v1/docs loads the document that declares the scheme Swagger UI's Authorize uses."""
    page = httpx.get(lone_api.url + "/v1/docs")
    assert page.status_code == 200 and "/v1/openapi.json" in page.text


#: The document the API serves (``test_the_served_document_is_the_one_fuzzed`` holds it so),
#: built here because Schemathesis parametrizes the tests when this module is imported; its
#: loader that waits for a fixture's server does not run on this pytest.
DOCUMENT = build_app(Settings.from_env({})).openapi()
SCHEMA = schemathesis.openapi.from_dict(
    DOCUMENT,
    config=schemathesis.Config.from_dict(
        {
            "seed": 23,
            "generation": {"max-examples": 12, "mode": "all"},
            "checks": {
                "enabled": False,
                **{name: {"enabled": True} for name in CHECKS},
                # A body over the cap is refused before anyone reads it (413).
                "negative_data_rejection": {"enabled": True, "expected-statuses": ["4XX"]},
            },
        }
    ),
)


@pytest.fixture(scope="module")
def authorized(lone_api: LoneApi) -> dict[str, str]:
    """A valid token of its own agent for the fuzzers' requests."""
    return {"Authorization": f"Bearer {lone_api.token('schemathesis')}"}


def test_the_served_document_is_the_one_fuzzed(lone_api: LoneApi) -> None:
    """/v1/openapi.json is the document the fuzzers below were generated from."""
    assert document(lone_api.url) == json.loads(json.dumps(DOCUMENT))


@SCHEMA.parametrize()
@settings(deadline=None)
def test_every_answer_is_in_the_document(
    case: schemathesis.Case, lone_api: LoneApi, authorized: dict[str, str]
) -> None:
    """Examples, coverage and fuzzing cases, valid and not, from the document alone: every
    answer is one the document lists, with its schema and headers; invalid input is refused
    with a 4xx; each route answers a missing or wrong token with 401."""
    _shorten_wait(case)
    case.call_and_validate(base_url=lone_api.url, headers=authorized, timeout=30)


def test_create_then_read_and_report_by_the_links(
    lone_api: LoneApi, authorized: dict[str, str]
) -> None:
    """Stateful: create, then follow the document's links to read it and report a result,
    each answer held to the document (the result of an undecided approval is a 409)."""

    class Workflow(SCHEMA.as_state_machine()):
        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
            return {"base_url": lone_api.url, "headers": authorized, "timeout": 30}

        def before_call(self, case: schemathesis.Case) -> None:
            _shorten_wait(case)

    machine: type[APIStateMachine] = Workflow
    machine.run(settings=settings(machine.TestCase.settings, max_examples=8, stateful_step_count=4))


def _shorten_wait(case: schemathesis.Case) -> None:
    """A valid ``wait`` on a pending approval holds the answer that long: cut it short."""
    wait = (case.query or {}).get("wait")
    if isinstance(wait, int | float) and not isinstance(wait, bool) and 0 < wait <= 60:
        case.query["wait"] = min(wait, SHORT_WAIT)


def _anything() -> Any:
    """Equal to any value, for the parts of a document an assertion does not pin."""

    class Anything:
        def __eq__(self, other: object) -> bool:
            return True

    return Anything()
