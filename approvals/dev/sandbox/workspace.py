"""The sandbox's Slack workspace: the Web API stand-in plus what a person in Slack would see.

``SlackStandIn`` answers the bot's Web API calls exactly as the tests rely on. On top of it,
this class keeps what a browser needs: ephemeral messages per person, the modal each person
has open (with what they typed and the app's errors), the messages people type, trigger ids
that expire as Slack's do (3 s, single use), where each response URL's answer goes, a revision
number the page long-polls on, and a file that keeps the channel across restarts (so a card
for an approval still pending in Redis is still there to click after ``approvals dev``
restarts).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import json
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from approvals.dev.sandbox.blocks import FormState
from approvals.dev.sandbox.slack_api import (
    ApiError,
    Message,
    Reply,
    SlackStandIn,
    _decode_json_strings,
)

#: Slack's trigger ids may be used once, within 3 seconds.
TRIGGER_SECONDS = 3.0
#: Messages kept in the state file (the oldest are dropped past this).
KEPT_MESSAGES = 2000


@dataclass
class Ephemeral:
    """A message only ``user`` sees (chat.postEphemeral, or a response URL's answer)."""

    id: int
    user: str
    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    thread_ts: str | None = None


@dataclass(frozen=True)
class Origin:
    """Where a response URL was issued: its answers land there."""

    user: str
    channel: str
    message_ts: str | None = None
    ephemeral_id: int | None = None
    thread_ts: str | None = None


@dataclass
class OpenModal:
    view_id: str
    form: FormState = dataclasses.field(default_factory=FormState)


@dataclass(frozen=True)
class Snapshot:
    """A consistent copy of what one person sees, taken under the lock."""

    revision: int
    messages: list[Message]
    ephemerals: list[Ephemeral]
    modal: dict[str, Any] | None
    modal_form: FormState
    home: dict[str, Any] | None


class SandboxSlack(SlackStandIn):
    """The stand-in, extended with the state of a workspace that people use from a browser."""

    def __init__(
        self,
        *,
        token: str,
        users: dict[str, str],
        channels: dict[str, str],
        state_file: Path | None = None,
        app_token: str = "xapp-1-sandbox",
    ) -> None:
        self._last_ts = 0.0
        #: Called when the first Socket Mode connection opens (the bot is ready).
        self.on_connected: Callable[[], None] | None = None
        self._connections = 0
        super().__init__(token=token, app_token=app_token)
        self.users = dict(users)
        self.channels = dict(channels)
        self._state_file = state_file
        self._private: list[Ephemeral] = []
        self._ephemeral_ids = itertools.count(1)
        self._triggers: dict[str, tuple[str, float]] = {}
        self._modals: dict[str, OpenModal] = {}
        self._origins: dict[str, Origin] = {}
        self._revision = 0
        self._changed_cond = threading.Condition(self._lock)
        self._save_lock = threading.Lock()
        #: Serves the paths that are not Slack's (the page); set by ``server.Sandbox``.
        self.pages: Callable[[str, str, Any, bytes], Reply] | None = None
        self._load()

    # ------------------------------------------------------------------ for the page

    @property
    def revision(self) -> int:
        with self._lock:
            return self._revision

    def touch(self) -> None:
        """Tell the page something changed that is not in the workspace (the bot came up)."""
        self._changed()

    def wait_for_change(self, since: int, timeout: float) -> int:
        """Block until the revision passes ``since`` (or ``timeout``); returns the revision."""
        with self._changed_cond:
            self._changed_cond.wait_for(lambda: self._revision > since, timeout)
            return self._revision

    def snapshot(self, user: str) -> Snapshot:
        """Everything ``user`` sees, copied, so the page renders without holding the lock."""
        with self._lock:
            open_modal = self._modals.get(user)
            modal = self._live_views.get(open_modal.view_id) if open_modal else None
            home_id = self._home_view_ids.get(user)
            return Snapshot(
                revision=self._revision,
                messages=copy.deepcopy(list(self._messages.values())),
                ephemerals=copy.deepcopy([e for e in self._private if e.user == user]),
                modal=copy.deepcopy(modal),
                modal_form=open_modal.form if open_modal else FormState(),
                home=copy.deepcopy(self._live_views.get(home_id)) if home_id else None,
            )

    def api_message(self, channel: str, ts: str) -> dict[str, Any]:
        """A message as the Web API shows it (what a click's payload carries)."""
        with self._lock:
            message = self._messages.get((channel, ts))
            if message is None:
                raise KeyError(f"no message {ts} in {channel}")
            return self._as_api(message)

    def ephemeral(self, ephemeral_id: int) -> Ephemeral:
        with self._lock:
            for item in self._private:
                if item.id == ephemeral_id:
                    return copy.deepcopy(item)
        raise KeyError(f"no ephemeral message {ephemeral_id}")

    def live_view(self, view_id: str) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._live_views[view_id])

    def post_as_user(self, user: str, channel: str, text: str, thread_ts: str | None) -> str:
        """A message typed into the composer (the bot is not told: it subscribes to none)."""
        with self._lock:
            ts = self._next_ts()
            self._messages[(channel, ts)] = Message(channel, ts, text, [], thread_ts, user)
        self._changed()
        return ts

    def post_ephemeral(self, user: str, channel: str, text: str, thread_ts: str | None) -> None:
        """An ephemeral from Slack itself (say, a slash command that failed)."""
        with self._lock:
            self._add_ephemeral(user, channel, text, [], thread_ts)
        self._changed()

    def dismiss(self, user: str, ephemeral_id: int) -> None:
        with self._lock:
            kept = [e for e in self._private if not (e.id == ephemeral_id and e.user == user)]
            gone, self._private = len(kept) < len(self._private), kept
        if gone:
            self._changed()

    def issue_trigger(self, user: str) -> str:
        """A trigger id for one interaction, as Slack puts in each click's payload."""
        trigger = f"{int(time.time())}.{secrets.randbelow(10**9)}.{secrets.token_hex(8)}"
        with self._lock:
            self._triggers = {
                k: v for k, v in self._triggers.items() if time.monotonic() - v[1] < 60
            }
            self._triggers[trigger] = (user, time.monotonic())
        return trigger

    def response_url_for(self, origin: Origin) -> str:
        """A response URL whose answers go where ``origin`` says."""
        url = self.new_response_url(channel=origin.channel, message_ts=origin.message_ts)
        with self._lock:
            self._origins[url] = origin
        return url

    def modal_of(self, user: str) -> dict[str, Any] | None:
        with self._lock:
            open_modal = self._modals.get(user)
            view = self._live_views.get(open_modal.view_id) if open_modal else None
            return copy.deepcopy(view)

    def set_modal_form(self, user: str, form: FormState) -> None:
        with self._lock:
            if user in self._modals:
                self._modals[user].form = form
        self._changed()

    def replace_modal(self, user: str, view: dict[str, Any]) -> None:
        """``response_action: update`` (or ``push``): the open modal now shows ``view``."""
        with self._lock:
            open_modal = self._modals.get(user)
            if open_modal is not None:
                self._store_view(open_modal.view_id, view)
                open_modal.form = FormState()
        self._changed()

    def close_modal(self, user: str) -> None:
        with self._lock:
            closed = self._modals.pop(user, None)
        if closed is not None:
            self._changed()

    # ------------------------------------------------------------------ Web API overrides

    def _socket_changed(self) -> None:
        """The bot's WebSocket opened or closed: the page says whether it is connected."""
        self._changed()
        with self._lock:
            was, self._connections = self._connections, self.socket_mode.connections
        if self.on_connected is not None and was == 0 and self._connections > 0:
            self.on_connected()

    def _handle(self, verb: str, path: str, headers: Any, body: bytes) -> Reply:
        reply = super()._handle(verb, path, headers, body)
        if path.startswith(("/api/", "/response/")) and _accepted(reply):
            self._changed()  # a refused call (no token, a bad argument) changed nothing
        return reply

    def _handle_other(self, verb: str, path: str, headers: Any, body: bytes) -> Reply:
        if self.pages is None:
            return super()._handle_other(verb, path, headers, body)
        return self.pages(verb, path, headers, body)

    def _next_ts(self) -> str:
        """Real time, so the page shows when things happened (still strictly increasing)."""
        self._last_ts = max(time.time(), self._last_ts + 0.000001)
        return f"{self._last_ts:.6f}"

    def _views_open(self, args: dict[str, Any]) -> dict[str, Any]:
        trigger = str(args.get("trigger_id") or "")
        with self._lock:
            issued = self._triggers.get(trigger)
            if issued is None:
                raise ApiError("invalid_trigger_id")
            if time.monotonic() - issued[1] > TRIGGER_SECONDS:
                raise ApiError("expired_trigger_id")
            result = super()._views_open(args)
            del self._triggers[trigger]  # used once
            self._modals[issued[0]] = OpenModal(result["view"]["id"])
            return result

    def _views_update(self, args: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            result = super()._views_update(args)
            for open_modal in self._modals.values():
                if open_modal.view_id == result["view"]["id"]:
                    open_modal.form = FormState(values=open_modal.form.values)
            return result

    def _chat_post_ephemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        result = super()._chat_post_ephemeral(args)
        with self._lock:
            thread = str(args["thread_ts"]) if args.get("thread_ts") else None
            blocks = _blocks_of(args)
            self._add_ephemeral(
                str(args["user"]), str(args["channel"]), str(args.get("text") or ""), blocks, thread
            )
        return result

    def _handle_response_url(self, n_text: str, body: bytes) -> Reply:
        reply = super()._handle_response_url(n_text, body)
        with self._lock:
            origin = self._origins.get(f"{self.url}/response/{n_text}")
        if reply.status != 200 or origin is None:
            return reply
        payload = json.loads(body)
        _decode_json_strings(payload)
        with self._lock:
            self._answer(origin, payload)
        return reply

    def _users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        result = super()._users_info(args)
        name = self.users.get(result["user"]["id"])
        if name:
            result["user"].update(name=name, real_name=name)
            result["user"]["profile"].update(real_name=name, display_name=name)
        return result

    def _conversations_info(self, args: dict[str, Any]) -> dict[str, Any]:
        result = super()._conversations_info(args)
        channel = result["channel"]
        channel["name"] = self.channels.get(channel["id"], channel["name"])
        return result

    # ------------------------------------------------------------------ helpers

    def _answer(self, origin: Origin, payload: dict[str, Any]) -> None:
        """Apply a response URL's answer the way Slack does (lock held)."""
        text = str(payload.get("text") or "")
        blocks = _blocks_of(payload)
        if payload.get("delete_original"):
            if origin.ephemeral_id is not None:
                self._private = [e for e in self._private if e.id != origin.ephemeral_id]
            elif origin.message_ts is not None:
                self._messages.pop((origin.channel, origin.message_ts), None)
        elif payload.get("replace_original"):
            for item in self._private:
                if item.id == origin.ephemeral_id:
                    item.text, item.blocks = text, list(blocks)
        elif payload.get("response_type") == "in_channel":
            ts = self._next_ts()
            self._messages[(origin.channel, ts)] = Message(
                origin.channel, ts, text, list(blocks), origin.thread_ts, self.bot_user_id
            )
        else:
            self._add_ephemeral(origin.user, origin.channel, text, list(blocks), origin.thread_ts)

    def _add_ephemeral(
        self, user: str, channel: str, text: str, blocks: list[Any], thread_ts: str | None
    ) -> None:
        self._private.append(
            Ephemeral(
                next(self._ephemeral_ids), user, channel, self._next_ts(), text, blocks, thread_ts
            )
        )

    def _changed(self) -> None:
        with self._changed_cond:
            self._revision += 1
            self._changed_cond.notify_all()
        self._save()

    def _save(self) -> None:
        if self._state_file is None:
            return
        with self._lock:
            messages = list(self._messages.values())[-KEPT_MESSAGES:]
            data = {
                "last_ts": self._last_ts,
                "messages": [{**dataclasses.asdict(m), "updates": []} for m in messages],
            }
        with self._save_lock:
            temporary = self._state_file.with_suffix(".tmp")
            temporary.write_text(json.dumps(data), encoding="utf-8")
            os.replace(temporary, self._state_file)

    def _load(self) -> None:
        if self._state_file is None or not self._state_file.exists():
            return
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            data = json.loads(self._state_file.read_text(encoding="utf-8"))
            with self._lock:
                for item in data["messages"]:
                    message = Message(**item)
                    self._messages[(message.channel, message.ts)] = message
                self._last_ts = float(data["last_ts"])


def _blocks_of(args: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = args.get("blocks")
    return list(blocks) if isinstance(blocks, list) else []


def _accepted(reply: Reply) -> bool:
    """Whether the Web API or a response URL took a request: Slack answers an API call it
    refuses with ``"ok": false`` (and HTTP 200), a response URL with a 4xx."""
    if reply.status >= 400:
        return False
    if not reply.content_type.startswith("application/json"):
        return True
    return bool(json.loads(reply.body).get("ok"))
