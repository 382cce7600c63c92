"""Structured logs: JSON or text lines, tagged with the approval being handled, in this process
and in a real ``approvals worker``."""

from __future__ import annotations

import contextvars
import io
import json
import logging
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from rq.job import Job

from approvals.config import Settings
from approvals.errors import ConfigError
from approvals.ops.logs import bind_approval, configure_logging, current_approval
from approvals.store import queue
from tests.conftest import BOT_TOKEN
from tests.processes import start_worker, wait_for_workers, wait_until

log = logging.getLogger("tests.logs")


@pytest.fixture
def capture() -> Iterator[Callable[[str], io.StringIO]]:
    """configure_logging into a buffer; the root logger is put back afterwards."""
    root = logging.getLogger()
    level = root.level
    showwarning = warnings.showwarning
    handlers: list[logging.Handler] = []

    def configure(log_format: str) -> io.StringIO:
        stream = io.StringIO()
        handlers.append(configure_logging(Settings(log_format=log_format), stream))
        return stream

    yield configure
    for handler in handlers:
        root.removeHandler(handler)
    root.setLevel(level)
    warnings.showwarning = showwarning


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_json_lines_carry_the_approval_id_inside_bind_approval_only(capture):
    """Each record is one JSON object; approval_id appears inside the block, not outside."""
    stream = capture("json")
    log.info("before")
    with bind_approval("a1"):
        log.info("inside %s", "a1")
        with bind_approval("a2"):
            log.warning("nested")
        log.info("back in a1")
    log.info("after")

    lines = json_lines(stream.getvalue())
    assert [(x["message"], x.get("approval_id")) for x in lines] == [
        ("before", None),
        ("inside a1", "a1"),
        ("nested", "a2"),
        ("back in a1", "a1"),
        ("after", None),
    ]
    assert "approval_id" not in lines[0] and "approval_id" not in lines[-1]
    first = lines[1]
    assert set(first) == {"time", "level", "logger", "message", "pid", "approval_id"}
    assert first["pid"] == os.getpid()
    assert first["level"] == "INFO" and first["logger"] == "tests.logs"
    assert datetime.fromisoformat(first["time"]).utcoffset() is not None
    assert lines[2]["level"] == "WARNING"


def test_json_lines_carry_the_exception_text_on_one_line(capture):
    """A logged exception's traceback is in `exception`, and the record stays one line."""
    stream = capture("json")
    with bind_approval("a1"):
        try:
            raise ValueError("broken\nacross lines")
        except ValueError:
            log.exception("resume failed")
    (line,) = stream.getvalue().splitlines()
    entry = json.loads(line)
    assert entry["message"] == "resume failed" and entry["approval_id"] == "a1"
    assert entry["exception"].startswith("Traceback") and "ValueError: broken" in entry["exception"]


def test_text_lines_tag_the_approval(capture):
    """Plain text: `<time> <LEVEL> <logger> [approval <id>] <message>`, tag only when bound."""
    stream = capture("text")
    log.info("outside")
    with bind_approval("a1"):
        log.info("inside")
    outside, inside = stream.getvalue().splitlines()
    assert outside.endswith(" INFO tests.logs outside")
    assert inside.endswith(" INFO tests.logs [approval a1] inside")


def test_rq_says_one_line_per_job_and_nothing_while_idle(capture):
    """RQ's registry sweeps, pub/sub lines, "Job OK" and result lifespans are left out; the
    job's "Successfully completed" line, RQ's start-up lines and its warnings stay."""
    stream = capture("text")
    rq = logging.getLogger("rq.worker")
    rq.info("Worker %s: cleaning registries for queue: %s", "w1", "approvals")
    rq.info("Worker %s: cleaning group registries", "w1")
    rq.info("Worker %s: subscribing to channel %s", "w1", "rq:pubsub:w1")
    rq.info(
        "Worker %s: %s: %s (%s)",
        "w1",
        "approvals",
        "approvals.worker.jobs.post_card('a1')",
        "card-a1",
    )
    rq.info("Successfully completed %s job in %ss on worker %s", "post_card('a1')", 0.04, "w1")
    rq.info("Worker %s: %s: %s (%s)", "w1", "approvals", "Job OK", "card-a1")
    rq.info("Worker %s: job %s result is kept for %s seconds", "w1", "resume-a1", 3600)
    rq.info("Worker %s: started with PID %d, version %s", "w1", 1, "3.0.0")
    rq.warning("Worker %s: %s: %s (%s)", "w1", "approvals", "a warning", "card-a1")
    lines = stream.getvalue().splitlines()
    assert [line.split(" rq.worker ", 1)[1] for line in lines] == [
        "Successfully completed post_card('a1') job in 0.04s on worker w1",
        "Worker w1: started with PID 1, version 3.0.0",
        "Worker w1: approvals: a warning (card-a1)",
    ]


def test_a_python_warning_is_one_log_line(capture):
    """A warning is logged on one line (no source line under it), in text as in JSON."""
    stream = capture("json")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("a field shadows an attribute", UserWarning, stacklevel=1)
    (line,) = json_lines(stream.getvalue())
    assert line["logger"] == "py.warnings" and line["level"] == "WARNING"
    assert line["message"].endswith(": UserWarning: a field shadows an attribute")
    assert "\n" not in line["message"]


