"""The polling design that agents commonly use today, to compare with B1.

The agent process stays alive and checks, every ``--interval`` seconds, whether a decision
was recorded for its waiting calls; when one was approved, it runs the tool itself. Here the
decision is the one the real bot records (the approval's status in Redis), and the tool is
``bench.ungated.act``, whose first line logs the time like the gated tool's.

``python -m bench.poller REDIS_URL --interval 2 ID[:CALL_ID] ...`` exits when every call ran
or after ``--deadline`` seconds.
"""

from __future__ import annotations

import argparse
import time

import llm

from approvals import store
from approvals.config import Settings
from approvals.models import Status
from bench.ungated import act


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("redis_url")
    parser.add_argument("ids", nargs="+", help="approval_id:tool_call_id")
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--deadline", type=float, default=120.0)
    args = parser.parse_args()
    conn = store.connection.connect(Settings(redis_url=args.redis_url))
    waiting = dict(item.split(":", 1) for item in args.ids)
    stop_at = time.monotonic() + args.deadline
    while waiting and time.monotonic() < stop_at:
        for approval_id, call_id in list(waiting.items()):
            if store.records.load(conn, approval_id).status is Status.APPROVED:
                del waiting[approval_id]
                act(
                    approval_id,
                    llm_tool_call=llm.ToolCall(name="act", arguments={}, tool_call_id=call_id),
                )
        time.sleep(args.interval)


if __name__ == "__main__":
    main()
