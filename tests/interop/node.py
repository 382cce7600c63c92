"""Node.js with the npm packages ``package-lock.json`` pins, for the interop tests.

``npm ci`` runs once per version of the lock file, into ``tests/interop/node_modules``
(ignored by git), which then remembers the lock's hash; later sessions reuse it without the
network, and a first install takes the packages from npm's own cache when it has them. Test
processes running at once (pytest-xdist) take turns through a lock on the lock file.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from tests.outside import needed_tool

HERE = Path(__file__).resolve().parent
LOCK = HERE / "package-lock.json"
MODULES = HERE / "node_modules"
#: Where an install records the hash of the lock (and package.json) it installed.
INSTALLED = MODULES / ".approvals-lock-sha256"
#: A first install downloads a few hundred kilobytes; a slow registry gets this long.
INSTALL_TIMEOUT = 300
#: One node process checks a whole batch; starting it and loading the packages is the most.
RUN_TIMEOUT = 60


def node_modules() -> Path:
    """``tests/interop/node_modules`` as the lock file pins it (``npm ci`` if it is not)."""
    npm = needed_tool("npm", "Node.js and npm are missing (Debian: apt-get install nodejs npm)")
    digest = hashlib.sha256(LOCK.read_bytes() + (HERE / "package.json").read_bytes()).hexdigest()
    with LOCK.open("rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if INSTALLED.is_file() and INSTALLED.read_text() == digest:
            return MODULES
        installed = subprocess.run(
            [npm, "ci", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=HERE,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
        )
        assert installed.returncode == 0, f"npm ci failed:\n{installed.stderr}"
        INSTALLED.write_text(digest)
    return MODULES


def run_node(script: str, given: Any) -> Any:
    """Run ``tests/interop/<script>`` with ``given`` as JSON on its standard input; what it
    prints, read as JSON."""
    node = needed_tool("node", "Node.js is missing (Debian: apt-get install nodejs)")
    node_modules()
    ran = subprocess.run(
        [node, str(HERE / script)],
        input=json.dumps(given),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert ran.returncode == 0, f"node {script} failed:\n{ran.stderr}"
    return json.loads(ran.stdout)
