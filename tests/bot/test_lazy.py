"""Answers first, work after: when the work of an acknowledged click starts."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pytest

from bot.listeners import lazy


@pytest.fixture
def recorded() -> Iterator[tuple[list[str], threading.Event]]:
    order: list[str] = []
    done = threading.Event()
    yield order, done
    done.wait(10)  # no work left running into the next test


def _click(order: list[str], done: threading.Event) -> None:
    """One acknowledged click answered in this thread; its work records when it ran."""

    def handler(**_: object) -> None:
        order.append("work")
        done.set()

    with lazy.answering():
        lazy.acknowledged(handler)()


def test_a_lone_click_s_work_starts_as_soon_as_it_is_answered(recorded, monkeypatch):
    """Its own request does not hold it back (bench B1): it starts long before the cap."""
    order, done = recorded
    monkeypatch.setattr(lazy, "YIELD_SECONDS", 30.0)
    _click(order, done)
    assert done.wait(5), "the work waited for its own request"
    assert order == ["work"]


@contextlib.contextmanager
def _another_request(order: list[str]) -> Iterator[None]:
    """Another request, being answered until the block ends (in a thread of its own)."""
    answering, release = threading.Event(), threading.Event()

    def request() -> None:
        with lazy.answering():
            answering.set()
            release.wait(10)
            order.append("other answered")

    other = threading.Thread(target=request)
    other.start()
    try:
        assert answering.wait(5)
        yield
    finally:
        release.set()
        other.join(5)


def test_work_waits_while_another_request_is_being_answered(recorded, monkeypatch):
    """In a burst every answer goes out before the work of the clicks already answered."""
    order, done = recorded
    monkeypatch.setattr(lazy, "YIELD_SECONDS", 30.0)
    with _another_request(order):
        _click(order, done)
        assert not done.wait(0.3), "the work ran while another request was being answered"
    assert done.wait(5)
    assert order == ["other answered", "work"]


def test_work_waits_no_longer_than_its_cap(recorded, monkeypatch):
    """A request that never ends does not starve the work: it runs after YIELD_SECONDS."""
    order, done = recorded
    monkeypatch.setattr(lazy, "YIELD_SECONDS", 0.2)
    with _another_request(order):
        _click(order, done)
        assert done.wait(5), "the work never ran"
        assert order == ["work"]
