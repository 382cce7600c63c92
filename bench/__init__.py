"""The benchmark: how fast the approval loop is, measured on real parts.

``python -m bench`` runs every figure (B1..B8) against a private ``redis-server``, the Slack
stand-in, and real ``approvals bot`` (on gunicorn) and ``approvals worker`` processes, prints
a Markdown table, writes ``artifacts/bench.json`` and, from it, ``docs/performance.md``. Each figure
is measured beside its floor (the cheapest thing that could do the same job on this machine),
so the ratio still means something on a noisy machine. ``--quick`` runs every figure with a
few samples, to prove that the benchmark still works (CI); it never fails on a missed target
and leaves ``docs/performance.md`` alone unless ``--docs`` is given.
"""
