"""``approvals dev`` as a real process, and ``approvals demo`` against it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.processes import Process, approvals_command, wait_until

ROOT = Path(__file__).resolve().parents[2]
ME = "U0DEV"
#: The dev process must not inherit a Slack workspace or a Redis from the developer's shell.
CLEAN_ENV = {
    "REDIS_URL": "",
    "SLACK_BOT_TOKEN": "",
    "SLACK_APP_TOKEN": "",
    "SLACK_SIGNING_SECRET": "",
    "SLACK_API_URL": "",
    "APPROVALS_CHANNEL": "",
    "APPROVERS": "",
    "APPROVALS_LLM_PLUGINS": "",
}


@dataclass
class Dev:
    """A running ``approvals dev`` and what it told us."""

    process: Process
    data_dir: Path
    url: str
    env: dict[str, str]

    @property
    def info(self) -> dict[str, Any]:
        info: dict[str, Any] = json.loads((self.data_dir / "dev.json").read_text())
        return info

    def output(self) -> str:
        return self.process.output()

    def state(self, user: str = ME, **params: str) -> dict[str, Any]:
        query = "&".join(f"{k}={v}" for k, v in {"user": user, "since": "-1", **params}.items())
        with urllib.request.urlopen(f"{self.url}sandbox/state?{query}", timeout=30) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.url}sandbox/{path}",
            data=json.dumps({"user": ME, **body}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    def run_demo(self) -> str:
        """The demo agent, run in this process as ``approvals demo`` runs it (faster than a
        new process each time); returns the id of the approval it waits for."""
        from approvals.config import Settings
        from approvals.dev.demo import run_demo

        info = self.info
        settings = Settings.from_env(
            {"REDIS_URL": info["redis_url"], "APPROVALS_CHANNEL": info["channel"]}
        )
        outcome = run_demo(settings, self.data_dir / "demo", info.get("requester"))
        assert outcome.status == "paused" and outcome.pause_id
        return outcome.pause_id

    def demo(self) -> str:
        """Run ``approvals demo``; returns the id of the approval it waits for."""
        done = subprocess.run(
            approvals_command("demo", "--data-dir", str(self.data_dir)),
            env={**os.environ, **self.env},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr + done.stdout
        assert f"at {self.url} (approval" in done.stdout
        match = re.search(r"\(approval ([0-9a-f]{16})\)", done.stdout)
        assert match, done.stdout
        return match.group(1)

    def stop(self, sig: int | None = None) -> None:
        if sig is None:
            self.process.stop()
        else:
            self.process.stop(sig)


def start_dev(
    data_dir: Path,
    log: Path,
    extra: dict[str, str] | None = None,
    ready: str = r"ready\. Open (http://\S+/) ",
    args: tuple[str, ...] = (),
    cwd: Path = ROOT,
) -> Dev:
    """Start ``approvals dev --port 0`` (plus ``args``) in ``cwd``; wait for ``ready`` (by
    default: the bot listens behind the sandbox, or has connected to it, whose URL is the
    pattern's group)."""
    env = {
        **CLEAN_ENV,
        "LLM_USER_PATH": str(data_dir.parent / "llm"),
        **(extra or {}),
        "PYTHONPATH": str(ROOT),
    }
    process = Process(
        approvals_command("dev", "--port", "0", "--data-dir", str(data_dir), *args),
        env,
        log,
        cwd,
    )

    def is_ready() -> str | None:
        if process.popen.poll() is not None:
            raise AssertionError(f"approvals dev exited:\n{process.output()}")
        found = re.search(ready, process.output())
        return (found.group(1) if found.groups() else "ready") if found else None

    url = wait_until(is_ready, 40, "approvals dev to be ready")
    return Dev(
        process=process,
        data_dir=data_dir,
        url=url,
        env=env,
    )


@pytest.fixture(scope="session")
def shared_dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    """One ``approvals dev`` for the tests that only add cards and click (it takes seconds
    to start: the bot and the worker are separate Python processes)."""
    folder = tmp_path_factory.mktemp("dev")
    running = start_dev(folder / "data", folder / "dev.log")
    yield running
    running.stop()


@pytest.fixture
def dev(shared_dev: Dev, request: pytest.FixtureRequest) -> Iterator[Dev]:
    """The shared ``approvals dev``; its output is shown when the test fails."""
    yield shared_dev
    if getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed:
        print(f"\n----- approvals dev -----\n{shared_dev.output()[-8000:]}")


def descendants(pid: int) -> dict[int, str]:
    """Every live process below ``pid``, with its command line (for orphan checks)."""
    parents: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(proc.name)] = int(fields[1])
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in found:
                found[child] = command_line(child)
                frontier.append(child)
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
