"""The benchmark: how fast the approval loop is, measured on real parts.

``python -m bench`` runs every figure (B1..B8 of the README's Performance section) against a
private ``redis-server``, the Slack stand-in, and real ``approvals bot`` and ``approvals
worker`` processes, prints a Markdown table and writes ``artifacts/bench.json``. Each figure
is measured beside its floor (the cheapest thing that could do the same job on this machine),
so the ratio still means something on a noisy machine. ``--quick`` runs every figure with a
few samples, to prove that the benchmark still works (CI); it never fails on a missed target.
"""
