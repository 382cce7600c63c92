"""Helpers for end-to-end tests: act like Slack users against a running bot."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis

from approvals import run_agent, store
from approvals.bot.modals import (
    EDIT_VIEW,
    REASON_BLOCK,
    REJECT_VIEW,
    RESPOND_VIEW,
    RESPONSE_BLOCK,
    VALUE_ACTION,
)
from approvals.bot.pending import NEXT_PAGE_ACTION
from approvals.models import Approval, Status
from approvals.models.grant import Scope
from approvals.slack.cards import (
    APPROVE_ACTION,
    APPROVE_SCOPE_ACTION,
    EDIT_ACTION,
    REJECT_ACTION,
    RESPOND_ACTION,
)
from tests.agents import tools as agent_tools
from tests.agents.scripted import calls, say, script
from tests.conftest import CHANNEL, SIGNING_SECRET, read_jsonl, wait_until
from tests.slack_requests import (
    block_actions_payload,
    send_command,
    send_interaction,
    slash_command_form,
    view_submission_payload,
)
from tests.slack_standin import Message, SlackStandIn

T = TypeVar("T")

ACTIONS = {
    "approve": APPROVE_ACTION,
    "reject": REJECT_ACTION,
    "edit": EDIT_ACTION,
    "respond": RESPOND_ACTION,
}


def pause(
    tool: str = "delete_path",
    arguments: dict[str, Any] | None = None,
    *,
    tools: Sequence[Any] = (agent_tools.delete_path,),
    answer: str = "done: {results}",
    **run: Any,
) -> str:
    """Run the scripted agent until it pauses at ``tool(arguments)`` (``run`` goes to
    ``run_agent``: agent, requested_by...); returns the pause id."""
    prompt = script(
        calls((tool, {"path": "build"} if arguments is None else arguments)), say(answer)
    )
    outcome = run_agent("scripted", prompt, tools=list(tools), **run)
    assert outcome.status == "paused" and outcome.pause_id, outcome
    return outcome.pause_id


def card_of(slack: SlackStandIn, approval_id: str) -> Message:
    """The card posted for ``approval_id`` (waits for it)."""

    def find() -> Message | None:
        for message in slack.messages(CHANNEL):
            if any(_has_value(block, approval_id) for block in message.blocks):
                return message
        return None

    return wait_until(find, 20, f"the card of {approval_id}")


def _has_value(block: dict[str, Any], value: str) -> bool:
    return (
        (
            block.get("type") == "actions"
            and any(e.get("value") == value for e in block.get("elements", []))
        )
        or block.get("block_id", "").endswith(value)
        or value in str(block.get("block_id", ""))
    )


def click(
    slack: SlackStandIn,
    bot_url: str,
    action: str,
    approval_id: str,
    user: str = "UALICE",
    card_ts: str | None = None,
) -> tuple[int, str]:
    payload = block_actions_payload(
        user_id=user,
        action_id=ACTIONS[action],
        value=approval_id,
        channel_id=CHANNEL,
        message_ts=card_ts,
        response_url=slack.new_response_url(),
    )
    return send_interaction(bot_url, SIGNING_SECRET, payload)


def approve_on_card(
    slack: SlackStandIn, bot_url: str, approval_id: str, user: str = "UALICE"
) -> None:
    """Click Approve on the approval's card as ``user``; the bot answers 200."""
    card = card_of(slack, approval_id)
    status, _ = click(slack, bot_url, "approve", approval_id, user, card_ts=card.ts)
    assert status == 200


def choose_scope(
    bot_url: str, approval_id: str, scope: Scope, card_ts: str, user: str = "UALICE"
) -> int:
    """Pick ``scope`` in the card's menu beside Approve (approve, and grant what it covers)."""
    payload = block_actions_payload(
        user_id=user, action_id=APPROVE_SCOPE_ACTION, value="", message_ts=card_ts
    )
    payload["actions"][0] = {
        "type": "static_select",
        "action_id": APPROVE_SCOPE_ACTION,
        "block_id": f"decide-{approval_id}",
        "selected_option": {"value": f"{approval_id}:{scope.value}"},
        "action_ts": f"{time.time():.6f}",
    }
    status, _ = send_interaction(bot_url, SIGNING_SECRET, payload)
    return status


def scope_labels(message: Message) -> list[str]:
    """The options of the card's menu beside Approve (empty: it offers none)."""
    return [
        option["text"]["text"]
        for block in message.blocks
        if block.get("type") == "actions"
        for element in block.get("elements", [])
        if element.get("action_id") == APPROVE_SCOPE_ACTION
        for option in element.get("options", [])
    ]


def select(value: str) -> dict[str, Any]:
    """The state Slack sends for a static_select whose option value is ``value``."""
    return {"type": "static_select", "selected_option": {"value": value}}


