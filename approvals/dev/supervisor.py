"""Run child processes together: prefix their output, restart the ones that crash, stop all.

``approvals dev`` runs the bot and the worker as the production commands, each in its own
process (in production, gunicorn supervises the bot's processes and RQ's ``WorkerPool`` the
workers'). One terminal shows every line a child prints, prefixed with its name; a crash is
reported and the child restarted (with growing pauses, so a child that cannot start does not
spin); Ctrl-C stops everything.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from approvals.dev.orphans import die_with_parent

#: A child that ran this long before exiting is restarted at once, not after a pause.
HEALTHY_SECONDS = 30.0
MAX_BACKOFF_SECONDS = 30.0

LineHandler = Callable[[str, str], None]


@dataclass(frozen=True)
class ChildSpec:
    """What to run: a display name, the command line and its whole environment.

    Nothing of the supervisor's own environment is added to ``env``: a variable kept from a
    child (the signing key, kept from the worker) stays kept.
    """

    name: str
    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    #: Open file descriptors the child inherits (a listening socket shared by bot replicas).
    pass_fds: Sequence[int] = ()


@dataclass
class _Child:
    spec: ChildSpec
    process: subprocess.Popen[str] | None = None
    started_at: float = 0.0
    restart_at: float | None = None
    failures: int = 0
    reader: threading.Thread | None = None


class Supervisor:
    """Start children, keep them running until :meth:`stop`, and report what happens.

    ``on_line(name, line)`` is called from a reader thread for every line a child prints;
    ``out`` receives the prefixed lines and the supervisor's own reports.
    """

    def __init__(
        self,
        specs: Sequence[ChildSpec],
        out: TextIO,
        on_line: LineHandler | None = None,
        first_backoff: float = 1.0,
        stop_timeout: float = 10.0,
        label: str = "approvals dev",
    ) -> None:
        self._children = [_Child(spec) for spec in specs]
        self._out = out
        self._on_line = on_line
        self._first_backoff = first_backoff
        self._stop_timeout = stop_timeout
        self._label = label
        self._stopping = threading.Event()
        self._print_lock = threading.Lock()
        self.restarts = 0

    def run(self, poll: float = 0.1) -> None:
        """Start every child, then watch them until :meth:`stop` is called (from anywhere)."""
        for child in self._children:
            self._start(child)
        while not self._stopping.wait(poll):
            for child in self._children:
                self._watch(child)
        self._stop_all()

    def stop(self) -> None:
        """Ask :meth:`run` to stop every child and return; safe from a signal handler."""
        self._stopping.set()

    def pid(self, name: str) -> int | None:
        """The pid of the running child called ``name`` (for tests and diagnostics)."""
        for child in self._children:
            if child.spec.name == name and child.process and child.process.poll() is None:
                return child.process.pid
        return None

    def say(self, text: str) -> None:
        """Print one of the supervisor's own lines, never in the middle of a child's line."""
        with self._print_lock:
            self._out.write(text + "\n")
            self._out.flush()

    def _start(self, child: _Child) -> None:
        child.process = subprocess.Popen(
            list(child.spec.argv),
            env={**child.spec.env, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            # Its own process group: Ctrl-C reaches the supervisor only, which stops the
            # children in order (and can then kill a child's whole group, work-horses too).
            start_new_session=True,
            preexec_fn=die_with_parent(),
            pass_fds=tuple(child.spec.pass_fds),
        )
        child.started_at = time.monotonic()
        child.restart_at = None
        child.reader = threading.Thread(
            target=self._pump, args=(child.spec.name, child.process), daemon=True
        )
        child.reader.start()

    def _pump(self, name: str, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        with process.stdout:  # the reader owns the pipe: closed at the child's end
            for raw in process.stdout:
                line = raw.rstrip("\n")
                self.say(f"[{name}] {line}")
                if self._on_line is not None:
                    self._on_line(name, line)

    def _watch(self, child: _Child) -> None:
        now = time.monotonic()
        if child.restart_at is not None:
            if now >= child.restart_at:
                self._start(child)
            return
        assert child.process is not None
        code = child.process.poll()
        if code is None:
            return
        # What it left behind dies with it (RQ's scheduler, forked from the worker, would
        # otherwise keep the dead worker's blocked Redis connection taking jobs). An RQ
        # work-horse has its own process group and finishes its job.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.process.pid, signal.SIGKILL)
        if child.reader is not None:
            child.reader.join(timeout=1)  # print its last words before the report
        ran = now - child.started_at
        child.failures = 0 if ran >= HEALTHY_SECONDS else child.failures + 1
        delay = min(MAX_BACKOFF_SECONDS, self._first_backoff * 2 ** max(child.failures - 1, 0))
        delay = 0.0 if child.failures == 0 else delay
        self.say(
            f"{self._label}: {child.spec.name} exited with code {code} after {ran:.1f}s; "
            f"restarting it in {delay:.0f}s"
        )
        self.restarts += 1
        child.restart_at = now + delay

    def _stop_all(self) -> None:
        timeout = self._stop_timeout
        running = [c.process for c in self._children if c.process and c.process.poll() is None]
        for process in running:
            # The main process only: an RQ worker then finishes its job (warm shut-down).
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.0, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # whatever is left of its group
            process.wait()
        for child in self._children:
            if child.reader is not None:
                child.reader.join(timeout=1)
