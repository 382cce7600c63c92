"""Whatever fails after a decision's compare-and-set, the decision is finished: audited (with
its receipt, or why there is none), its webhook sent, its caller woken or its resume run once,
its card redrawn; at once when the decider can, later by a worker's recovery when it cannot."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as redis_async
from click.testing import CliRunner
from rq.job import Job

from approvals import store
from approvals.calls import external
from approvals.cli.main import cli
from approvals.config import Settings
from approvals.decisions import recovery, review
from approvals.decisions.recovery import STRANDED_AFTER
from approvals.models import Decision, DecisionKind, Status, decision_to_dict
from approvals.proof import keys
from approvals.store import queue
from tests.e2e import (
    action_blocks,
    at_once,
    block_text,
    card_of,
    card_showing,
    click,
    pause,
    reply_containing,
    tool_runs,
    wait_status,
)
from tests.processes import bot_url, start_bot, start_worker, stop_all, wait_for_workers, wait_until
from tests.proof.test_webhooks import SECRET, Receiver


def _pause(path: str = "old.csv") -> str:
    return pause("delete_path", {"path": path})


def _ask(conn: redis.Redis, tool: str = "deploy_web") -> str:
    request = external.ExternalRequest(tool=tool, arguments={"env": "prod"}, agent="deployer")
    approval, _ = external.ask(conn, Settings.from_env(), request)
    return approval.id


@contextmanager
def _stack(
    env: dict[str, str], folder: Path, bot_env: dict[str, str], worker_env: dict[str, str]
) -> Iterator[str]:
    """A bot (``bot_env`` added) and a worker (``worker_env`` added); yields the bot's URL."""
    bot = start_bot({**env, **bot_env}, folder / "bot.log")
    worker_vars = {**env, **worker_env}
    worker = start_worker(worker_vars, folder / "worker.log", f"w-{secrets.token_hex(4)}")
    try:
        url = bot_url(bot)
        wait_for_workers(worker_vars, [worker], 1)
        yield url
    finally:
        stop_all([bot, worker])


def _long_ago(conn: redis.Redis, approval_id: str) -> None:
    """Time passes: the decision is older than a live decider would ever take."""
    then = time.time() - STRANDED_AFTER - 1
    for key in (store.keys.OWED_KEY, store.keys.DECIDED_KEY):
        conn.zadd(key, {approval_id: then}, xx=True)


def _entries(conn: redis.Redis, approval_id: str, event: str) -> list[dict[str, str]]:
    return [e for e in store.audit.audit_trail(conn, approval_id) if e["event"] == event]


def _verify(approval_id: str) -> tuple[int, str]:
    """``approvals show --verify``: its exit code and everything it said."""
    result = CliRunner().invoke(cli, ["show", "--verify", approval_id])
    return result.exit_code, result.output + (result.stderr or "")


# --- signing fails --------------------------------------------------------------------------------


def test_a_receipt_the_arguments_cannot_be_signed_for_is_audited_as_such_and_the_run_goes_on(
    env, conn, slack, tmp_path
):
    """An approval an older version let in with a 64-bit integer: the bot's signing fails
    after the decision, which is still audited, saying why it has no receipt, shown on the
    card and run once; ``show --verify`` reports it instead of saying "verified"."""
    key = str(tmp_path / "signing.pem")
    keys.generate_key(key)
    with _stack(env, tmp_path, {"APPROVALS_SIGNING_KEY": key}, {}) as bot:
        pause_id = _pause()
        card = card_of(slack, pause_id)
        record = json.loads(conn.hget(store.keys.approval_key(pause_id), "record"))
        record["arguments"]["inode"] = 2**64  # as stored before arguments were checked
        conn.hset(store.keys.approval_key(pause_id), "record", json.dumps(record))
        click(slack, bot, "approve", pause_id, "UALICE", card.ts)
        wait_status(conn, pause_id, Status.COMPLETED)
        card_showing(slack, card.ts, "Completed")
    _assert_unsigned_but_done(env, conn, pause_id, "cannot be canonicalized")


