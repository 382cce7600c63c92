"""The benchmark still works: ``python -m bench --quick`` runs every figure and reports numbers.

Targets are not checked here (a benchmark is not a timed test); only that nothing crashed and
every figure produced samples.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

from tests.processes import ROOT

EXPECTED = {
    "B1", "B1 fast", "B1 polling", "B1 speed-up", "B2 50", "B2 500",
    "B3 10 KB", "B3 100 KB", "B3 1 MB", "B4", "B4 fast",
    "B5 SimpleWorker x1", "B5 SimpleWorker x2", "B5 Worker x1", "B5 Worker x2",
    "B6 pending", "B6 home", "B7 10 KB", "B7 100 KB", "B8 model", "B8 tools",
}  # fmt: skip


def test_quick_bench_produces_every_figure(tmp_path: Path) -> None:
    """Every figure runs on the real parts and yields finite numbers, within CI's budget."""
    out = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLM_USER_PATH": str(tmp_path / "llm")}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    figures = {f["key"]: f for f in json.loads(out.read_text())["figures"]}
    assert set(figures) == EXPECTED
    for key, figure in figures.items():
        assert figure["error"] is None, key
        assert figure["n"] >= 1 and figure["samples"], key
        assert figure["median"] is not None and math.isfinite(figure["median"]), key
    assert "| B1 |" in done.stdout  # the Markdown table
