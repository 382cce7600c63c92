"""The outcome comes back: ``wait``, ``run_agent(wait=True)``, ``on_finish``, ``approvals
result``, against the real bot, worker and Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner

from approvals import GateError, run_agent, store, wait
from approvals.cli.main import cli
from approvals.decisions.recovery import STRANDED_AFTER
from approvals.models import Status
from approvals.models.outcome import Outcome
from approvals.store import queue
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path, drop_table, list_files, rotate_key, send_email
from tests.conftest import wait_until
from tests.e2e import approve_on_card, card_of, submit_reject, tool_runs, wait_status

TOOLS = [list_files, delete_path, send_email, drop_table, rotate_key]
DELETE = script(calls(("delete_path", {"path": "build"})), say("Finished: {results}"))
TWO_PAUSES = script(
    calls(("delete_path", {"path": "a"})),
    calls(("send_email", {"to": "ops@example.com", "subject": "cleaned"})),
    say("All done: {results}"),
)


def _pause(prompt: str = DELETE, **kw):
    outcome = run_agent("scripted", prompt, tools=TOOLS, **kw)
    assert outcome.status == "paused" and outcome.run_id
    return outcome


def _waiting(pause_id, **kw):
    """Run ``wait`` in a thread; returns the thread and the list its outcome lands in."""
    found: list = []
    thread = threading.Thread(target=lambda: found.append(wait(pause_id, **kw)), daemon=True)
    thread.start()
    return thread, found


def test_wait_returns_the_completed_text_after_an_approve_click(services, slack, env, conn):
    """wait() blocks until the worker finished the run, then returns its final answer."""
    paused = _pause()
    thread, found = _waiting(paused.pause_id, timeout=60)
    approve_on_card(slack, services.bot_url, paused.pause_id)
    thread.join(60)
    (outcome,) = found
    assert outcome.status == "completed" and "deleted build" in outcome.text
    assert outcome.run_id == paused.run_id
    (call,) = outcome.calls
    assert call.tool == "delete_path" and call.ran_with == {"path": "build"}
    assert call.output == "deleted build"
    assert call.decision.actor == "UALICE" and call.decision.kind.value == "approve"


def test_follow_goes_through_two_pauses_to_one_final_outcome(services, slack, env, conn):
    """Two cards of one run, both approved: one outcome, both calls and decisions, one run_id."""
    paused = _pause(TWO_PAUSES)
    thread, found = _waiting(paused.pause_id, timeout=60)
    approve_on_card(slack, services.bot_url, paused.pause_id)
    second = wait_status(conn, paused.pause_id, Status.PAUSED).result.next_approval_id
    assert store.records.load(conn, second).run_id == paused.run_id
    assert thread.is_alive()  # the run paused again: not its end
    approve_on_card(slack, services.bot_url, second)
    thread.join(60)
    (outcome,) = found
    assert outcome.status == "completed" and "sent to ops@example.com" in outcome.text
    assert [c.tool for c in outcome.calls] == ["delete_path", "send_email"]
    assert [c.pause_id for c in outcome.calls] == [paused.pause_id, second]
    assert [d.actor for d in outcome.decisions] == ["UALICE", "UALICE"]
    assert outcome.run_id == paused.run_id


def test_without_follow_wait_returns_at_the_next_pause(services, slack, env, conn):
    """follow=False: the resume paused again, so wait returns the pause now waiting."""
    paused = _pause(TWO_PAUSES)
    thread, found = _waiting(paused.pause_id, timeout=60, follow=False)
    approve_on_card(slack, services.bot_url, paused.pause_id)
    thread.join(60)
    (outcome,) = found
    second = store.records.load(conn, paused.pause_id).result.next_approval_id
    assert outcome.status == "paused" and outcome.pause_id == second


def test_a_rejection_with_on_reject_stop_gives_stopped_with_who_and_why(services, slack, conn):
    """on_reject="stop": the run ends at the rejection; the outcome says who and why."""
    paused = _pause(script(calls(("drop_table", {"name": "users"})), say("dropped")))
    thread, found = _waiting(paused.pause_id, timeout=60)
    card_of(slack, paused.pause_id)
    status, _ = submit_reject(services.bot_url, paused.pause_id, "not in production")
    assert status == 200
    thread.join(60)
    (outcome,) = found
    assert outcome.status == "stopped"
    assert outcome.stopped_by in ("UALICE", "ualice") and outcome.reason == "not in production"
    assert outcome.calls[0].ran_with is None


def test_a_timeout_returns_the_current_state_fast(env, conn):
    """Nobody decided: the timeout returns "paused" with the pause waiting, not an exception."""
    paused = _pause()
    started = time.monotonic()
    outcome = wait(paused.pause_id, timeout=0.3)
    assert time.monotonic() - started < 3
    assert outcome.status == "paused" and outcome.pause_id == paused.pause_id
    assert outcome.run_id == paused.run_id and outcome.calls[0].decision is None


def test_a_wait_longer_than_redis_pys_read_timeout_is_not_an_error(env, conn):
    """redis-py stops reading a socket after 5 s by default; a quiet run's wait blocks longer
    than that in one read, and must still come back with the state, not a TimeoutError."""
    paused = _pause()
    outcome = wait(paused.pause_id, timeout=7)
    assert outcome.status == "paused" and outcome.pause_id == paused.pause_id


def _last_line(code: str) -> str:
    """Run ``code`` in a new Python process, which then exits; the last line it printed."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip().splitlines()[-1]


