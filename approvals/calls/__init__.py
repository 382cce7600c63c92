"""The llm side of an approval: a gated call pauses, is asked for, and runs once decided.

``gate`` marks the tools that wait; ``agent`` runs a chain until it ends or pauses and saves
the pause; ``external`` asks for a call made outside llm (the HTTP API, MCP, a hook);
``outcomes`` says what a run ended with; ``tools`` and ``plugins`` find tools and models again
in another process; ``llm_log`` writes runs to llm's own log.
"""
