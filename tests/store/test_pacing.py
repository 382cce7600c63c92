"""The pace in Redis: cards leave a channel's list in pause order, and workers sharing it
never post faster than its pace, whatever their number."""

from __future__ import annotations

import threading
import time

import redis

from approvals.store import pacing

PACE = pacing.Pace(per_second=50, burst=3)


def _enlist(conn: redis.Redis, channel: str, ids: list[str]) -> None:
    with conn.pipeline() as pipe:
        for approval_id in ids:
            pacing.enlist(pipe, channel, approval_id)
        pipe.execute()


def test_turns_go_to_the_head_of_the_list_one_poster_at_a_time(conn: redis.Redis) -> None:
    """Asked for by the last card, the turn names the first; while it is held nobody else
    gets one; ``done`` takes the posted card off the list."""
    _enlist(conn, "C1", ["a", "b", "c"])
    turn = pacing.take_turn(conn, "C1", "c", PACE, "t1", 5000)
    assert turn.head == "a"
    held = pacing.take_turn(conn, "C1", "b", PACE, "t2", 5000)
    assert held.head is None and held.wait_ms >= pacing.BUSY_MS
    pacing.done(conn, "C1", "t2", "b")  # not the holder: lets nothing go, but b leaves
    assert pacing.waiting(conn, "C1") == ["a", "c"]
    pacing.done(conn, "C1", "t1", "a")
    assert pacing.take_turn(conn, "C1", "c", PACE, "t3", 5000).head == "c"


def test_a_card_off_the_list_is_posted_itself_and_nobody_posts_an_empty_list(
    conn: redis.Redis,
) -> None:
    """A card queued before the list existed gets a turn of its own; asked for nobody, an
    empty list answers that nothing waits."""
    assert pacing.take_turn(conn, "C2", "old", PACE, "t", 5000).head == "old"
    pacing.done(conn, "C2", "t", "old")
    assert pacing.take_turn(conn, "C2", "", PACE, "t", 5000).wait_ms == -1


def test_workers_sharing_a_channel_keep_its_pace_together(conn: redis.Redis) -> None:
    """Eight threads post a hundred cards: in list order, and never more than the burst
    ahead of one interval per post."""
    ids = [f"a{n:03d}" for n in range(100)]
    _enlist(conn, "C3", ids)
    posted: list[tuple[int, str]] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        client = redis.Redis(connection_pool=conn.connection_pool)
        while True:
            turn = pacing.take_turn(client, "C3", "", PACE, f"w{n}", 5000)
            if turn.wait_ms < 0:
                return
            if turn.head is None:
                time.sleep(turn.wait_ms / 1000)
                continue
            with lock:
                posted.append((turn.at_ms, turn.head))
            pacing.done(client, "C3", f"w{n}", turn.head)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert [i for _, i in posted] == ids
    first = posted[0][0]  # on Redis's clock, which granted each turn
    for k, (at, _) in enumerate(posted):
        assert at - first >= (k - (PACE.burst - 1)) * PACE.interval_ms, k


def test_a_429_holds_the_channel_until_retry_after(conn: redis.Redis) -> None:
    """After ``push_back`` nobody gets the channel for Retry-After, then one post at a time."""
    pacing.push_back(conn, "C4", 1, PACE)
    turn = pacing.take_turn(conn, "C4", "x", PACE, "t", 5000)
    assert turn.head is None and 950 <= turn.wait_ms <= 1000