def test_a_receipt_a_broken_key_cannot_sign_is_audited_as_such_and_the_run_goes_on(
    services, env, conn, slack, tmp_path
):
    """A decider whose key file is not a key (a library caller; the bot and the CLI refuse
    to start with one): the decision is audited without a receipt, saying why, and runs."""
    broken = tmp_path / "broken.pem"
    broken.write_text("not a key")
    decider = dataclasses.replace(Settings.from_env(), signing_key=str(broken))
    pause_id = _pause()
    card_of(slack, pause_id)
    review.decide(conn, decider, pause_id, DecisionKind.APPROVE, "UALICE")
    wait_status(conn, pause_id, Status.COMPLETED)
    _assert_unsigned_but_done(env, conn, pause_id, "is not a PEM private key")


def _assert_unsigned_but_done(
    env: dict[str, str], conn: redis.Redis, pause_id: str, why: str
) -> None:
    [approved] = _entries(conn, pause_id, "approved")
    assert approved["receipt_error"].startswith("receipt could not be signed: "), approved
    assert why in approved["receipt_error"]
    assert "receipt" not in approved and store.records.load(conn, pause_id).receipt is None
    assert [r["arguments"]["path"] for r in tool_runs(env, "delete_path")] == ["old.csv"]
    code, said = _verify(pause_id)
    assert code == 1 and "receipt could not be signed" in said and "verified:" not in said


# --- Redis refuses what follows the decision ------------------------------------------------------


@pytest.fixture
def refusing(env, conn, tmp_path, monkeypatch) -> Iterator[tuple[str, Receiver]]:
    """A bot whose Redis user may record a decision but not append anything after it (no
    RPUSH, no XADD: no audit entry, no job, no answer for a waiting caller), and a worker
    that may, posting webhooks to a receiver; yields the bot's URL and the receiver."""
    user, password = f"decider-{secrets.token_hex(3)}", secrets.token_hex(8)
    conn.execute_command(
        "ACL", "SETUSER", user, "reset", "on", f">{password}", "~*", "&*", "+@all",
        "-rpush", "-xadd",
    )  # fmt: skip
    receiver = Receiver(failures=0)
    hooks = {"APPROVALS_WEBHOOK_URLS": receiver.url, "APPROVALS_WEBHOOK_SECRET": SECRET}
    for name, value in hooks.items():
        monkeypatch.setenv(name, value)
    limited = env["REDIS_URL"].replace("redis://", f"redis://{user}:{password}@")
    try:
        with _stack(env, tmp_path, {**hooks, "REDIS_URL": limited}, hooks) as bot:
            yield bot, receiver
    finally:
        conn.execute_command("ACL", "DELUSER", user)
        receiver.server.shutdown()
        receiver.server.server_close()


def _decided_deliveries(receiver: Receiver) -> list[dict[str, Any]]:
    found = []
    for status, _, body in list(receiver.requests):
        event = json.loads(body)
        if status == 204 and event["type"] == "approval.decided":
            found.append(event)
    return found


def test_a_decision_redis_refused_to_carry_out_is_finished_by_a_worker_once(
    refusing, env, conn, slack
):
    """The decision is recorded, then Redis refuses the decider's next step: a worker
    audits it (once), sends its webhook (once) and runs the resume (once)."""
    bot, receiver = refusing
    pause_id = _pause()
    card = card_of(slack, pause_id)
    click(slack, bot, "approve", pause_id, "UALICE", card.ts)
    wait_until(lambda: store.owed.owing(conn, [pause_id]), 20, "the decision to be recorded")
    assert _entries(conn, pause_id, "approved") == []  # the decider could not write it
    assert store.records.load(conn, pause_id).status is Status.APPROVED
    code, said = _verify(pause_id)
    assert code == 1 and "not yet what follows it" in said

    _long_ago(conn, pause_id)

    wait_status(conn, pause_id, Status.COMPLETED, timeout=60)
    [approved] = _entries(conn, pause_id, "approved")
    assert (approved["actor"], approved["finished_by"]) == ("UALICE", review.LATE)
    assert len(_entries(conn, pause_id, "resume_started")) == 1
    assert len(tool_runs(env, "delete_path")) == 1
    wait_until(lambda: _decided_deliveries(receiver), 30, "the decision's webhook")
    assert [e["data"]["id"] for e in _decided_deliveries(receiver)] == [pause_id]
    assert store.metrics.metric_values(conn)["decisions:approve"] == 1
    assert not store.owed.owing(conn, [pause_id])
    assert _verify(pause_id)[0] == 0


