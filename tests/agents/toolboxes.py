"""An ``llm.Toolbox`` of the tests' own: a folder of notes, with one gated method.

The worker builds it again from the constructor arguments llm records (``root``), so a
resumed call lands in the same folder as the paused one; every call goes to the ledger with
the folder it used.
"""

from __future__ import annotations

import json
import os

import llm

from approvals import idempotency_key, requires_approval
from tests.agents.tools import _record


class Notes(llm.Toolbox):
    def __init__(self, root: str, owner: str = "nobody") -> None:
        self.root = root
        self.owner = owner

    def list_notes(self) -> str:
        """List the notes."""
        _record("Notes.list_notes", root=self.root)
        return json.dumps(sorted(os.listdir(self.root)))

    def write_note(self, name: str, text: str) -> str:
        """Write a note."""
        _record("Notes.write_note", root=self.root, name=name)
        with open(os.path.join(self.root, name), "w", encoding="utf-8") as note:
            note.write(text)
        return f"wrote {name}"

    @requires_approval(summary="Delete note {name}")
    def delete_note(self, name: str) -> str:
        """Delete a note (waits for a person)."""
        _record("Notes.delete_note", root=self.root, name=name, owner=self.owner,
                key=idempotency_key())  # fmt: skip
        os.remove(os.path.join(self.root, name))
        return f"deleted {name}"
