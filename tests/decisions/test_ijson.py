"""I-JSON at the door: what cannot be canonicalized is refused naming its field, and whatever
is let in can be decided, signed, verified, archived and read back identically."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import rfc8785
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from approvals import store
from approvals.calls import external
from approvals.config import Settings
from approvals.decisions import ijson, review
from approvals.errors import InvalidArguments
from approvals.models import DecisionKind
from approvals.ops import archive, lookup, retention
from approvals.proof import audit, keys
from approvals.proof.receipts import verify_receipt
from tests.e2e import redis_state

DAY = 24 * 3600


@pytest.mark.parametrize(
    ("arguments", "key", "says"),
    [
        ({"ids": [1, 2, 3, 2**64]}, "ids", "arguments.ids[3]: 18446744073709551616 is beyond"),
        ({"id": -(2**53)}, "id", "arguments.id: -9007199254740992 is beyond ±(2^53-1)"),
        ({"x": {"ratio": float("nan")}}, "x", "arguments.x.ratio: NaN is not a JSON number"),
        ({"limits": [float("-inf")]}, "limits", "arguments.limits[0]: -Infinity is not a"),
        ({"note": "ok\udc00"}, "note", "arguments.note: holds a lone surrogate (U+DC00)"),
        ({"tags": {"a\ud800": 1}}, "tags", 'arguments.tags["a\\ud800"]: its name holds a lone'),
        ({"k\ud800": 1}, '"k\\ud800"', 'arguments["k\\ud800"]: its name holds a lone surrogate'),
        ({"m": "\ufffe"}, "m", "arguments.m: holds a noncharacter (U+FFFE) at character 0"),
        ({"odd key": [{"deep": 2**60}]}, "odd key", 'arguments["odd key"][0].deep: 115292'),
        ({"t": (1, 2)}, "t", "arguments.t: a tuple is not a JSON value"),
    ],
)
def test_what_has_no_canonical_form_is_refused_naming_its_field(arguments, key, says):
    """Each refusal is keyed by the top-level argument and names the exact field."""
    with pytest.raises(InvalidArguments) as refused:
        ijson.check_arguments(arguments)
    assert list(refused.value.errors) == [key]
    assert refused.value.errors[key].startswith(says), refused.value.errors[key]
    # The answer itself is valid text, whatever the arguments held.
    json.dumps(refused.value.errors, ensure_ascii=False).encode()


def test_a_64_bit_id_is_told_to_come_as_a_string():
    """Snowflake ids are the real case: the message says what to do about them."""
    with pytest.raises(InvalidArguments) as refused:
        ijson.check_arguments({"tweet_id": 1541815603606036480 * 8})
    assert "as strings" in refused.value.errors["tweet_id"]
    ijson.check_arguments({"tweet_id": "12334528733982187520"})


def test_deep_nesting_is_refused_and_every_i_json_value_is_let_in():
    """Nesting past MAX_DEPTH is refused; the largest safe integers, finite floats, any
    Unicode text and empty containers are let in."""
    deep: dict = {}
    inner = deep
    for _ in range(ijson.MAX_DEPTH):
        inner["a"] = {}
        inner = inner["a"]
    with pytest.raises(InvalidArguments, match="nested deeper than 64 levels"):
        ijson.check_arguments({"deep": deep})
    ijson.check_arguments(
        {
            "max": 2**53 - 1,
            "min": -(2**53) + 1,
            "float": 1e308,
            "text": "ünïcode ✓ 𝄞",
            "empty": [{}, []],
            "nothing": None,
            "flag": False,
        }
    )


def test_a_reason_that_is_not_unicode_text_is_refused():
    """A reason typed at a terminal can hold a lone surrogate: refused, not stored."""
    with pytest.raises(InvalidArguments) as refused:
        ijson.check_text("reason", "because\ud800")
    assert list(refused.value.errors) == ["reason"]


# --- the property: accepted means it round-trips, signed; refused means nothing is written -----

#: Mostly I-JSON, sometimes not: any integer, NaN, Infinity, any code point (a surrogate, a
#: noncharacter), in a value or in a key.
_PLAIN = st.text(st.characters(exclude_categories=("Cs", "Cn")), max_size=8)
_ODD = st.integers() | st.floats() | st.text(st.characters(exclude_categories=()), max_size=4)
_ODD_KEY = st.sampled_from(["\ud800", "x\udfff", "\ufdd0"])
_TEXT = st.integers(0, 9).flatmap(lambda n: _ODD_KEY if n == 0 else _PLAIN)
_ODD_LEAF = st.sampled_from([2**64, -(2**63), 2**53, float("nan"), float("inf")]) | _ODD
#: The leaves every JSON parser reads alike (tests/interop hashes them in Node too).
IJSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53) + 1, 2**53 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    _PLAIN,
)
_LEAVES = st.integers(0, 7).flatmap(lambda n: _ODD_LEAF if n == 0 else IJSON_LEAVES)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)


@pytest.fixture
def stack(env, conn, tmp_path: Path) -> Iterator[tuple[Settings, Settings, dict]]:
    """(the asking side's settings with an archive, the decider's with a key, the JWKS)."""
    key = str(tmp_path / "signing.pem")
    keys.generate_key(key)
    url = f"sqlite:///{tmp_path / 'archive.db'}"
    archive.upgrade(url)
    asking = dataclasses.replace(Settings.from_env(), archive_url=url)
    deciding = dataclasses.replace(asking, signing_key=key)
    yield asking, deciding, keys.jwks(deciding)
    archive.close_shared()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(arguments=st.dictionaries(_TEXT, _VALUES, max_size=4))
def test_accepted_arguments_are_signed_and_read_back_identically_and_others_change_nothing(
    conn, stack, arguments
):
    """Any arguments ``external.ask`` (the API's and MCP's door; the gate's check is the same
    one) lets in can be decided, signed, verified, archived and read back byte for byte;
    anything else is refused, naming a field, before Redis changes at all."""
    asking, deciding, jwks = stack
    before = redis_state(conn, jobs=True)
    request = external.ExternalRequest(tool="sync", arguments=arguments, agent="prop")
    try:
        approval, _ = external.ask(conn, asking, request)
    except InvalidArguments as refused:
        event("refused")
        assert redis_state(conn, jobs=True) == before
        assert all(m.startswith("arguments") for m in refused.errors.values())
        return
    event("accepted")
    canonical = rfc8785.dumps(arguments)  # never fails for what was let in
    review.decide(conn, deciding, approval.id, DecisionKind.APPROVE, "UALICE")
    external.report_result(conn, asking, approval.id, True, "synced")
    token = store.records.load(conn, approval.id).receipt
    assert token is not None
    retention.sweep(conn, asking, now=time.time() + 31 * DAY)
    assert not conn.exists(store.keys.approval_key(approval.id))  # it is the archive's now

    found, _ = lookup.find_approval(conn, asking, approval.id)

    assert json.dumps(found.arguments, sort_keys=True) == json.dumps(arguments, sort_keys=True)
    assert rfc8785.dumps(found.arguments) == canonical
    verify_receipt(token, tool="sync", arguments=found.arguments, keys=jwks)
    lines = lookup.find_audit_lines(conn, asking, approval.id)
    assert audit.check_lines(approval.id, lines, jwks).ok
