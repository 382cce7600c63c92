"""Writing runs to llm's own log database, so ``llm logs`` tells the whole story.

llm's Python API never logs by itself (only its CLI does). With ``log=True`` or
``APPROVALS_LLM_LOG``, the agent's process writes the turns it ran up to the pause, and each
worker writes the turns of the resume it ran. All of them use the run id as the conversation
id, so ``llm logs --cid <run id>`` (or ``llm logs -c`` right after) shows one conversation:
the turn that asked for the gated call, the decision as the tool result the model saw
(a rejection's ``Cancelled: rejected by ...``, an edit's note), and the turns after it.

A run whose agent and workers run on different machines logs to each machine's database;
point ``APPROVALS_LLM_LOG`` at a shared path to keep one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import llm
import sqlite_utils
from llm.migrations import migrate

from approvals.config import Settings

log = logging.getLogger(__name__)

#: SQLite allows one writer at a time; in one process, writes take turns here.
_lock = threading.Lock()


def database_path(settings: Settings) -> Path:
    """Where runs are logged: ``APPROVALS_LLM_LOG``'s path, else llm's own ``logs.db``."""
    if settings.llm_log_db:
        return Path(settings.llm_log_db)
    return Path(llm.user_dir()) / "logs.db"  # type: ignore[no-untyped-call]


def write(settings: Settings, responses: Sequence[llm.Response]) -> None:
    """Log these finished responses; a failure is reported and never fails the run."""
    done = [response for response in responses if response._done]
    if not done:
        return
    try:
        with _lock:
            db = sqlite_utils.Database(database_path(settings))
            try:
                migrate(db)  # type: ignore[no-untyped-call]
                for response in done:
                    response.log_to_db(db)  # type: ignore[no-untyped-call]
            finally:
                db.close()
    except Exception:
        log.warning("could not write the run to llm's log database", exc_info=True)


async def write_async(settings: Settings, responses: Sequence[llm.AsyncResponse]) -> None:
    """``write`` for an async chain's responses (llm logs their sync form)."""
    finished = [await r.to_sync_response() for r in responses if r._done]
    write(settings, finished)
