"""Log lines for people or for log collectors, each tagged with the approval it is about.

``configure_logging`` gives the ``approvals bot`` and ``approvals worker`` processes one root
handler, in the format ``APPROVALS_LOG_FORMAT`` names: ``text`` for a terminal, ``json`` (one
object per line) for collectors that should not have to parse free text. Every library logs
through it: RQ installs its own handlers only when no ancestor logger has one, so with this
handler in place RQ's worker and scheduler lines come out in the same format.

``bind_approval(approval_id)`` marks the code that handles one approval. A filter on the
handler copies the bound id into every record as ``approval_id``, so a line written by llm,
slack_sdk or RQ inside that block can be found by the approval's id, without every call site
passing it along. The id lives in a ``ContextVar``: it follows the code through function calls
in the same thread (and asyncio task), and threads started inside the block do not see it
unless they are started with ``contextvars.copy_context().run``.
"""

from __future__ import annotations

import json
import logging
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TextIO

from approvals.config import Settings

_approval_id: ContextVar[str | None] = ContextVar("approval_id", default=None)

#: Marks the handler ``configure_logging`` installed, so that calling it again replaces it.
_OURS = "_approvals_handler"
#: RQ's INFO lines that repeat while nothing happens (the registry sweep of every maintenance
#: round, the pub/sub channel) or that say again what a job's one line says (that it was
#: taken, "Job OK", how long its result is kept). Each job keeps RQ's "Successfully completed"
#: line, and a failure its warning and traceback. Matched by the unformatted template, which
#: RQ keeps from version to version; one that changes only shows again.
_RQ_CHATTER = frozenset(
    {
        "Worker %s: cleaning registries for queue: %s",
        "Worker %s: cleaning group registries",
        "Worker %s: subscribing to channel %s",
        "Worker %s: unsubscribing from channel %s",
        "Worker %s: %s: %s (%s)",  # a job taken (with its description), and "Job OK"
        "Worker %s: %s: %s",  # a job taken
        "Worker %s: job %s result discarded immediately",
        "Worker %s: job %s result is kept for %s seconds",
        "Worker %s: job %s result will never expire, clean up result key manually",
    }
)
#: Libraries whose INFO lines say nothing an operator acts on: Alembic names the plugins it
#: loads, and the database it found each time the archive's schema is checked (as a worker
#: does when the archive is down, every retry).
_QUIET_BELOW_WARNING = ("alembic",)


@contextmanager
def bind_approval(approval_id: str) -> Iterator[None]:
    """Tag every log record emitted inside the block with ``approval_id``.

    Blocks nest: the inner id wins inside, and the outer one is back after it.
    """
    token = _approval_id.set(approval_id)
    try:
        yield
    finally:
        _approval_id.reset(token)


def current_approval() -> str | None:
    """The id bound by the innermost ``bind_approval`` around the caller, if any."""
    return _approval_id.get()


class ApprovalFilter(logging.Filter):
    """Copies the bound approval id into each record as ``approval_id`` (None when unbound).

    It sits on the handler, not on a logger: a logger's filters see only the records logged on
    that very logger, a handler's see every record that propagates to it. An ``approval_id``
    passed with ``extra=`` is kept.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "approval_id", None) is None:
            record.approval_id = _approval_id.get()
        return True


def is_chatter(record: logging.LogRecord) -> bool:
    """Whether a record is one of RQ's repeated INFO lines (``_RQ_CHATTER``)."""
    return (
        record.levelno == logging.INFO
        and record.name.startswith("rq.")
        and isinstance(record.msg, str)
        and record.msg in _RQ_CHATTER
    )


def _log_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A Python warning as one log line (``warnings.showwarning``): where, what, and no
    source line, so a warning is one line in a terminal as in a collector."""
    logging.getLogger("py.warnings").warning(
        "%s:%d: %s: %s", filename, lineno, category.__name__, message
    )


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines in messages and tracebacks escaped).

    Keys: ``time`` (ISO-8601, UTC), ``level``, ``logger``, ``message``, ``pid`` (a forking
    worker's work-horse has its own), then ``approval_id`` when one is bound and
    ``exception`` (the traceback) when the record carries one.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        approval_id = getattr(record, "approval_id", None)
        if approval_id is not None:
            entry["approval_id"] = approval_id
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``<time> <LEVEL> <logger> [approval <id>] <message>``, the tag only when one is bound."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        approval_id = getattr(record, "approval_id", None)
        tag = f" [approval {approval_id}]" if approval_id is not None else ""
        return f"{record.asctime} {record.levelname} {record.name}{tag} {record.message}"


def configure_logging(settings: Settings, stream: TextIO | None = None) -> logging.Handler:
    """Send every log record of this process to ``stream`` (default stderr) at INFO and above.

    Call it once at process start, before RQ's ``Worker.work()`` (which would otherwise install
    its own plain-text handlers). Calling it again replaces the handler it installed before;
    handlers that others added to the root logger (pytest's, for instance) are left alone.
    Python warnings are routed through logging too, one line each, so that in ``json`` mode no
    stray multi-line text lands between the JSON lines. RQ's repeated INFO lines are left out
    (``_RQ_CHATTER``): one line per job, none while the worker idles.

    Returns the handler, so a caller (a test) can remove it again.
    """
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    formatter = JsonFormatter() if settings.log_format == "json" else TextFormatter()
    handler.setFormatter(formatter)
    handler.addFilter(ApprovalFilter())
    handler.addFilter(lambda record: not is_chatter(record))
    setattr(handler, _OURS, True)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _OURS, False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    for name in _QUIET_BELOW_WARNING:
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.showwarning = _log_warning
    return handler
