"""A scripted llm model, registered through llm's plugin hook (``APPROVALS_LLM_PLUGINS``).

The user prompt is a JSON script: ``{"script": [turn, ...]}``. Turn *n* is played on the
model's *n*-th call of the conversation (counted from the assistant messages in
``prompt.messages``), so the same script continues correctly when a worker resumes the chain
in another process. A turn is ``{"tool_calls": [{"name", "arguments"}, ...]}`` or
``{"text": "..."}``; ``{results}`` in a text is replaced by the JSON of every tool result the
model has received, so tests can check what the model was told.

Every call is appended to the JSONL file named by ``SCRIPTED_LEDGER``, with the messages the
model received: that is how tests count model calls across processes.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import llm
from llm.parts import Message, TextPart, ToolResultPart

MODEL_ID = "scripted"


@llm.hookimpl
def register_models(register: Any) -> None:
    register(Scripted(), AsyncScripted())
    register(Forgetful())


def script(*turns: dict[str, Any]) -> str:
    """The prompt that makes the scripted model play ``turns``."""
    return json.dumps({"script": list(turns)})


def calls(*pairs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """A turn that calls tools: ``calls(("list_files", {"path": "."}), ...)``."""
    return {"tool_calls": [{"name": name, "arguments": args} for name, args in pairs]}


def say(text: str) -> dict[str, Any]:
    return {"text": text}


def _user_script(messages: list[Message]) -> list[dict[str, Any]]:
    for message in messages:
        if message.role == "user":
            text = "".join(p.text for p in message.parts if isinstance(p, TextPart))
            return list(json.loads(text)["script"])
    raise ValueError("the scripted model needs a user message holding a script")


def _results(messages: list[Message]) -> list[dict[str, str]]:
    return [
        {"name": p.name, "output": p.output}
        for m in messages
        if m.role == "tool"
        for p in m.parts
        if isinstance(p, ToolResultPart)
    ]


def _play(prompt: Any, response: Any, api: str) -> str | None:
    """Play the script's next turn: its tool calls go on the response, its text is returned."""
    messages = list(prompt.messages)
    turn_index = sum(1 for m in messages if m.role == "assistant")
    turns = _user_script(messages)
    _ledger(turn_index, messages, api)
    turn = turns[turn_index] if turn_index < len(turns) else {"text": "(script ended)"}
    for call in turn.get("tool_calls", []):
        response.add_tool_call(llm.ToolCall(name=call["name"], arguments=call["arguments"]))
    text = turn.get("text")
    return text.replace("{results}", json.dumps(_results(messages))) if text else None


class Scripted(llm.Model):
    model_id = MODEL_ID
    can_stream = False
    supports_tools = True

    def execute(
        self, prompt: Any, stream: bool, response: Any, conversation: Any = None
    ) -> Iterator[str]:
        text = _play(prompt, response, "sync")
        if text:
            yield text


class AsyncScripted(llm.AsyncModel):
    """The same script through llm's async API (the ledger says which API played a turn)."""

    model_id = MODEL_ID
    can_stream = False
    supports_tools = True

    async def execute(
        self, prompt: Any, stream: bool, response: Any, conversation: Any = None
    ) -> AsyncIterator[str]:
        text = _play(prompt, response, "async")
        if text:
            yield text


def _ledger(turn: int, messages: list[Message], api: str) -> None:
    path = os.environ.get("SCRIPTED_LEDGER")
    if not path:
        return
    entry = {
        "pid": os.getpid(),
        "turn": turn,
        "api": api,
        "messages": [m.to_dict() for m in messages],
    }
    with open(path, "a", encoding="utf-8") as ledger:
        ledger.write(json.dumps(entry) + "\n")


class Forgetful(llm.Model):
    """A model that cannot continue a conversation (llm refuses it a history): a paused run
    on it could never resume, which ``approvals doctor`` must say."""

    model_id = "forgetful"
    supports_tools = True
    supports_conversation = False

    def execute(
        self, prompt: Any, stream: bool, response: Any, conversation: Any = None
    ) -> Iterator[str]:
        yield "?"
