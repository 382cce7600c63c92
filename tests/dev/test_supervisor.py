"""The supervisor of ``approvals dev``'s children, with real child processes."""

from __future__ import annotations

import io
import os
import sys
import threading
import time

import pytest

from approvals.dev.supervisor import ChildSpec, Supervisor
from tests.conftest import wait_until


class Output(io.StringIO):
    """What the supervisor printed, safe to read while it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:
            return super().write(text)

    def lines(self) -> list[str]:
        with self.lock:
            return self.getvalue().splitlines()


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.fixture
def run():
    """Start a supervisor in a thread; it is stopped (and must return) at the end."""
    started = []

    def start(specs, **kw):
        out = Output()
        lines = []
        supervisor = Supervisor(
            specs, out, on_line=lambda name, line: lines.append((name, line)), **kw
        )
        thread = threading.Thread(target=supervisor.run, daemon=True)
        thread.start()
        started.append((supervisor, thread))
        return supervisor, out, lines, thread

    yield start
    for supervisor, thread in started:
        supervisor.stop()
        thread.join(20)
        assert not thread.is_alive()


def test_output_is_prefixed_and_handed_to_the_watcher(run):
    """Each child's lines come out under its name; the environment is the spec's."""
    code = "import os; print('hello', os.environ['WHO']); import time; time.sleep(30)"
    _, out, lines, _ = run(
        [
            ChildSpec("one", _python(code), {"WHO": "a"}),
            ChildSpec("two", _python(code), {"WHO": "b"}),
        ]
    )
    wait_until(lambda: len(lines) == 2, 10, "both children to speak")
    assert sorted(lines) == [("one", "hello a"), ("two", "hello b")]
    assert sorted(out.lines()) == ["[one] hello a", "[two] hello b"]


def test_a_child_gets_only_its_specs_environment(run, monkeypatch):
    """A variable of the supervisor's own environment left out of a spec (the signing key,
    kept from the worker) does not reach that child."""
    monkeypatch.setenv("APPROVALS_SIGNING_KEY", "/keys/signing.pem")
    code = "import os; print(os.environ.get('APPROVALS_SIGNING_KEY', 'none'), os.environ['WHO'])"
    code += "; import time; time.sleep(30)"
    _, _, lines, _ = run([ChildSpec("worker", _python(code), {"WHO": "w"})])
    wait_until(lambda: lines, 10, "the child to speak")
    assert lines == [("worker", "none w")]


def test_a_crashed_child_is_reported_and_restarted_with_growing_pauses(run):
    code = "print('up', flush=True); raise SystemExit(3)"
    supervisor, out, lines, _ = run([ChildSpec("flaky", _python(code))], first_backoff=0.2)
    wait_until(lambda: len(lines) >= 3, 15, "three starts")
    reports = [line for line in out.lines() if "exited" in line]
    assert reports[0].startswith("approvals dev: flaky exited with code 3 after ")
    assert reports[0].endswith("restarting it in 0s")  # 0.2 s, rounded
    assert supervisor.restarts >= 2


def test_stop_ends_every_child_and_kills_those_that_ignore_sigterm(run):
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        "print('ready', flush=True); time.sleep(60)"
    )
    polite = "import time; print('ready', flush=True); time.sleep(60)"
    supervisor, _, lines, thread = run(
        [ChildSpec("stubborn", _python(stubborn)), ChildSpec("polite", _python(polite))],
        stop_timeout=1.0,
    )
    wait_until(lambda: len(lines) == 2, 10, "both children to start")
    pids = [supervisor.pid("stubborn"), supervisor.pid("polite")]
    began = time.monotonic()
    supervisor.stop()
    thread.join(10)
    assert not thread.is_alive() and time.monotonic() - began < 5
    for pid in pids:
        assert not _running(pid)
    assert supervisor.pid("polite") is None


def test_children_do_not_get_the_terminals_ctrl_c(run):
    """They run in their own sessions: only the supervisor decides when they stop."""
    supervisor, _, lines, _ = run(
        [ChildSpec("c", _python("import time; print(1, flush=True); time.sleep(60)"))]
    )
    wait_until(lambda: lines, 10, "the child to start")
    pid = supervisor.pid("c")
    assert os.getsid(pid) == pid != os.getsid(0)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return False
