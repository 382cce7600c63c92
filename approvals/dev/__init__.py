"""``approvals dev``: the whole product on one machine, with no Slack workspace and no Redis.

One process owns a Redis server (``redis_server``), runs the Slack sandbox (``sandbox``) and
supervises ``approvals bot`` and ``approvals worker`` (``supervisor``); ``demo`` is an offline
agent to try it with. The bot and the worker are the production commands, unchanged: only
their environment points them at the local Redis and the sandbox.
"""