def test_configuring_twice_replaces_the_handler(capture):
    """Calling configure_logging again does not duplicate every line."""
    first = capture("text")
    second = capture("json")
    log.info("once")
    assert first.getvalue() == ""
    assert [x["message"] for x in json_lines(second.getvalue())] == ["once"]


def test_an_explicit_approval_id_is_kept(capture):
    """`extra={"approval_id": ...}` wins over the bound one."""
    stream = capture("json")
    with bind_approval("bound"):
        log.info("explicit", extra={"approval_id": "given"})
    assert json_lines(stream.getvalue())[0]["approval_id"] == "given"


def test_threads_see_the_id_only_when_started_in_a_copy_of_the_context(capture):
    """A plain thread starts without the binding; copy_context().run carries it over."""
    stream = capture("json")
    with bind_approval("a1"):
        plain = threading.Thread(target=log.info, args=("plain thread",))
        context = contextvars.copy_context()
        copied = threading.Thread(target=context.run, args=(log.info, "copied context"))
        for thread in (plain, copied):
            thread.start()
            thread.join()
    found = {x["message"]: x.get("approval_id") for x in json_lines(stream.getvalue())}
    assert found == {"plain thread": None, "copied context": "a1"}
    assert current_approval() is None


def test_log_format_is_validated():
    """APPROVALS_LOG_FORMAT is text (the default) or json; anything else stops start-up."""
    assert Settings.from_env({}).log_format == "text"
    assert Settings.from_env({"APPROVALS_LOG_FORMAT": "json"}).log_format == "json"
    with pytest.raises(ConfigError, match="APPROVALS_LOG_FORMAT must be text or json"):
        Settings.from_env({"APPROVALS_LOG_FORMAT": "xml"})


def _worker_lines(env, conn, tmp_path, func: str, approval_id: str) -> list[dict[str, Any]]:
    """Run ``func(approval_id)`` in a real `approvals worker` logging JSON; its output, parsed."""
    json_env = {**env, "APPROVALS_LOG_FORMAT": "json"}
    worker = start_worker(json_env, tmp_path / "worker.log", "logs-w1")
    try:
        wait_for_workers(json_env, [worker], 1)
        job = queue.get_queue(conn, Settings.from_env()).enqueue(func, approval_id)
        wait_until(
            lambda: Job.fetch(job.id, connection=conn).get_status() in ("finished", "failed"),
            30,
            "the job to run",
        )
    finally:
        worker.stop()
    output = worker.output()
    lines = [line for line in output.splitlines() if line.strip()]
    for line in lines:
        assert line.startswith("{"), f"not a JSON line: {line!r}\n{output}"
    return [json.loads(line) for line in lines]


def test_a_real_worker_writes_json_lines_tagged_inside_bind_approval(env, conn, tmp_path):
    """`approvals worker` with APPROVALS_LOG_FORMAT=json: every line of its output is JSON,
    RQ's own lines included, and the job's lines inside bind_approval carry the id."""
    lines = _worker_lines(env, conn, tmp_path, "tests.log_jobs.log_for_approval", "a-123")

    rq_lines = [x for x in lines if x["logger"].startswith("rq.")]
    assert any("started with PID" in x["message"] for x in rq_lines)
    assert all("approval_id" not in x for x in rq_lines)
    job_lines = {x["message"]: x for x in lines if x["logger"] == "tests.log_jobs"}
    assert "approval_id" not in job_lines["before the binding"]
    assert job_lines["handling the approval"]["approval_id"] == "a-123"
    failed = job_lines["it failed"]
    assert failed["approval_id"] == "a-123" and "ValueError: a failure" in failed["exception"]


def test_worker_jobs_tag_their_lines_with_the_approval_id(env, conn, tmp_path):
    """The resume job's own warning (nothing to resume) carries the approval's id."""
    lines = _worker_lines(env, conn, tmp_path, queue.RESUME, "not-waiting")
    (warning,) = [x for x in lines if x["logger"] == "approvals.calls.resume"]
    assert "not waiting to resume" in warning["message"]
    assert warning["approval_id"] == "not-waiting"


@pytest.fixture
def sdk_logger() -> Iterator[logging.Logger]:
    """slack_sdk's logger with its level unset, as a fresh process has it; put back after."""
    logger = logging.getLogger("slack_sdk.web.base_client")
    root = logging.getLogger()
    saved = logger.level, root.level
    logger.setLevel(logging.NOTSET)
    yield logger
    logger.setLevel(saved[0])
    root.setLevel(saved[1])


def test_slack_sdk_builds_no_debug_text_unless_debug_is_on(sdk_logger, slack, caplog):
    """At INFO, slack_sdk's own level is set, so it skips formatting every request and
    response; with DEBUG in effect its debug lines still come."""
    from approvals.slack.web import web_client

    settings = Settings(slack_bot_token=BOT_TOKEN, slack_api_url=slack.base_url)
    logging.getLogger().setLevel(logging.INFO)
    web_client(settings).auth_test()
    assert sdk_logger.level == logging.INFO

    sdk_logger.setLevel(logging.NOTSET)
    logging.getLogger().setLevel(logging.DEBUG)
    with caplog.at_level(logging.DEBUG, logger="slack_sdk.web.base_client"):
        web_client(settings).auth_test()
    assert any("Sending a request" in r.getMessage() for r in caplog.records)
