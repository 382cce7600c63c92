"""External approvals in the core: created like a pause, decided by ``review``, handed to the
caller instead of resumed, and ended by the caller's report."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
import redis.asyncio as redis_async

from approvals import store
from approvals.calls import external
from approvals.calls.external import ExternalRequest
from approvals.config import Settings
from approvals.decisions import recovery
from approvals.decisions.review import decide
from approvals.errors import InvalidArguments, NotAllowed
from approvals.models import DecisionKind, GateOptions, Status
from approvals.store import queue

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def _ask(conn: redis.Redis, **fields: object) -> str:
    request = ExternalRequest(tool="scale", arguments={"n": 2}, agent="ops", **fields)  # type: ignore[arg-type]
    approval, created = external.ask(conn, Settings.from_env(), request)
    assert created
    return approval.id


def test_a_decision_wakes_the_caller_and_queues_no_resume(
    env: dict[str, str], conn: redis.Redis
) -> None:
    """The caller's blocking read returns at the decision; nothing is queued to resume."""
    settings = Settings.from_env()
    approval_id = _ask(conn, schema=SCHEMA)

    async def wait(block: float) -> bool:
        client = redis_async.Redis.from_url(env["REDIS_URL"])
        try:
            return await store.callers.wait_answer(client, approval_id, block)
        finally:
            await client.aclose()

    assert asyncio.run(wait(0.1)) is False
    decided = decide(conn, settings, approval_id, DecisionKind.EDIT, "UBOB", arguments={"n": 5})
    assert decided.status is Status.EDITED and asyncio.run(wait(5)) is True
    assert not queue.resume_queued(conn, approval_id)
    answer = external.answer(store.records.load(conn, approval_id))
    assert answer["decision"]["arguments"] == {"n": 5} and answer["receipt"] is None


def test_edits_are_checked_against_the_callers_schema(
    env: dict[str, str], conn: redis.Redis
) -> None:
    settings = Settings.from_env()
    approval_id = _ask(conn, schema=SCHEMA)
    with pytest.raises(InvalidArguments) as refused:
        decide(conn, settings, approval_id, DecisionKind.EDIT, "UBOB", arguments={"n": "five"})
    assert set(refused.value.errors) == {"n"}
    with pytest.raises(InvalidArguments):
        external.ask(conn, settings, ExternalRequest("scale", {"n": "x"}, "ops", schema=SCHEMA))


def test_the_result_is_reported_once_and_only_after_a_go(
    env: dict[str, str], conn: redis.Redis
) -> None:
    """Pending or rejected: nothing to report; approved: one report ends it."""
    settings = Settings.from_env()
    approval_id = _ask(conn)
    with pytest.raises(NotAllowed):
        external.report_result(conn, settings, approval_id, True, "done")
    decide(conn, settings, approval_id, DecisionKind.APPROVE, "UBOB")
    ended = external.report_result(conn, settings, approval_id, False, "exit 1")
    assert ended.status is Status.FAILED and ended.result is not None
    assert ended.result.error == "exit 1"
    with pytest.raises(NotAllowed):
        external.report_result(conn, settings, approval_id, True, "done")
    rejected = _ask(conn)
    decide(conn, settings, rejected, DecisionKind.REJECT, "UBOB", reason="no")
    with pytest.raises(NotAllowed):
        external.report_result(conn, settings, rejected, True, "done")


def test_the_same_idempotency_key_returns_the_first_approval(
    env: dict[str, str], conn: redis.Redis
) -> None:
    settings = Settings.from_env()
    request = ExternalRequest("scale", {"n": 2}, "ops", idempotency_key="k")
    first, created = external.ask(conn, settings, request)
    again, created_again = external.ask(conn, settings, request)
    other, _ = external.ask(
        conn, settings, ExternalRequest("scale", {"n": 2}, "dev", idempotency_key="k")
    )
    assert created and not created_again and first.id == again.id != other.id


def test_self_approval_and_quorum_apply(env: dict[str, str], conn: redis.Redis) -> None:
    """The same rules as a paused llm call: the requester may not decide; a quorum counts."""
    settings = Settings.from_env()
    approval_id = _ask(conn, requested_by="UALICE", options=GateOptions(approvals_required=2))
    with pytest.raises(NotAllowed):
        decide(conn, settings, approval_id, DecisionKind.APPROVE, "UALICE")
    assert (
        decide(conn, settings, approval_id, DecisionKind.APPROVE, "UBOB").status is Status.PENDING
    )
    assert (
        decide(conn, settings, approval_id, DecisionKind.APPROVE, "UCAROL").status
        is Status.APPROVED
    )


def test_recovery_never_queues_a_resume_for_one(env: dict[str, str], conn: redis.Redis) -> None:
    """A decided external approval with no resume job is not stranded: its caller acts."""
    settings = Settings.from_env()
    approval_id = _ask(conn)
    decide(conn, settings, approval_id, DecisionKind.APPROVE, "UBOB")
    conn.zadd(store.keys.DECIDED_KEY, {approval_id: time.time() - recovery.STRANDED_AFTER - 1})
    assert recovery.requeue_stranded(conn, settings) == []
    assert not queue.resume_queued(conn, approval_id)