def test_wait_from_a_fresh_process_after_the_pausing_one_exited(services, slack, env, conn):
    """The agent process exits at the pause; another process started later gets the outcome."""
    code = (
        "from approvals import run_agent; from tests.agents.tools import delete_path;"
        f"print(run_agent('scripted', {DELETE!r}, tools=[delete_path]).pause_id)"
    )
    pause_id = _last_line(code)
    approve_on_card(slack, services.bot_url, pause_id)
    wait_status(conn, pause_id, Status.COMPLETED)
    code = (
        "import json; from approvals import wait;"
        f"print(json.dumps(wait({pause_id!r}, timeout=30).to_dict()))"
    )
    outcome = json.loads(_last_line(code))
    assert outcome["status"] == "completed" and "deleted build" in outcome["text"]


def test_a_process_started_after_the_agent_exited_waits_through_both_pauses(
    services, slack, env, conn
):
    """The agent process exits at the first pause; a new process calls wait() while the run
    still waits, blocks through both decisions, and prints the final outcome."""
    code = (
        "from approvals import run_agent; from tests.agents.tools import delete_path, send_email;"
        f"print(run_agent('scripted', {TWO_PAUSES!r}, tools=[delete_path, send_email]).pause_id)"
    )
    pause_id = _last_line(code)
    code = (
        "import json; from approvals import wait;"
        f"print(json.dumps(wait({pause_id!r}, timeout=60).to_dict()))"
    )
    waiter = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        approve_on_card(slack, services.bot_url, pause_id)
        second = wait_status(conn, pause_id, Status.PAUSED).result.next_approval_id
        card_of(slack, second)
        assert waiter.poll() is None  # still waiting: a pause is not the end
        approve_on_card(slack, services.bot_url, second)
        out, err = waiter.communicate(timeout=60)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    assert waiter.returncode == 0, err
    outcome = json.loads(out.strip().splitlines()[-1])
    assert outcome["status"] == "completed" and "sent to ops@example.com" in outcome["text"]
    assert [c["tool"] for c in outcome["calls"]] == ["delete_path", "send_email"]
    assert outcome["pause_id"] == second


def test_run_agent_wait_true_returns_the_final_outcome(services, slack, env, conn):
    """run_agent(wait=True) in a thread blocks through the click and returns the end."""
    found: list = []

    def agent() -> None:
        found.append(run_agent("scripted", DELETE, tools=TOOLS, wait=True, timeout=60))

    thread = threading.Thread(target=agent, daemon=True)
    thread.start()
    pause_id = wait_until(lambda: store.pending.pending(conn), 20, "the pause")[0].id
    approve_on_card(slack, services.bot_url, pause_id)
    thread.join(60)
    (outcome,) = found
    assert outcome.status == "completed" and "deleted build" in outcome.text
    assert tool_runs(env, "delete_path")[0]["pid"] != os.getpid()  # it ran in the worker


def _finish_calls(env, name="on_finish"):
    return tool_runs(env, name)


def test_on_finish_is_called_once_with_the_final_outcome(services, slack, env, conn):
    """The worker calls on_finish once the run ends, with the run id as idempotency key."""
    paused = _pause(on_finish="tests.agents.continuations:note_outcome")
    approve_on_card(slack, services.bot_url, paused.pause_id)
    (call,) = wait_until(lambda: _finish_calls(env), 30, "the on_finish call")
    assert call["status"] == "completed" and call["key"] == paused.run_id
    assert call["pid"] != os.getpid()
    wait_until(lambda: store.runs.outcome_flag_set(conn, paused.run_id), 10, "the call noted")
    assert len(_finish_calls(env)) == 1


