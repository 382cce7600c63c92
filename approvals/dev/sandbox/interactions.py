"""What a click in the sandbox's page becomes: the request Slack would send the bot.

Each person's action (a button, a modal submission, a slash command, opening the Home tab) is
turned into Slack's payload for it, built from the workspace's real state (the clicked
message as it is now, the open modal's view). In HTTP mode it is signed with the bot's
signing secret and POSTed to the bot's ``/slack/events``; in Socket Mode it goes down the
WebSocket the bot opened, as an envelope the bot acknowledges. The bot's answer is then
applied as Slack applies it: a modal closes, shows errors or changes; a failed slash command
says so.
"""

from __future__ import annotations

import json
import urllib.error
from dataclasses import dataclass
from typing import Any

from approvals.dev.sandbox.blocks import FormState
from approvals.dev.sandbox.slack_requests import (
    JSON,
    block_actions_payload,
    event_callback_payload,
    post_signed,
    send_command,
    send_interaction,
    slash_command_form,
    view_submission_payload,
)
from approvals.dev.sandbox.socket_mode import NoAck, NotConnected
from approvals.dev.sandbox.workspace import Origin, SandboxSlack

#: Slack gives an app 3 seconds to acknowledge; the sandbox allows a little more on a slow CI.
ACK_SECONDS = 5.0


@dataclass(frozen=True)
class Outcome:
    """What the page is told: ``ok``, or an error a person can act on."""

    ok: bool
    error: str | None = None


