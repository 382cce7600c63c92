"""The Slack Web API stand-in the tests use; it lives in the package, where the sandbox of
``approvals dev`` serves the same code (see ``approvals/dev/sandbox/slack_api.py``, and
``socket_mode.py`` for its Socket Mode WebSocket)."""

from approvals.dev.sandbox.slack_api import Message, Pace, SlackStandIn
from approvals.dev.sandbox.socket_mode import NoAck, NotConnected

__all__ = ["Message", "NoAck", "NotConnected", "Pace", "SlackStandIn"]