def test_on_finish_that_raises_the_first_time_is_retried_and_succeeds_once(
    services, slack, env, conn
):
    """A continuation that fails is retried by RQ; it succeeds exactly once."""
    paused = _pause(on_finish="tests.agents.continuations:flaky_note")
    approve_on_card(slack, services.bot_url, paused.pause_id)
    (call,) = wait_until(lambda: _finish_calls(env), 40, "the retried on_finish call")
    assert len(_finish_calls(env, "on_finish_failed")) == 1
    assert call["key"] == paused.run_id
    wait_until(lambda: store.runs.outcome_flag_set(conn, paused.run_id), 10, "the call noted")
    assert len(_finish_calls(env)) == 1


def test_on_finish_outside_the_allow_list_is_refused_before_the_run(env):
    """A continuation the worker would refuse is refused by run_agent, before any model call."""
    with pytest.raises(GateError, match="APPROVALS_TOOL_MODULES"):
        run_agent("scripted", DELETE, tools=TOOLS, on_finish="os:system")


def test_approvals_result_json_prints_the_outcome(services, slack, env, conn):
    """`approvals result ID --json` prints the outcome, by pause id and by run id alike."""
    paused = _pause()
    runner = CliRunner()
    before = json.loads(runner.invoke(cli, ["result", paused.pause_id, "--json"]).output)
    assert before["status"] == "paused" and before["pause_id"] == paused.pause_id
    approve_on_card(slack, services.bot_url, paused.pause_id)
    wait(paused.pause_id, timeout=60)
    for some_id in (paused.pause_id, paused.run_id):
        result = runner.invoke(cli, ["result", some_id, "--json"])
        assert result.exit_code == 0, result.output
        outcome = json.loads(result.output)
        assert outcome["status"] == "completed" and outcome["run_id"] == paused.run_id
        assert outcome["calls"][0]["decision"]["actor"] == "UALICE"
    text = runner.invoke(cli, ["result", paused.run_id]).output
    assert f"run {paused.run_id}: completed" in text and "approve by" in text
    assert runner.invoke(cli, ["result", "nope"]).exit_code == 1


@pytest.mark.service_env(APPROVALS_RESULT_TTL="5000")
def test_the_outcome_is_kept_for_the_result_ttl(services, slack, env, conn, monkeypatch):
    """The stored outcome expires after APPROVALS_RESULT_TTL seconds."""
    paused = _pause()
    approve_on_card(slack, services.bot_url, paused.pause_id)
    wait(paused.pause_id, timeout=60)
    ttl = conn.ttl(store.keys.outcome_key(paused.run_id))
    assert 4900 < ttl <= 5000


def test_an_expiry_with_the_default_on_reject_is_not_the_end_of_the_run(services, env, conn):
    """The model is told the approval expired and goes on: wait returns its completed answer."""
    paused = _pause(script(calls(("rotate_key", {"name": "k"})), say("went on: {results}")))
    outcome = wait(paused.pause_id, timeout=60)
    assert outcome.status == "completed" and "expired" in outcome.text
    assert [d.kind.value for d in outcome.decisions] == ["expire"]


def test_an_expiry_with_on_reject_stop_gives_stopped_by_the_system(services, env, conn):
    """on_reject="stop" and nobody decided: stopped, by "system", because it expired."""
    paused = _pause(script(calls(("drop_table", {"name": "users"})), say("dropped")))
    outcome = wait(paused.pause_id, timeout=60)
    assert outcome.status == "stopped" and outcome.stopped_by == "system"
    assert "expired" in outcome.reason


def test_on_finish_is_called_when_the_worker_died_before_queuing_it(services, slack, env, conn):
    """The outcome is stored (as the worker's first step does) and no on_finish job follows,
    as when that worker dies between the two: a worker queues it once the end is old enough,
    and the continuation runs once."""
    paused = _pause(on_finish="tests.agents.continuations:note_outcome")
    ended = Outcome("completed", text="done", run_id=paused.run_id)
    outcome = json.dumps(ended.to_dict())
    path = "tests.agents.continuations:note_outcome"
    assert store.runs.save_outcome(conn, paused.run_id, outcome, path, 3600)
    assert not queue.finish_queued(conn, paused.run_id)
    # Time passes: the run ended longer ago than a live worker takes to queue the call.
    conn.zadd(store.keys.FINISHING_KEY, {paused.run_id: time.time() - STRANDED_AFTER - 1}, xx=True)

    (call,) = wait_until(lambda: _finish_calls(env), 30, "the on_finish call")
    assert call["status"] == "completed" and call["key"] == paused.run_id
    wait_until(lambda: store.runs.outcome_flag_set(conn, paused.run_id), 10, "the call noted")
    assert conn.zscore(store.keys.FINISHING_KEY, paused.run_id) is None
    assert len(_finish_calls(env)) == 1


