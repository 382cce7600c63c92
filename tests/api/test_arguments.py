"""The API's door for arguments: only I-JSON comes in (``approvals.decisions.ijson``); the
rest gets a 422 naming the field, and nothing is created."""

from __future__ import annotations

import httpx
import pytest

from approvals import store
from tests.api.conftest import Stack
from tests.e2e import redis_state, settled


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ('{"ids": [1, 2, 3, 18446744073709551615]}', "ids", "arguments.ids[3]: 1844674407370"),
        ('{"user": {"id": 1541815603606036480123}}', "user", "arguments.user.id: 15418"),
        ('{"ratio": NaN}', "ratio", "arguments.ratio: NaN is not a JSON number"),
        ('{"limit": -Infinity}', "limit", "arguments.limit: -Infinity is not a JSON number"),
        ('{"note": "a\\udc00b"}', "note", "arguments.note: holds a lone surrogate (U+DC00)"),
        ('{"k\\ud800": 1}', '"k\\ud800"', 'arguments["k\\ud800"]: its name holds a lone'),
    ],
)
def test_arguments_that_are_not_i_json_get_a_422_naming_the_field(
    stack: Stack, body: str, field: str, says: str
) -> None:
    """Snowflake ids, NaN, Infinity and lone surrogates are refused with the field's path;
    Redis is left exactly as it was."""
    headers = {
        "Authorization": f"Bearer {stack.token('door')}",
        "Content-Type": "application/json",
    }
    before = settled(lambda: _state(stack))  # earlier tests' cards may still be going out
    raw = '{"tool": "sync_users", "arguments": ' + body + "}"

    answer = httpx.post(stack.api_url + "/v1/approvals", content=raw.encode(), headers=headers)

    assert answer.status_code == 422, answer.text
    [detail] = answer.json()["detail"]
    assert detail["loc"] == ["body", "arguments", field]
    assert detail["msg"].startswith(says), detail["msg"]
    assert _state(stack) == before


def _state(stack: Stack) -> dict[bytes, object]:
    """Redis as ``redis_state`` reads it, but for the tokens (the stack's tests make theirs
    as they go; a hash's DUMP may also change order while Redis rehashes it) and the rate
    limit's count of requests."""
    rates = store.keys.rate_key("", 0).removesuffix(":0").encode()
    return {
        key: value
        for key, value in redis_state(stack.conn, jobs=True).items()
        if not key.startswith(rates) and key != store.keys.TOKENS_KEY.encode()
    }


def test_a_64_bit_id_sent_as_a_string_is_let_in(stack: Stack) -> None:
    """What the refusal asks for works: the same id as a string is asked as usual."""
    client = stack.client(stack.token("door-fixed"))
    made = client.request("sync_users", {"ids": [1, 2, 3, "18446744073709551615"]})
    assert made["status"] == "pending"