def submit_edit(
    bot_url: str, approval_id: str, values: dict[str, Any], user: str = "UALICE"
) -> tuple[int, str]:
    """Submit the Edit modal; a str value is typed text, a dict is an element's raw state."""
    state = {
        f"arg-{name}": {
            VALUE_ACTION: value
            if isinstance(value, dict)
            else {"type": "plain_text_input", "value": value}
        }
        for name, value in values.items()
    }
    payload = view_submission_payload(
        user_id=user, callback_id=EDIT_VIEW, private_metadata=approval_id, values=state
    )
    return send_interaction(bot_url, SIGNING_SECRET, payload)


def submit_reject(
    bot_url: str, approval_id: str, reason: str | None, user: str = "UALICE"
) -> tuple[int, str]:
    state = {REASON_BLOCK: {VALUE_ACTION: {"type": "plain_text_input", "value": reason}}}
    payload = view_submission_payload(
        user_id=user, callback_id=REJECT_VIEW, private_metadata=approval_id, values=state
    )
    return send_interaction(bot_url, SIGNING_SECRET, payload)


def submit_respond(
    bot_url: str, approval_id: str, text: str, user: str = "UALICE"
) -> tuple[int, str]:
    state = {RESPONSE_BLOCK: {VALUE_ACTION: {"type": "plain_text_input", "value": text}}}
    payload = view_submission_payload(
        user_id=user, callback_id=RESPOND_VIEW, private_metadata=approval_id, values=state
    )
    return send_interaction(bot_url, SIGNING_SECRET, payload)


def click_next(
    slack: SlackStandIn, bot_url: str, answer: dict[str, Any], user: str = "UALICE"
) -> tuple[int, str]:
    """Press the Next button of a /agent-pending answer."""
    (value,) = [
        e["value"]
        for b in answer["blocks"]
        if b["type"] == "actions"
        for e in b["elements"]
        if e["action_id"] == NEXT_PAGE_ACTION
    ]
    payload = block_actions_payload(
        user_id=user,
        action_id=NEXT_PAGE_ACTION,
        value=value,
        channel_id=CHANNEL,
        container_type="message",
        response_url=answer["response_url"],
    )
    return send_interaction(bot_url, SIGNING_SECRET, payload)


def pending_command(
    slack: SlackStandIn, bot_url: str, user: str = "UALICE", text: str = ""
) -> tuple[int, str, str]:
    response_url = slack.new_response_url()
    form = slash_command_form(
        user_id=user, text=text, channel_id=CHANNEL, response_url=response_url
    )
    status, body = send_command(bot_url, SIGNING_SECRET, form)
    return status, body, response_url


def wait_status(
    conn: redis.Redis, approval_id: str, *statuses: Status, timeout: float = 30
) -> Approval:
    def reached() -> Approval | None:
        approval = store.records.load(conn, approval_id)
        return approval if approval.status in statuses else None

    return wait_until(reached, timeout, f"approval {approval_id} to be {statuses}")


def tool_runs(env: dict[str, str], tool: str | None = None) -> list[dict[str, Any]]:
    return [r for r in read_jsonl(env["TOOL_LEDGER"]) if tool is None or r["tool"] == tool]


def model_calls(env: dict[str, str]) -> list[dict[str, Any]]:
    return read_jsonl(env["SCRIPTED_LEDGER"])


def tool_results_seen(call: dict[str, Any]) -> list[tuple[str, str]]:
    """(tool name, output) of every tool result in the messages a model call received."""
    return [
        (part["name"], part["output"])
        for message in call["messages"]
        if message["role"] == "tool"
        for part in message["parts"]
    ]


def action_blocks(message: Message) -> list[dict[str, Any]]:
    return [b for b in message.blocks if b.get("type") == "actions"]


def approve_values(blocks: list[dict[str, Any]]) -> list[str]:
    """The approval ids behind the Approve buttons of these blocks, in order."""
    return [
        element["value"]
        for block in blocks
        if block.get("type") == "actions"
        for element in block.get("elements", [])
        if element.get("action_id") == APPROVE_ACTION
    ]


def settled(snapshot: Callable[[], T], interval: float = 0.4, timeout: float = 30.0) -> T:
    """``snapshot()`` once two readings ``interval`` apart agree (work after an answer is
    asynchronous, so "nothing changed" can only be read once nothing changes any more);
    fails the test if it is still changing at ``timeout``."""
    deadline = time.monotonic() + timeout
    previous = None
    while (current := snapshot()) != previous:
        if time.monotonic() > deadline:
            raise AssertionError(f"still changing after {timeout}s: {current!r}"[:2000])
        previous = current
        time.sleep(interval)
    return current


def block_text(message: Message) -> str:
    """All the visible text of a message's blocks, for assertions."""
    out: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("text"), str):
                out.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(message.blocks)
    return "\n".join(out)


def reply_containing(slack: SlackStandIn, card_ts: str, text: str) -> Message:
    """The first reply in the card's thread whose blocks contain ``text`` (waits for it)."""

    def find() -> Message | None:
        return next((m for m in slack.thread(CHANNEL, card_ts) if text in block_text(m)), None)

    return wait_until(find, 20, f"a thread reply containing {text!r}")


