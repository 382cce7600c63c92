"""The other end of B1's floor: one Redis LPUSH -> BLPOP hand-off between two processes.

``python -m bench.peer REDIS_URL`` waits on ``bench:ping``; for each message it reads the wall
clock at once and pushes that time to ``bench:pong``. It stops on ``stop`` or after
``--idle`` seconds without a message.
"""

from __future__ import annotations

import argparse
import time

import redis

PING = "bench:ping"
PONG = "bench:pong"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("redis_url")
    parser.add_argument("--idle", type=float, default=120.0)
    args = parser.parse_args()
    conn = redis.Redis.from_url(args.redis_url)
    conn.ping()
    while True:
        item = conn.blpop([PING], timeout=args.idle)
        received = time.time()
        if item is None or item[1] == b"stop":
            return
        conn.lpush(PONG, repr(received))


if __name__ == "__main__":
    main()