def test_on_finish_completes_once_when_its_worker_is_killed_inside_it(
    services, slack, env, conn, tmp_path
):
    """SIGKILL while the continuation runs: RQ takes the job for abandoned and retries it on
    the next worker; the continuation completes once, with the same idempotency key."""
    from pathlib import Path

    from tests.e2e import dead_workers_claims_lapse, kill_worker, replace_worker

    paused = _pause(on_finish="tests.agents.continuations:held_note")
    hold = Path(env["HOLD_FILE"])
    hold.touch()
    approve_on_card(slack, services.bot_url, paused.pause_id)
    (started,) = wait_until(lambda: _finish_calls(env, "on_finish_started"), 30, "on_finish")
    kill_worker(services, started["pid"])  # inside the continuation
    hold.unlink()
    dead_workers_claims_lapse(conn)
    replace_worker(services, env, tmp_path / "worker2.log")

    (call,) = wait_until(lambda: _finish_calls(env), 90, "the retried on_finish call")
    assert call["status"] == "completed" and call["key"] == paused.run_id
    assert call["pid"] != started["pid"]
    wait_until(lambda: store.runs.outcome_flag_set(conn, paused.run_id), 10, "the call noted")
    assert [c["key"] for c in _finish_calls(env, "on_finish_started")] == [paused.run_id] * 2
    assert len(_finish_calls(env)) == 1


def test_on_finish_runs_once_when_the_worker_that_ran_the_run_is_killed_after_it(
    services, slack, env, conn, tmp_path
):
    """The run ends in a worker, which is SIGKILLed before it takes the on_finish job it
    queued (RQ's own suspension holds the worker between jobs, so the kill falls at a known
    point): the job is still in Redis, a new worker calls the continuation once."""
    from pathlib import Path

    from rq import Worker
    from rq.suspension import resume as resume_workers
    from rq.suspension import suspend as suspend_workers

    from tests.agents.tools import charge_card
    from tests.e2e import kill_worker, replace_worker

    prompt = script(calls(("charge_card", {"amount": 42})), say("done: {results}"))
    paused = run_agent(
        "scripted",
        prompt,
        tools=[charge_card],
        on_finish="tests.agents.continuations:note_outcome",
    )
    hold = Path(env["HOLD_FILE"])
    hold.touch()
    approve_on_card(slack, services.bot_url, paused.pause_id)
    wait_until(lambda: tool_runs(env, "charge_card"), 30, "the resume to reach the tool")
    suspend_workers(conn)  # the worker finishes this job, then takes no other
    hold.unlink()

    wait_until(lambda: queue.finish_queued(conn, paused.run_id), 30, "the on_finish job")
    (worker,) = Worker.all(connection=conn)

    def between_jobs() -> bool:
        worker.refresh()
        return worker.get_state() == "suspended"

    wait_until(between_jobs, 30, "the worker between jobs")
    stored, _ = store.runs.load_outcome(conn, paused.run_id)
    assert stored["status"] == "completed" and "charged 42" in stored["text"]
    kill_worker(services, None)  # after the run, before its continuation
    assert _finish_calls(env) == []

    resume_workers(conn)
    replace_worker(services, env, tmp_path / "worker2.log")
    (call,) = wait_until(lambda: _finish_calls(env), 60, "the on_finish call")
    assert call["status"] == "completed" and call["key"] == paused.run_id
    wait_until(lambda: store.runs.outcome_flag_set(conn, paused.run_id), 10, "the call noted")
    assert len(_finish_calls(env)) == 1
    assert len(tool_runs(env, "charge_card")) == 1  # and the run itself was not run again


