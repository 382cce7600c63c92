"""The API's own OpenAPI document as a contract: an answer conforms when the document lists its
status for that route and its body fits the schema listed there."""

from __future__ import annotations

from functools import cache
from typing import Any

import httpx
from jsonschema import Draft202012Validator

#: The refusal an unknown path (404) or method (405) gets: no route lists it, so the
#: document cannot; it is the same ``Refusal`` body as every route's.
UNROUTED = {"$ref": "#/components/schemas/Refusal"}


@cache
def document(url: str) -> dict[str, Any]:
    """The document ``approvals api`` at ``url`` serves."""
    found: dict[str, Any] = httpx.get(url + "/v1/openapi.json", timeout=10).json()
    return found


def check(url: str, route: str | None, method: str, answer: httpx.Response) -> None:
    """Fail unless ``answer`` to ``method route`` (None: no route) is one the document lists,
    as JSON whose body fits the schema it lists."""
    doc = document(url)
    assert answer.headers["content-type"] == "application/json", answer.headers
    if route is None:
        assert answer.status_code in (404, 405), answer.status_code
        schema = UNROUTED
    else:
        responses = doc["paths"][route][method.lower()]["responses"]
        listed = responses.get(str(answer.status_code))
        assert listed is not None, f"{method} {route}: {answer.status_code} is not documented"
        schema = listed["content"]["application/json"]["schema"]
    validator = Draft202012Validator({**schema, "components": doc["components"]})
    problems = [error.message for error in validator.iter_errors(answer.json())]
    assert problems == [], f"{method} {route} {answer.status_code}: {problems} in {answer.text}"


def conforms(url: str, schema_name: str, value: Any) -> bool:
    """Whether ``value`` fits the document's component ``schema_name``."""
    doc = document(url)
    schema = {"$ref": f"#/components/schemas/{schema_name}", "components": doc["components"]}
    return Draft202012Validator(schema).is_valid(value)