def test_an_external_caller_is_woken_though_its_decider_could_not_wake_it(
    refusing, env, conn, slack
):
    """An API caller waits; the decider records the decision but cannot wake it: a worker
    audits the decision and wakes the caller, once."""
    bot, receiver = refusing
    approval_id = _ask(conn)
    card = card_of(slack, approval_id)
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(_wait_answer(env, approval_id, 90)))
    waiter.start()
    click(slack, bot, "approve", approval_id, "UALICE", card.ts)
    card_showing(slack, card.ts, "Approved")
    assert store.owed.owing(conn, [approval_id]) and waiter.is_alive()
    assert _as_the_api_answers(conn, approval_id)["status"] == "pending"

    _long_ago(conn, approval_id)

    waiter.join(90)
    assert woken == [True]
    answered = _as_the_api_answers(conn, approval_id)
    assert answered["status"] == "approved" and answered["decision"]["actor"] == "UALICE"
    [approved] = _entries(conn, approval_id, "approved")
    assert approved["finished_by"] == review.LATE
    assert conn.xlen(store.keys.answer_key(approval_id)) == 1
    wait_until(lambda: _decided_deliveries(receiver), 30, "the decision's webhook")
    assert len(_decided_deliveries(receiver)) == 1


def _as_the_api_answers(conn: redis.Redis, approval_id: str) -> dict[str, Any]:
    """What ``GET /v1/approvals/{id}`` answers about the approval now."""
    return external.answer(external.as_caller_sees(conn, store.records.load(conn, approval_id)))


def _wait_answer(env: dict[str, str], approval_id: str, block: float) -> bool:
    """What the API's ``GET ?wait=`` does: block on the approval's answer stream."""

    async def wait() -> bool:
        aconn = redis_async.Redis.from_url(env["REDIS_URL"])
        try:
            return await store.callers.wait_answer(aconn, approval_id, block)
        finally:
            await aconn.aclose()

    return asyncio.run(wait())


# --- Slack refuses the redraw ---------------------------------------------------------------------


def test_a_card_slack_would_not_redraw_is_redrawn_later_with_one_reply(services, slack, env, conn):
    """Slack fails every attempt of the decider's redraw: the card keeps its buttons until a
    worker sees that it does not show the decision, and redraws it, replying once."""
    approval_id = _ask(conn)
    card = card_of(slack, approval_id)
    slack.fail_next("chat.update", count=3, status=500)  # the redraw and both of its retries
    click(slack, services.bot_url, "approve", approval_id, "UALICE", card.ts)
    wait_until(
        lambda: [c["status"] for c in slack.calls("chat.update")] == [500, 500, 500],
        30,
        "the redraw to fail",
    )
    assert action_blocks(slack.message(card.channel, card.ts))  # the buttons are still there
    assert store.records.load(conn, approval_id).status is Status.APPROVED

    conn.zadd(store.keys.UNSHOWN_KEY, {approval_id: time.time() - 1}, xx=True)  # time passes

    shown = card_showing(slack, card.ts, "Approved")
    assert not action_blocks(shown)
    reply = reply_containing(slack, card.ts, "Approved")
    wait_until(lambda: not conn.zscore(store.keys.UNSHOWN_KEY, approval_id), 20, "the note cleared")
    replies = [m for m in slack.thread(card.channel, card.ts) if "Approved" in block_text(m)]
    assert [m.ts for m in replies] == [reply.ts]


# --- exactly once ---------------------------------------------------------------------------------