class BotLink:
    """Sends people's actions to the bot: over HTTP to ``bot_url`` (set once the bot
    listens), or, with ``socket_mode``, down the bot's WebSocket (once it connects)."""

    def __init__(
        self, workspace: SandboxSlack, signing_secret: str, socket_mode: bool = False
    ) -> None:
        self.workspace = workspace
        self.secret = signing_secret
        self.socket_mode = socket_mode
        self.bot_url: str | None = None

    @property
    def ready(self) -> bool:
        """Whether the bot can be reached (it listens, or its WebSocket is open)."""
        if self.socket_mode:
            return self.workspace.socket_mode.connections > 0
        return self.bot_url is not None

    def click(
        self,
        user: str,
        container: dict[str, Any],
        action: dict[str, Any],
        state: dict[str, Any] | None = None,
    ) -> Outcome:
        """A button click (or a choice in a select) on a message, an ephemeral message, a modal
        or the Home tab; ``state`` is what the container's checkboxes hold."""
        try:
            payload = self._click_payload(user, container, action)
            chosen = action.get("selected_option")
            if isinstance(chosen, dict):
                payload["actions"][0] = {
                    "type": "static_select",
                    "action_id": payload["actions"][0]["action_id"],
                    "block_id": payload["actions"][0]["block_id"],
                    "selected_option": {
                        "text": {"type": "plain_text", "text": str(chosen.get("text", ""))},
                        "value": str(chosen.get("value", "")),
                    },
                    "action_ts": payload["actions"][0]["action_ts"],
                }
            if isinstance(state, dict):
                payload["state"] = {"values": state}
        except (KeyError, ValueError, TypeError) as exc:
            return Outcome(False, f"that is gone: {exc}")
        return self._send_interaction(payload)

    def submit(self, user: str, values: dict[str, Any]) -> Outcome:
        """Submit the user's open modal with ``values`` (``view.state.values``)."""
        view = self.workspace.modal_of(user)
        if view is None:
            return Outcome(False, "no modal is open")
        payload = view_submission_payload(
            user_id=user,
            user_name=self.workspace.users.get(user),
            callback_id=str(view.get("callback_id") or ""),
            private_metadata=str(view.get("private_metadata") or ""),
            values=values,
            view_id=str(view["id"]),
            view=view,
            team_id=self.workspace.team_id,
        )
        typed = _typed(values)
        status, body = self._send("interactive", payload)
        if status != 200:
            notice = f"We had some trouble connecting (the app answered {_what(status, body)})."
            self.workspace.set_modal_form(user, FormState(values=typed, notice=notice))
            return Outcome(False, notice)
        self._apply_view_answer(user, body, typed)
        return Outcome(True)

    def command(self, user: str, channel: str, line: str, thread_ts: str | None) -> Outcome:
        """``/command text`` typed into the composer."""
        command, _, text = line.strip().partition(" ")
        origin = Origin(user=user, channel=channel, thread_ts=thread_ts)
        form = slash_command_form(
            user_id=user,
            user_name=self.workspace.users.get(user),
            command=command,
            text=text.strip(),
            channel_id=channel,
            response_url=self.workspace.response_url_for(origin),
            trigger_id=self.workspace.issue_trigger(user),
            team_id=self.workspace.team_id,
        )
        status, body = self._send("slash_commands", form)
        if status != 200:
            error = f'{command} failed with the error "dispatch_failed" ({_what(status, body)})'
            self.workspace.post_ephemeral(user, channel, error, thread_ts)
            return Outcome(False, error)
        if body.strip():
            # An immediate answer in the ack: Slack shows it to the caller only.
            self.workspace.post_ephemeral(user, channel, _ack_text(body), thread_ts)
        return Outcome(True)

    def open_home(self, user: str) -> Outcome:
        """Opening the app's Home tab sends ``app_home_opened``."""
        event = {
            "type": "app_home_opened",
            "user": user,
            "channel": "D" + user[1:],
            "tab": "home",
            "event_ts": f"{self.workspace.revision}.000000",
        }
        callback = event_callback_payload(event, team_id=self.workspace.team_id)
        status, body = self._send("events_api", callback)
        return Outcome(True) if status == 200 else Outcome(False, _what(status, body))

    def _click_payload(
        self, user: str, container: dict[str, Any], action: dict[str, Any]
    ) -> dict[str, Any]:
        common: dict[str, Any] = {
            "user_id": user,
            "user_name": self.workspace.users.get(user),
            "action_id": str(action["action_id"]),
            "value": str(action.get("value") or ""),
            "block_id": str(action.get("block_id") or ""),
            "button_text": str(action.get("text") or ""),
            "trigger_id": self.workspace.issue_trigger(user),
            "team_id": self.workspace.team_id,
        }
        kind = container.get("type")
        if kind == "message":
            channel, ts = str(container["channel"]), str(container["ts"])
            message = self.workspace.api_message(channel, ts)
            origin = Origin(user, channel, message_ts=ts, thread_ts=message.get("thread_ts"))
            return block_actions_payload(
                **common,
                channel_id=channel,
                message_ts=ts,
                message=message,
                response_url=self.workspace.response_url_for(origin),
            )
        if kind == "ephemeral":
            item = self.workspace.ephemeral(int(container["id"]))
            origin = Origin(user, item.channel, ephemeral_id=item.id, thread_ts=item.thread_ts)
            return block_actions_payload(
                **common,
                channel_id=item.channel,
                message_ts=item.ts,
                is_ephemeral=True,
                response_url=self.workspace.response_url_for(origin),
            )
        if kind == "view":
            # Buttons in modals and on the Home tab come without a response URL, as in Slack.
            view = self.workspace.live_view(str(container["view_id"]))
            return block_actions_payload(
                **common, container_type="view", view_id=str(view["id"]), view=view
            )
        raise ValueError(f"unknown container {kind!r}")

    def _send_interaction(self, payload: dict[str, Any]) -> Outcome:
        status, body = self._send("interactive", payload)
        return Outcome(True) if status == 200 else Outcome(False, _what(status, body))

    def _send(self, kind: str, payload: dict[str, Any]) -> tuple[int, str]:
        """Send one request (an envelope type of Socket Mode's: ``interactive``,
        ``slash_commands``, ``events_api``) the way this bot takes them; the answer as HTTP
        would give it, so a bot that is down or slow answers like an HTTP error either way."""
        if self.socket_mode:
            return self._deliver(kind, payload)
        if self.bot_url is None:
            return 503, "the bot is not running yet"
        try:
            if kind == "slash_commands":
                status, body = send_command(self.bot_url, self.secret, payload, timeout=ACK_SECONDS)
            elif kind == "events_api":
                text = json.dumps(payload)
                status, body = post_signed(
                    self.bot_url, self.secret, text, JSON, timeout=ACK_SECONDS
                )
            else:
                status, body = send_interaction(
                    self.bot_url, self.secret, payload, timeout=ACK_SECONDS
                )
        except (urllib.error.URLError, OSError) as exc:
            return 503, f"the bot did not answer: {exc}"
        return int(status), str(body)

    def _deliver(self, kind: str, payload: dict[str, Any]) -> tuple[int, str]:
        """Down the WebSocket: the ack's payload is what an HTTP answer's body would be."""
        if not self.ready:
            return 503, "the bot is not connected yet"
        try:
            answer = self.workspace.deliver(kind, payload, timeout=ACK_SECONDS)
        except NotConnected:
            return 503, "the bot is not connected"
        except NoAck:
            return 504, f"the bot did not acknowledge within {ACK_SECONDS:g} s"
        return 200, json.dumps(answer) if answer else ""

    def _apply_view_answer(self, user: str, body: str, typed: dict[str, Any]) -> None:
        """``response_action``: errors stay in the modal; update/push replace it; else close."""
        answer: dict[str, Any] = {}
        if body.strip():
            try:
                answer = json.loads(body)
            except ValueError:
                answer = {}
        action = answer.get("response_action")
        if action == "errors" and isinstance(answer.get("errors"), dict):
            errors = {str(k): str(v) for k, v in answer["errors"].items()}
            self.workspace.set_modal_form(user, FormState(values=typed, errors=errors))
        elif action in ("update", "push") and isinstance(answer.get("view"), dict):
            self.workspace.replace_modal(user, answer["view"])
        else:
            self.workspace.close_modal(user)


def _typed(values: dict[str, Any]) -> dict[str, dict[str, str | None]]:
    """``{block_id: {action_id: value}}`` out of ``view.state.values``, to show again."""
    typed: dict[str, dict[str, str | None]] = {}
    for block_id, actions in values.items():
        if isinstance(actions, dict):
            typed[str(block_id)] = {
                str(action_id): _typed_value(state) for action_id, state in actions.items()
            }
    return typed


def _typed_value(state: Any) -> str | None:
    """A text or number input's value, or a select's chosen option's value."""
    if not isinstance(state, dict):
        return None
    option = state.get("selected_option")
    value = option.get("value") if isinstance(option, dict) else state.get("value")
    return value if isinstance(value, str) else None


def _what(status: int, body: str) -> str:
    detail = body.strip().splitlines()[0][:200] if body.strip() else "no body"
    return f"HTTP {status}: {detail}"


def _ack_text(body: str) -> str:
    try:
        answer = json.loads(body)
    except ValueError:
        return body.strip()
    return str(answer.get("text") or body) if isinstance(answer, dict) else body