def test_a_run_whose_worker_died_between_its_end_and_its_outcome_is_finished_once(
    services, slack, env, conn, tmp_path
):
    """The worker records the run's end, then dies before storing the outcome (the state is
    set up by the worker's own store calls): a later sweep stores the outcome from the
    records, which queues on_finish; a new worker calls it once, and a second sweep adds
    nothing."""
    from approvals.config import Settings
    from approvals.decisions import recovery, review
    from approvals.models import DecisionKind, RunResult, result_to_dict
    from tests.e2e import kill_worker, replace_worker

    kill_worker(services, None)  # no worker: nothing but this test moves the run on
    settings = Settings.from_env()
    paused = _pause(on_finish="tests.agents.continuations:note_outcome")
    review.decide(conn, settings, paused.pause_id, DecisionKind.APPROVE, "UALICE")
    assert store.transitions.transition(conn, paused.pause_id, Status.RUNNING, lease=15).ok
    result = RunResult(
        Status.COMPLETED, text="Finished: deleted build", tool_output="deleted build",
        executed_arguments={"path": "build"},
    )  # fmt: skip
    fields = {"result": json.dumps(result_to_dict(result))}
    assert store.transitions.transition(conn, paused.pause_id, Status.COMPLETED, fields).ok
    assert store.runs.load_outcome(conn, paused.run_id) == (None, None)
    # Time passes: the end is older than a live worker takes to store the outcome, and no
    # worker has looked at it yet.
    ended = time.time() - STRANDED_AFTER - 1
    conn.zadd(store.keys.FINISHED_KEY, {paused.pause_id: ended}, xx=True)
    conn.delete(store.keys.ENDS_CHECKED_KEY)

    assert recovery.store_missing_outcomes(conn, settings) == [paused.run_id]
    assert recovery.store_missing_outcomes(conn, settings) == []
    stored, path = store.runs.load_outcome(conn, paused.run_id)
    assert stored["status"] == "completed" and stored["text"] == "Finished: deleted build"
    assert path == "tests.agents.continuations:note_outcome"
    assert wait(paused.pause_id, timeout=5).status == "completed"

    replace_worker(services, env, tmp_path / "worker2.log")
    (call,) = wait_until(lambda: _finish_calls(env), 30, "the on_finish call")
    assert call["status"] == "completed" and call["key"] == paused.run_id
    wait_until(lambda: store.runs.outcome_flag_set(conn, paused.run_id), 10, "the call noted")
    assert len(_finish_calls(env)) == 1
    assert tool_runs(env, "delete_path") == []  # nothing of the run itself ran again


def test_the_outcome_sweep_stores_nothing_for_a_run_that_goes_on(services, slack, env, conn):
    """A resume that paused again is finished, but its run is not: no outcome is stored."""
    from approvals.config import Settings
    from approvals.decisions import recovery

    paused = _pause(TWO_PAUSES, on_finish="tests.agents.continuations:note_outcome")
    approve_on_card(slack, services.bot_url, paused.pause_id)
    wait_status(conn, paused.pause_id, Status.PAUSED)
    conn.zadd(store.keys.FINISHED_KEY, {paused.pause_id: time.time() - STRANDED_AFTER - 1}, xx=True)
    conn.delete(store.keys.ENDS_CHECKED_KEY)
    assert recovery.store_missing_outcomes(conn, Settings.from_env()) == []
    assert store.runs.load_outcome(conn, paused.run_id) == (None, None)
    assert wait(paused.pause_id, timeout=0.1).status == "paused"


def test_waiting_on_an_unknown_id_is_a_clear_error_that_changes_nothing(env, conn):
    """wait() and `approvals result` on an id Redis does not know: UnknownApproval naming
    the id, exit code 1 with the same words, at once, and Redis as it was."""
    from approvals.errors import UnknownApproval
    from tests.e2e import redis_state

    _pause()
    before = redis_state(conn, jobs=True)
    started = time.monotonic()
    with pytest.raises(UnknownApproval, match="'run-nope'"):
        wait("run-nope", timeout=30)
    assert time.monotonic() - started < 5  # not a wait for something that cannot come
    result = CliRunner().invoke(cli, ["result", "run-nope"])
    assert result.exit_code == 1 and "no approval with id 'run-nope'" in result.output
    assert redis_state(conn, jobs=True) == before


@pytest.mark.service_env(APPROVALS_RESULT_TTL="20")
def test_the_outcome_sweep_never_stores_again_an_outcome_that_expired(
    services, slack, env, conn, monkeypatch
):
    """A result TTL shorter than the sweep's delay: the outcome that expired is not taken for
    one never stored, so on_finish is not called a second time."""
    from approvals.config import Settings
    from approvals.decisions import recovery

    monkeypatch.setenv("APPROVALS_RESULT_TTL", "20")
    paused = _pause(on_finish="tests.agents.continuations:note_outcome")
    approve_on_card(slack, services.bot_url, paused.pause_id)
    wait_until(lambda: store.runs.outcome_flag_set(conn, paused.run_id), 30, "the on_finish call")
    conn.delete(store.keys.outcome_key(paused.run_id))  # expired
    conn.zadd(store.keys.FINISHED_KEY, {paused.pause_id: time.time() - STRANDED_AFTER - 1}, xx=True)
    conn.delete(store.keys.ENDS_CHECKED_KEY)
    assert recovery.store_missing_outcomes(conn, Settings.from_env()) == []
    assert store.runs.load_outcome(conn, paused.run_id) == (None, None)
    assert len(_finish_calls(env)) == 1
