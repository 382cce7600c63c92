"""The replicas' shared board (``bot.board``), across real processes, and the work after an
answer waiting for the other replicas on it (``bot.listeners.lazy``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from bot.board import Board, create
from bot.listeners import lazy
from tests.processes import ROOT

GAP = 0.005

#: A replica in another process: reads commands on stdin, answers each with one line.
_REPLICA = """
import sys, time
from bot.board import Board

board = Board(int(sys.argv[1]), int(sys.argv[2]))
print("ready", flush=True)
for line in sys.stdin:
    command, *args = line.split()
    if command == "publish":
        board.publish(int(args[0]), time.monotonic() if args[1] == "now" else float(args[1]))
        print("published", flush=True)
    elif command == "busy":
        print(repr(board.others_busy(time.monotonic(), float(args[0]))), flush=True)
"""


class Replica:
    """A ``Board`` on ``slot`` of ``fd``, held by a child process."""

    def __init__(self, fd: int, slot: int) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-c", _REPLICA, str(fd), str(slot)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=(fd,),
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            text=True,
        )
        assert self._line() == "ready"

    def _line(self) -> str:
        assert self.popen.stdout is not None
        return self.popen.stdout.readline().strip()

    def ask(self, command: str) -> str:
        assert self.popen.stdin is not None
        self.popen.stdin.write(command + "\n")
        self.popen.stdin.flush()
        return self._line()

    def publish(self, in_flight: int, last_arrival: str) -> None:
        assert self.ask(f"publish {in_flight} {last_arrival}") == "published"

    def others_busy(self, gap: float) -> float | None:
        answer = self.ask(f"busy {gap}")
        return None if answer == "None" else float(answer)

    def kill(self) -> None:
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)

    def close(self) -> None:
        if self.popen.poll() is None:
            self.kill()
        for stream in (self.popen.stdin, self.popen.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def board_fd() -> Iterator[int]:
    """A board of three slots."""
    fd = create(3)
    yield fd
    os.close(fd)


@pytest.fixture
def replicas(board_fd: int) -> Iterator[list[Replica]]:
    """Start replicas with ``replicas.append(Replica(board_fd, slot))``; all stopped after."""
    started: list[Replica] = []
    yield started
    for replica in started:
        replica.close()


# --- the board --------------------------------------------------------------------------------


def test_a_board_has_one_slot_per_replica():
    fd = create(4)
    try:
        with pytest.raises(ValueError):
            Board(fd, 4)
        assert [Board(fd, slot).others_busy(time.monotonic(), GAP) for slot in range(4)] == [
            None
        ] * 4
    finally:
        os.close(fd)


def test_a_slot_published_in_one_process_is_read_in_another(board_fd, replicas):
    """Both directions, on one clock (``time.monotonic`` is the system's, for every process)."""
    here = Board(board_fd, 0)
    replicas.append(Replica(board_fd, 1))
    child = replicas[0]
    assert here.others_busy(time.monotonic(), GAP) is None
    assert child.others_busy(GAP) is None

    child.publish(3, "now")  # three requests in flight in the other process
    assert here.others_busy(time.monotonic(), GAP) == GAP
    child.publish(0, "now")  # all answered, the last one just now
    left = here.others_busy(time.monotonic(), 60.0)
    assert left is not None and 0 < left <= 60.0
    child.publish(0, "0")
    assert here.others_busy(time.monotonic(), GAP) is None

    here.publish(2, time.monotonic())
    assert child.others_busy(GAP) == GAP
    here.publish(0, time.monotonic() - 10)
    assert child.others_busy(GAP) is None


def test_others_busy_ignores_its_own_slot(board_fd):
    mine, other = Board(board_fd, 0), Board(board_fd, 1)
    now = time.monotonic()
    mine.publish(5, now)
    assert mine.others_busy(now, GAP) is None
    assert other.others_busy(now, GAP) == GAP
    other.publish(1, now)
    assert other.others_busy(now, GAP) == GAP  # mine's, not its own
    mine.publish(0, 0.0)
    assert other.others_busy(now, GAP) is None
    assert mine.others_busy(now, GAP) == GAP


def test_others_busy_waits_out_a_recent_arrival_and_the_shortest_wait_wins(board_fd):
    reader, one, two = Board(board_fd, 0), Board(board_fd, 1), Board(board_fd, 2)
    now = 1000.0
    one.publish(0, now - 0.002)  # arrived 2 ms ago: 3 ms of the gap left
    assert reader.others_busy(now, GAP) == pytest.approx(0.003)
    two.publish(0, now - 0.004)  # 1 ms left: the sooner look
    assert reader.others_busy(now, GAP) == pytest.approx(0.001)
    two.publish(1, now - 60)  # in flight: a whole gap, but one's 3 ms is sooner
    assert reader.others_busy(now, GAP) == pytest.approx(0.003)
    one.publish(0, now - 1.0)  # long ago: only two's in flight is left
    assert reader.others_busy(now, GAP) == GAP
    two.publish(0, now - 60)
    assert reader.others_busy(now, GAP) is None


def test_a_new_board_on_a_slot_clears_what_a_dead_replica_left(board_fd, replicas):
    """A replica killed with requests in flight leaves them on its slot; the one started in
    its place (another process, on the same slot) clears them."""
    here = Board(board_fd, 0)
    replicas.append(Replica(board_fd, 1))
    replicas[0].publish(7, "now")
    replicas[0].kill()
    assert here.others_busy(time.monotonic(), GAP) == GAP  # the dead one's in flight remain

    replicas.append(Replica(board_fd, 1))
    assert here.others_busy(time.monotonic(), GAP) is None
    assert replicas[1].others_busy(GAP) is None


@pytest.mark.parametrize("slot", [3, 4, -1])
def test_a_slot_off_the_board_raises_value_error(board_fd, slot):
    busy = Board(board_fd, 2)
    busy.publish(1, time.monotonic())
    with pytest.raises(ValueError, match="not on a board of 3"):
        Board(board_fd, slot)
    # Nothing was written: the last slot is still busy.
    assert Board(board_fd, 0).others_busy(time.monotonic(), GAP) == GAP


# --- the work after an answer, waiting for the other replicas ---------------------------------


class Clicked:
    """When the work of one acknowledged click ran (monotonic), once it has."""

    def __init__(self) -> None:
        self.started: list[float] = []
        self.done = threading.Event()
        self.clicked = False

    def handler(self, **_: object) -> None:
        self.started.append(time.monotonic())
        self.done.set()

    def click(self) -> float:
        """Answer one click in this thread (as ``bot.server`` does); when it was answered."""
        self.clicked = True
        with lazy.answering():
            lazy.acknowledged(self.handler)()
        return time.monotonic()

    def finished(self) -> None:
        """No work left running into the next test."""
        if self.clicked:
            self.done.wait(10)

    def wait(self, timeout: float = 10.0) -> float:
        assert self.done.wait(timeout), "the work never ran"
        return self.started[0]


@pytest.fixture
def clicked() -> Iterator[Clicked]:
    work = Clicked()
    yield work
    work.finished()


@pytest.fixture
def other_replica(clicked: Clicked, monkeypatch: pytest.MonkeyPatch) -> Iterator[Board]:
    """This process's answers shared on slot 0 of a board; another replica's slot 1 (the
    test writes it). Torn down before ``clicked``: the other replica goes quiet first."""
    fd = create(2)
    monkeypatch.setattr(lazy._answers, "_board", lazy._answers._board)  # restored after
    lazy._answers.share(Board(fd, 0))
    other = Board(fd, 1)
    yield other
    other.publish(0, 0.0)
    clicked.finished()
    os.close(fd)


def test_this_replica_publishes_the_requests_it_answers(other_replica):
    with lazy.answering():
        assert other_replica.others_busy(time.monotonic(), GAP) == GAP
        with lazy.answering():
            assert other_replica.others_busy(time.monotonic(), GAP) == GAP
        assert other_replica.others_busy(time.monotonic(), GAP) == GAP
    answered = time.monotonic()
    left = other_replica.others_busy(answered, 60.0)
    assert left is not None and 59.0 < left <= 60.0  # quiet, but it got one just now
    assert other_replica.others_busy(answered + 60.0, 60.0) is None


def test_a_quiet_other_replica_does_not_hold_the_work_back(clicked, other_replica, monkeypatch):
    monkeypatch.setattr(lazy, "YIELD_SECONDS", 30.0)
    other_replica.publish(0, 0.0)
    answered = clicked.click()
    assert clicked.wait(5) - answered < 5


def test_work_waits_while_another_replica_answers_and_starts_once_it_is_quiet(
    clicked, other_replica, monkeypatch
):
    """A lone click here, a request in flight in the other replica: the work waits for it."""
    monkeypatch.setattr(lazy, "YIELD_SECONDS", 30.0)
    other_replica.publish(1, time.monotonic())
    clicked.click()
    assert not clicked.done.wait(0.3), "the work ran while another replica was answering"
    cleared = time.monotonic()
    other_replica.publish(0, 0.0)
    started = clicked.wait(5)
    # The other replica cannot notify this one: the work looks again every burst gap, so it
    # starts soon after the other goes quiet, long before its cap.
    assert cleared <= started < cleared + 1.0


def test_work_waits_for_the_end_of_a_burst_in_another_replica(clicked, other_replica, monkeypatch):
    """No request in flight there, but one arrived less than a burst gap ago."""
    monkeypatch.setattr(lazy, "YIELD_SECONDS", 30.0)
    monkeypatch.setattr(lazy, "BURST_GAP_SECONDS", 0.4)
    arrived = time.monotonic()
    other_replica.publish(0, arrived)
    clicked.click()
    assert clicked.wait(5) >= arrived + 0.4


def test_work_waits_for_another_replica_no_longer_than_its_cap(clicked, other_replica, monkeypatch):
    """A replica that never goes quiet (one that died mid-request, say) delays the work by
    YIELD_SECONDS at most."""
    monkeypatch.setattr(lazy, "YIELD_SECONDS", 0.3)
    other_replica.publish(1, time.monotonic())
    before = time.monotonic()
    answered = clicked.click()
    started = clicked.wait(5)
    assert started - before >= 0.3  # it did wait for the other replica...
    assert started - answered < 0.3 + 1.0  # ...and not much past its cap (a busy machine)
    here = lazy._answers._board
    assert here is not None and here.others_busy(time.monotonic(), GAP) == GAP  # still busy
