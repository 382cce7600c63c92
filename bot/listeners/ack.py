"""The acknowledgement every lazy listener starts with.

Bolt answers Slack when a listener's ack function returns (the app runs with
``process_before_response``), and runs the listener's lazy functions after, on its executor:
so the ack function does nothing but acknowledge, and the work is lazy.
"""

from __future__ import annotations

from slack_bolt import Ack


def acknowledge(ack: Ack) -> None:
    """Answer Slack with an empty 200 at once."""
    ack()
