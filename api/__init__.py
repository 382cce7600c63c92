"""``approvals api``: an HTTP API (and an MCP tool, and a Claude Code hook) over ``approvals``.

A thin adapter, like ``bot`` and ``worker``: requests become calls into ``approvals.calls.external``
and ``approvals.proof.tokens``; Slack, the cards and the rules stay where they are.
"""
