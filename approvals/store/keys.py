"""Every Redis key approvals writes, in one table (``KEYS``) and the names that build them.

The table is the whole of Redis in one screen; docs/architecture.md shows it, written from
here (``python -m approvals.cli.docs``), and a test holds every name below to its row, so the
two cannot drift. Each key is read and written by the ``store`` module its row names.

Keys of the approval hash (``approvals:approval:<id>``): ``record`` (JSON), ``status``,
``decided_status``, ``decided_by``, ``decision``, ``votes``, ``result``, ``card_ts``,
``receipt``, ``owed``, ``receipt_error``, ``tool_started``, ``tool_finished``, ``escalated``,
``automatic``, ``stale`` (how many times the state changed after a decision), and on a
turn's lead ``turn_settled``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "approvals:"


@dataclass(frozen=True)
class Key:
    """One row of the table: a key's name (``<...>`` stands for a part that varies), its Redis
    type, what it holds, and the ``store`` module that owns it."""

    name: str
    kind: str
    holds: str
    owner: str


#: Key, type, owner (the ``store`` module that reads and writes it), and what it holds; ``<...>``
#: stands for a part that varies. Columns are two or more spaces apart.
TABLE = """
approvals:approval:<id>               hash    records      the record (JSON) and its status, decision, result, card, marks
approvals:history:<id>                string  records      the llm message history to resume from (JSON list)
approvals:preview:<id>                string  records      the whole of a preview longer than the record holds
approvals:lock:<id>:<what>            string  records      a short lock on one piece of work, posting the card (TTL)
approvals:pending                     zset    transitions  pending approvals, by creation time
approvals:decided                     zset    transitions  the most recent decisions, by decision time
approvals:owed                        zset    owed         decisions whose after-steps are not carried out yet, by decision time
approvals:unshown                     zset    owed         decisions not shown on their card yet, by when to look again
approvals:running                     zset    leases       approvals whose resume is running, by start time
approvals:lease:<id>                  string  leases       held by the worker running the resume (TTL)
approvals:audit:<id>                  list    audit        what happened to the approval: JSON lines, each chained to the one before
approvals:events                      list    audit        the outbox: one entry per state change, for the webhooks
approvals:events:taking               list    outbox       outbox entries a worker is turning into delivery jobs
approvals:webhook:<msg>               string  outbox       a webhook body, the same bytes on every retry (TTL)
approvals:webhook-failing             hash    outbox       receiver URL -> when it began failing (until it answers)
approvals:deadlines                   zset    deadlines    expire:<id>, warn:<id>, remind:<id>, escalate:<id>, by when due
approvals:run:<run>                   stream  runs         wakes a run's waiters: paused again after a resume, ended
approvals:run:<run>:pauses            list    runs         the run's pause ids, in order (TTL)
approvals:outcome:<run>               hash    runs         outcome (JSON), on_finish, on_finish_called (TTL)
approvals:finishing                   zset    runs         runs whose on_finish has not returned, by when they ended
approvals:ends-checked                string  runs         how far workers looked for ended runs with no outcome stored
approvals:finished                    zset    retention    finished approvals whose record is still here, by when
approvals:finished:history            zset    retention    finished approvals whose history is still here, by when
approvals:ended                       zset    retention    ended runs whose outcome is not archived yet, by when
approvals:lock:retention              string  retention    held by the worker sweeping retention (TTL)
approvals:metrics                     hash    metrics      counters and histogram buckets behind /metrics
approvals:grant:<grant>               hash    grants       record (JSON), expires_at, uses, revoked_at, revoked_by
approvals:grants                      zset    grants       grant ids, by creation time
approvals:grants:tool:<tool>          zset    grants       grant ids for one tool (what a gated call looks at)
approvals:answer:<id>                 stream  callers      wakes the caller waiting on an external approval (TTL)
approvals:tokens                      hash    callers      API token digest (SHA-256) -> its record (JSON)
approvals:idem:<agent>:<digest>       string  callers      the approval an idempotency key created (TTL)
approvals:rate:<token>:<minute>       string  callers      requests a token made in that minute (TTL)
approvals:usergroup:<group>           string  caches       cached members of a Slack user group (JSON list, TTL)
approvals:channel-members:<channel>   string  caches       cached members of an escalation channel (JSON list, TTL)
approvals:seen:<signature>            string  caches       a Slack request signature already accepted (TTL)
approvals:receipt:<jti>               string  caches       a receipt already presented (TTL)
approvals:tool-modules:<queue>        zset    workers      what the queue's live workers import tools from (comma-joined), by when it lapses
approvals:dev                         string  workers      how to restart the running `approvals dev` (JSON, TTL)
approvals:replicated                  string  replication  written just before a WAIT, so the WAIT covers every earlier write
approvals:cards:<channel>             list    pacing       approvals whose card waits to be posted in the channel, in pause order (TTL)
approvals:pace:<channel>              string  pacing       when the channel's next post may go, in ms of Redis's clock (TTL)
approvals:posting:<channel>           string  pacing       held by the worker posting in the channel now (TTL)
"""


def _rows(table: str) -> tuple[Key, ...]:
    rows = []
    for line in table.strip().splitlines():
        name, kind, owner, holds = re.split(r" {2,}", line.strip(), maxsplit=3)
        rows.append(Key(name, kind, holds, owner))
    return tuple(rows)


KEYS = _rows(TABLE)

PENDING_KEY = PREFIX + "pending"
DECIDED_KEY = PREFIX + "decided"
OWED_KEY = PREFIX + "owed"
UNSHOWN_KEY = PREFIX + "unshown"
RUNNING_KEY = PREFIX + "running"
DEADLINES_KEY = PREFIX + "deadlines"
FINISHING_KEY = PREFIX + "finishing"
ENDS_CHECKED_KEY = PREFIX + "ends-checked"
FINISHED_KEY = PREFIX + "finished"
FINISHED_HISTORY_KEY = PREFIX + "finished:history"
ENDED_KEY = PREFIX + "ended"
METRICS_KEY = PREFIX + "metrics"
RETENTION_LOCK_KEY = PREFIX + "lock:retention"
EVENTS_KEY = PREFIX + "events"
REPLICATED_KEY = PREFIX + "replicated"
EVENTS_TAKING_KEY = PREFIX + "events:taking"
WEBHOOK_FAILING_KEY = PREFIX + "webhook-failing"
GRANTS_KEY = PREFIX + "grants"
TOKENS_KEY = PREFIX + "tokens"
DEV_KEY = PREFIX + "dev"


def approval_key(approval_id: str) -> str:
    return f"{PREFIX}approval:{approval_id}"


def history_key(approval_id: str) -> str:
    return f"{PREFIX}history:{approval_id}"


def preview_key(approval_id: str) -> str:
    return f"{PREFIX}preview:{approval_id}"


def lock_key(approval_id: str, what: str) -> str:
    return f"{PREFIX}lock:{approval_id}:{what}"


def lease_key(approval_id: str) -> str:
    return f"{PREFIX}lease:{approval_id}"


def audit_key(approval_id: str) -> str:
    return f"{PREFIX}audit:{approval_id}"


def webhook_key(msg: str) -> str:
    return f"{PREFIX}webhook:{msg}"


def run_key(run: str) -> str:
    return f"{PREFIX}run:{run}"


def run_pauses_key(run: str) -> str:
    return f"{PREFIX}run:{run}:pauses"


def outcome_key(run: str) -> str:
    return f"{PREFIX}outcome:{run}"


def grant_key(grant: str) -> str:
    return f"{PREFIX}grant:{grant}"


def grants_tool_key(tool: str) -> str:
    return f"{PREFIX}grants:tool:{tool}"


def answer_key(approval_id: str) -> str:
    return f"{PREFIX}answer:{approval_id}"


def idempotency_key(agent: str, digest: str) -> str:
    return f"{PREFIX}idem:{agent}:{digest}"


def rate_key(token: str, minute: int) -> str:
    return f"{PREFIX}rate:{token}:{minute}"


def members_key(target: str) -> str:
    """Where the members of a Slack user group (``S...``) or a channel are cached."""
    kind = "usergroup" if target.startswith("S") else "channel-members"
    return f"{PREFIX}{kind}:{target}"


def seen_key(signature: str) -> str:
    return f"{PREFIX}seen:{signature}"


def receipt_key(jti: str) -> str:
    return f"{PREFIX}receipt:{jti}"


def tool_modules_key(queue: str) -> str:
    return f"{PREFIX}tool-modules:{queue}"


def channel_cards_key(channel: str) -> str:
    return f"{PREFIX}cards:{channel}"


def channel_pace_key(channel: str) -> str:
    return f"{PREFIX}pace:{channel}"


def channel_posting_key(channel: str) -> str:
    return f"{PREFIX}posting:{channel}"


def table() -> str:
    """``KEYS`` as the Markdown table docs/architecture.md shows."""
    rows = ["| Key | Type | Holds | Owner |", "|---|---|---|---|"]
    rows += [f"| `{k.name}` | {k.kind} | {k.holds} | `store.{k.owner}` |" for k in KEYS]
    return "\n".join(rows) + "\n"
