"""Slack: the card and its thread as Block Kit (``cards``, pure), the Web API calls that post
and redraw them (``web``), and Slack's limits in one place (``limits``)."""
