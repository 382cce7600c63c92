"""The Slack Web API stand-in the tests use; it lives in the package, where the sandbox of
``approvals dev`` serves the same code (see ``approvals/dev/sandbox/slack_api.py``)."""

from approvals.dev.sandbox.slack_api import Message, SlackStandIn

__all__ = ["Message", "SlackStandIn"]
