"""Tools for the test agents. Each call is appended to ``TOOL_LEDGER`` (JSONL) with its pid,
so a test can tell exactly what ran, with which arguments, how often, and in which process."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from approvals import idempotency_key, requires_approval


def _record(tool: str, **arguments: Any) -> None:
    path = os.environ.get("TOOL_LEDGER")
    if path:
        with open(path, "a", encoding="utf-8") as ledger:
            ledger.write(json.dumps({"tool": tool, "pid": os.getpid(), "arguments": arguments}))
            ledger.write("\n")


def list_files(path: str) -> str:
    """List the files in a folder."""
    _record("list_files", path=path)
    return json.dumps(sorted(["build/app.o", "build/app", "src/app.c"]))


def read_file(path: str) -> str:
    """Read a file."""
    _record("read_file", path=path)
    return f"contents of {path}"


@requires_approval(summary="Delete {path}")
def delete_path(path: str, recursive: bool = False) -> str:
    """Delete a file or folder."""
    _record("delete_path", path=path, recursive=recursive)
    return f"deleted {path}" + (" recursively" if recursive else "")


@requires_approval
def send_email(to: str, subject: str, body: str = "") -> str:
    """Send an email."""
    _record("send_email", to=to, subject=subject, body=body)
    return f"sent to {to}"


@requires_approval(approvals_required=2, summary="Deploy {service}")
def deploy(service: str, version: str = "latest") -> str:
    """Deploy a service (two people must approve)."""
    _record("deploy", service=service, version=version)
    return f"deployed {service}@{version}"


@requires_approval(expires_in=4)
def rotate_key(name: str) -> str:
    """Rotate a key (the approval expires quickly; the agent is told and goes on)."""
    _record("rotate_key", name=name)
    return f"rotated {name}"


@requires_approval(expires_in=4, on_reject="stop")
def drop_table(name: str) -> str:
    """Drop a table (rejection or expiry stops the run)."""
    _record("drop_table", name=name)
    return f"dropped {name}"


@requires_approval(reason_required=True, editable=["dest"], summary="Move {path} to {dest}")
def move_file(path: str, dest: str) -> str:
    """Move a file (only the destination may be edited; rejecting needs a reason)."""
    _record("move_file", path=path, dest=dest)
    return f"moved {path} to {dest}"


@requires_approval(approvers=[], approver_groups=["SOPS"])
def restart_service(name: str) -> str:
    """Restart a service (only members of the SOPS user group may decide)."""
    _record("restart_service", name=name)
    return f"restarted {name}"


@requires_approval(summary="Charge {amount}")
def charge_card(amount: int) -> str:
    """Charge a card. While the file named by HOLD_FILE exists the call blocks, so a test can
    kill the worker in the middle of it."""
    _record("charge_card", amount=amount, key=idempotency_key())
    hold = os.environ.get("HOLD_FILE")
    while hold and os.path.exists(hold):
        time.sleep(0.02)
    _record("charge_card_done", amount=amount, key=idempotency_key())
    return f"charged {amount}"


@requires_approval(expires_in=15)
def purge_cache(region: str) -> str:
    """Purge a CDN cache (expires after 15 s, for tests that restart Redis in between)."""
    _record("purge_cache", region=region)
    return f"purged {region}"


@requires_approval(summary="Set the password of {user}")
def set_password(user: str, new_password: str, api_key: str = "") -> str:
    """Set a user's password (its secret arguments must never reach Slack)."""
    _record("set_password", user=user, new_password=new_password, api_key=api_key)
    return f"password of {user} changed"


@requires_approval(summary="Delete {key}")
def delete_key(key: str) -> str:
    """Delete a key from the store (a bare ``key`` is a name, not a secret: it is shown)."""
    _record("delete_key", key=key)
    return f"deleted {key}"


@requires_approval(summary="Publish {slug}")
async def publish_post(slug: str) -> str:
    """Publish a blog post (a coroutine tool: llm awaits it)."""
    _record("publish_post", slug=slug, key=idempotency_key())
    return f"published {slug}"


async def fetch_page(url: str) -> str:
    """Fetch a page (a free coroutine tool)."""
    _record("fetch_page", url=url)
    return f"<html>{url}</html>"


@requires_approval(grantable=False, summary="Wipe {device}")
def wipe_disk(device: str) -> str:
    """Wipe a disk (its gate allows no grants: every call is asked about)."""
    _record("wipe_disk", device=device)
    return f"wiped {device}"


@requires_approval(expires_in=None, summary="Archive {bucket}")
def archive_bucket(bucket: str) -> str:
    """Archive a bucket (its approval waits indefinitely: it never expires)."""
    _record("archive_bucket", bucket=bucket)
    return f"archived {bucket}"


@requires_approval(summary="Refund {amount}")
async def refund_card(amount: int) -> str:
    """Refund a card (a coroutine tool). While the file named by HOLD_FILE exists the call
    waits, so a test can kill the worker in the middle of it."""
    _record("refund_card", amount=amount, key=idempotency_key())
    hold = os.environ.get("HOLD_FILE")
    while hold and os.path.exists(hold):
        await asyncio.sleep(0.02)
    _record("refund_card_done", amount=amount, key=idempotency_key())
    return f"refunded {amount}"


@requires_approval(expires_in=4)
async def renew_cert(domain: str) -> str:
    """Renew a certificate (a coroutine tool whose approval expires quickly; the agent is
    told and goes on)."""
    _record("renew_cert", domain=domain)
    return f"renewed {domain}"


@requires_approval(expires_in=4, on_reject="stop")
async def drop_index(name: str) -> str:
    """Drop an index (a coroutine tool: rejection or expiry stops the run)."""
    _record("drop_index", name=name)
    return f"dropped {name}"


def schema_head(name: str) -> str:
    """The fingerprint of ``migrate``: the schema version the test wrote beside the ledger
    (agent and worker read the same file, as two processes would read one database)."""
    state = os.environ["TOOL_LEDGER"] + ".schema"
    if not os.path.exists(state):
        return "head:none"
    with open(state, encoding="utf-8") as f:
        return "head:" + f.read().strip()


def migration_plan(name: str) -> str:
    """The preview of ``migrate``: what it would do on the schema as it is now."""
    return f"ALTER TABLE {name} at {schema_head(name)}"


@requires_approval(summary="Migrate {name}", fingerprint=schema_head, preview=migration_plan)
def migrate(name: str) -> str:
    """Run a migration (approved against one schema head; never run against another)."""
    _record("migrate", name=name)
    return f"migrated {name}"


def unreachable_state(name: str) -> str:
    """A fingerprint that cannot be computed: the database it would read is down."""
    raise ConnectionError(f"cannot reach the database holding {name}")


@requires_approval(fingerprint=unreachable_state)
def purge(name: str) -> str:
    """Purge a table (its state cannot be named)."""
    _record("purge", name=name)
    return f"purged {name}"