def card_showing(slack: SlackStandIn, card_ts: str, text: str) -> Message:
    """The card once its blocks contain ``text`` (waits for the update)."""

    def find() -> Message | None:
        card = slack.message(CHANNEL, card_ts)
        return card if text in block_text(card) else None

    return wait_until(find, 20, f"the card to show {text!r}")


def at_once(*actions: Any) -> list[Any]:
    """Run the callables in threads released at the same instant; their results, in order."""
    barrier = threading.Barrier(len(actions))
    results: list[Any] = [None] * len(actions)

    def run(index: int, action: Any) -> None:
        barrier.wait()
        results[index] = action()

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(actions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


#: ``APPROVALS_LEASE`` for tests that kill a worker mid-run: its run is found dead seconds
#: after the kill instead of a quarter minute (the default), while a live run, renewing every
#: two seconds, keeps its lease on a loaded machine.
SHORT_LEASE = {"APPROVALS_LEASE": "6"}


def kill_worker(services: Any, horse_pid: int | None) -> None:
    """The machine dies: the work-horse (RQ gives it its own session), the worker and its
    scheduler, all at once, with SIGKILL. ``horse_pid`` None: the worker runs no job."""
    import os
    import signal

    (worker,) = services.workers
    if horse_pid is not None:
        os.kill(horse_pid, signal.SIGKILL)
    os.killpg(worker.popen.pid, signal.SIGKILL)
    worker.stop()


def dead_workers_claims_lapse(conn: redis.Redis) -> None:
    """Time passes: what a dead worker held for a limited time lapses, as it would about a
    minute later (RQ keeps each claim that long past its last renewal): RQ's heartbeat for
    every job it was running, so the next worker's maintenance takes them for abandoned, and
    its scheduler's lock, so the next worker's scheduler moves retries that are due."""
    from rq.registry import StartedJobRegistry
    from rq.scheduler import RQScheduler

    from approvals.config import Settings
    from approvals.store.queue import get_queue

    queue = get_queue(conn, Settings.from_env())
    registry = StartedJobRegistry(queue=queue)
    past = time.time() - 1
    for entry in conn.zrange(registry.key, 0, -1):
        conn.zadd(registry.key, {entry: past}, xx=True)
    conn.delete(RQScheduler.get_locking_key(queue.name))


def replace_worker(services: Any, env: dict[str, str], log: Any) -> None:
    """A new worker takes the dead one's place (and its recovery starts)."""
    from tests.processes import start_worker, wait_for_workers

    services.workers = [start_worker(env, log, f"w2-{time.time_ns()}")]
    wait_for_workers(env, services.workers, 1)


#: Keys the workers keep up to date on their own, whatever a request does: the metrics'
#: counters, retention's indexes and lock, how far the outcome sweep looked, the webhooks'
#: outbox. A "changes nothing" check leaves them out.
BOOKKEEPING = frozenset(
    key.encode()
    for key in (
        store.keys.METRICS_KEY,
        store.keys.ENDED_KEY,
        store.keys.FINISHED_KEY,
        store.keys.FINISHED_HISTORY_KEY,
        store.keys.RETENTION_LOCK_KEY,
        store.keys.ENDS_CHECKED_KEY,
        store.keys.EVENTS_KEY,
        store.keys.EVENTS_TAKING_KEY,
        # `approvals dev`'s own record: a heartbeat, renewed whatever anyone asks.
        store.keys.DEV_KEY,
    )
)
#: The live workers' advertised tool modules (one key per queue): heartbeats too.
HEARTBEATS = store.keys.tool_modules_key("").encode()


def redis_state(conn: Any, *, seen: bool = True, jobs: bool = False) -> dict[bytes, Any]:
    """Every approvals key's content, for a "changes nothing" check.

    Leaves out BOOKKEEPING; ``seen=False`` also leaves out the replay guard's record of
    signatures (a rejected request may add one); ``jobs`` adds RQ's job keys.
    """
    keys = sorted(conn.keys("approvals:*"))
    if not seen:
        keys = [k for k in keys if not k.startswith(store.keys.seen_key("").encode())]
    if jobs:
        keys += sorted(conn.keys("rq:job:*"))
    keys = [k for k in keys if k not in BOOKKEEPING and not k.startswith(HEARTBEATS)]
    return {key: key_value(conn, key) for key in keys}


def key_value(conn: Any, key: bytes | str) -> Any:
    """What a key holds, by its type: compared as content, not as DUMP's bytes, which change
    when Redis merely rehashes a large hash or set while it is read."""
    kind = conn.type(key)
    if kind == b"hash":
        return conn.hgetall(key)
    if kind == b"set":
        return conn.smembers(key)
    if kind == b"zset":
        return conn.zrange(key, 0, -1, withscores=True)
    if kind == b"list":
        return conn.lrange(key, 0, -1)
    if kind == b"stream":
        return conn.xrange(key)
    return conn.get(key) if kind == b"string" else None
