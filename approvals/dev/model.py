"""``approvals-demo``: an offline llm model that calls tools, to try approvals with no key.

It is an llm plugin (the ``llm`` entry point of this package, and ``APPROVALS_LLM_PLUGINS=
approvals.dev.model``, which ``approvals dev`` gives its bot and worker), so
``llm.get_model("approvals-demo")`` finds it in any process: the demo agent's, your own
agent's from the README, and the worker that resumes them. It imports nothing but llm.

It plays a tidy-up agent with two tools, ``list_files(path)`` and ``delete_path(path)``, and
works out each turn from the conversation so far (so a worker can resume it): turn one lists
the folder the prompt names (the first word with a ``/`` in it, else ``.``), turn two asks to
delete the first object file (``*.o``) listed, turn three says what happened, so a
rejection's reason and an edit show up in its answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import llm
from llm.parts import Message, TextPart, ToolResultPart

MODEL_ID = "approvals-demo"


@llm.hookimpl
def register_models(register: Any) -> None:
    register(TidyModel())


class TidyModel(llm.Model):
    """Plays three turns, worked out from the conversation so far (so a worker can resume it)."""

    model_id = MODEL_ID
    can_stream = False
    supports_tools = True

    def execute(
        self, prompt: Any, stream: bool, response: Any, conversation: Any = None
    ) -> Iterator[str]:
        messages: list[Message] = list(prompt.messages)
        turn = sum(1 for m in messages if m.role == "assistant")
        results = [p for m in messages if m.role == "tool" for p in m.parts]
        last = next((p for p in reversed(results) if isinstance(p, ToolResultPart)), None)
        if turn == 0:
            folder = _folder_in(messages)
            response.add_tool_call(llm.ToolCall(name="list_files", arguments={"path": folder}))
        elif turn == 1 and last is not None and (target := _object_file(last.output)):
            response.add_tool_call(llm.ToolCall(name="delete_path", arguments={"path": target}))
        elif turn == 1:
            yield "There is nothing to tidy up: I found no object files."
        else:
            yield _report(last.output if last is not None else "")


def _folder_in(messages: list[Message]) -> str:
    """The folder the prompt names: the demo's ``Tidy up <folder>: ...``, else its first
    word with a ``/`` in it (``Clean up ./build``), else the current folder."""
    prompt = " ".join(
        p.text for m in messages if m.role == "user" for p in m.parts if isinstance(p, TextPart)
    )
    match = re.search(r"Tidy up (.+?): ", prompt)
    if match:
        return match.group(1)
    words = [w.rstrip(".,:;!?\"'") for w in prompt.split() if "/" in w]
    return next((w for w in words if w), ".")


def _object_file(listing: str) -> str | None:
    return next((line for line in listing.splitlines() if line.endswith(".o")), None)


def _report(output: str) -> str:
    """The final answer: what the last tool call did (an edit note comes first, if any)."""
    if output.startswith("Cancelled:"):
        return f"I left the files alone ({output.removeprefix('Cancelled: ')})."
    lines = output.strip().splitlines() or [""]
    note = f" ({lines[0].strip('[]')})" if len(lines) > 1 else ""
    return f"Done: {lines[-1]}.{note}"
