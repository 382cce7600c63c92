"""Tools from outside the venv that the tests check the product with (Node.js and npm,
promtool, docker-compose, kubectl): found on ``PATH`` or in the venv's own ``bin``.

CI must have each (``.ci/run`` installs what this machine lacks); elsewhere a test whose tool
is missing is skipped, saying how to get it.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest


def find_tool(name: str) -> str | None:
    """A command from the venv running the tests (the dev extra's wrappers), else from PATH."""
    return shutil.which(name, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def needed_tool(name: str, why: str) -> str:
    """The command ``name``: missing, a failure in CI, a skip elsewhere (``why`` says how to
    get it)."""
    found = find_tool(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return found