def test_workers_and_a_late_decider_finish_a_decision_exactly_once(
    services, slack, env, conn, tmp_path
):
    """The decider stalls while signing (its key is a pipe nobody writes yet); two workers'
    recovery finish the decision, without a receipt, and the run goes on; when the decider
    finally signs, it finds the decision finished and adds nothing."""
    services.workers.append(start_worker(env, tmp_path / "worker2.log", "w-second"))
    wait_for_workers(env, services.workers, 2)
    real = tmp_path / "real.pem"
    keys.generate_key(real)
    stalled = tmp_path / "stalled.pem"
    os.mkfifo(stalled)
    decider = dataclasses.replace(Settings.from_env(), signing_key=str(stalled))
    pause_id = _pause()
    card_of(slack, pause_id)
    done: list[Any] = []
    deciding = threading.Thread(
        target=lambda: done.append(
            review.decide(conn, decider, pause_id, DecisionKind.APPROVE, "UALICE")
        ),
        daemon=True,  # should the test fail before the pipe is written, it must not hang
    )
    deciding.start()
    wait_until(lambda: store.owed.owing(conn, [pause_id]), 20, "the decision to be recorded")

    _long_ago(conn, pause_id)
    wait_status(conn, pause_id, Status.COMPLETED, timeout=60)
    with open(stalled, "wb") as pipe:  # the decider's signing goes on, and ends
        pipe.write(real.read_bytes())
    deciding.join(30)

    assert [a.status for a in done] == [Status.COMPLETED]
    [approved] = _entries(conn, pause_id, "approved")
    assert approved["finished_by"] == review.LATE
    assert approved["receipt_error"] == review.UNSIGNED
    assert store.records.load(conn, pause_id).receipt is None  # signed too late to be kept
    assert len(_entries(conn, pause_id, "resume_started")) == 1
    assert len(tool_runs(env, "delete_path")) == 1
    assert store.metrics.metric_values(conn)["decisions:approve"] == 1


def test_many_at_once_carry_a_decision_out_once(env, conn):
    """Eight workers try at the same moment: one carries the decision out, with one audit
    entry, one resume job and one count; the others find it done."""
    settings = Settings.from_env()
    pause_id = _pause()
    approval = store.records.load(conn, pause_id)
    decision = Decision(DecisionKind.APPROVE, "UALICE", time.time(), arguments=approval.arguments)
    encoded = json.dumps(decision_to_dict(decision))
    assert (
        store.transitions.vote(conn, pause_id, Status.APPROVED, "UALICE", 1, encoded).outcome
        == "decided"
    )

    did = at_once(*[lambda: review.complete(conn, settings, pause_id) for _ in range(8)])

    assert sorted(did) == [False] * 7 + [True]
    assert len(_entries(conn, pause_id, "approved")) == 1
    assert Job.exists(f"resume-{pause_id}", connection=conn)
    assert queue.get_queue(conn, settings).count == 2  # the card, and the one resume
    assert store.metrics.metric_values(conn)["decisions:approve"] == 1
    assert conn.zscore(store.keys.OWED_KEY, pause_id) is None


def test_workers_at_once_queue_one_redraw_and_give_up_on_a_card_after_a_day(env, conn):
    """Four workers look at an unshown decision at once: one redraw job is queued. A decision
    a day old whose card still does not show it is let go."""
    settings = Settings.from_env()
    approval_id = _ask(conn)
    store.records.set_card(conn, approval_id, "1700000000.000100")
    decision = Decision(DecisionKind.APPROVE, "UALICE", time.time(), arguments={"env": "prod"})
    encoded = json.dumps(decision_to_dict(decision))
    assert store.transitions.vote(conn, approval_id, Status.APPROVED, "UALICE", 1, encoded).outcome
    assert review.complete(conn, settings, approval_id)
    conn.zadd(store.keys.UNSHOWN_KEY, {approval_id: time.time() - 1}, xx=True)

    queued = at_once(*[lambda: recovery.show_decisions(conn, settings) for _ in range(4)])

    assert [i for ids in queued for i in ids] == [approval_id]
    announces = [j for j in queue.get_queue(conn, settings).job_ids if j.startswith("announce-")]
    assert len(announces) == 1
    old = dataclasses.replace(decision, at=time.time() - recovery.SHOW_FOR - 1)
    conn.hset(store.keys.approval_key(approval_id), "decision", json.dumps(decision_to_dict(old)))
    conn.zadd(store.keys.UNSHOWN_KEY, {approval_id: time.time() - 1}, xx=True)
    assert recovery.show_decisions(conn, settings) == []
    assert conn.zscore(store.keys.UNSHOWN_KEY, approval_id) is None
