"""The README's "Gate a tool", word for word, against a real ``approvals dev``, with no model
key: its code block is the user's module, its shell block is what the user types in a second
terminal, and a click in the sandbox approves it. The README cannot drift from what works."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import redis

from approvals import store
from tests.conftest import wait_until
from tests.dev.conftest import CLEAN_ENV, ROOT, start_dev
from tests.dev.test_dev import approve, card_of, card_showing

SECTION = re.search(
    r"^## Gate a tool\n(.+?)^## ", (ROOT / "README.md").read_text(), re.DOTALL | re.MULTILINE
)
assert SECTION is not None, "the README has no 'Gate a tool' section"
CODE = re.search(r"```python\n(.+?)```", SECTION.group(1), re.DOTALL)
SHELL = re.search(r"```sh\n(.+?)```", SECTION.group(1), re.DOTALL)
DEV = re.search(r"`approvals dev ((?:--tools \S+ ?)+)`", SECTION.group(1))


def user_folder(tmp_path: Path) -> tuple[Path, str]:
    """A folder holding the README's module, named as its first line says; and that name."""
    assert CODE and SHELL and DEV, "Gate a tool lost its code, its shell lines or its command"
    name = re.match(r"# (\w+)\.py", CODE.group(1))
    assert name, "the code block's first line names no module file"
    folder = tmp_path / "me"
    folder.mkdir()
    (folder / f"{name.group(1)}.py").write_text(CODE.group(1))
    return folder, name.group(1)


def second_terminal(folder: Path, llm_dir: Path, script: str) -> subprocess.CompletedProcess[str]:
    """``script`` in bash, in ``folder``, as in a fresh terminal with the venv active and no
    model key or approvals setting inherited from this one."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.endswith("_API_KEY") and not name.startswith("APPROVALS_")
    }
    env.update(CLEAN_ENV)
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        LLM_USER_PATH=str(llm_dir),
        PYTHONPATH=str(ROOT),
    )
    return subprocess.run(
        ["bash", "-c", f"set -e\n{script}"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_gate_a_tool_runs_as_printed_against_approvals_dev(tmp_path):
    folder, module = user_folder(tmp_path)
    assert DEV and DEV.group(1).split() == ["--tools", module]
    dev = start_dev(
        folder / ".approvals", tmp_path / "dev.log", args=tuple(DEV.group(1).split()), cwd=folder
    )
    try:
        assert f"the worker imports tools from {module}, approvals.dev.demo" in dev.output()
        conn = redis.Redis.from_url(dev.info["redis_url"])
        wait_until(lambda: store.workers.allow_lists(conn, "approvals"), 30, "the worker's list")
        assert SHELL
        done = second_terminal(folder, tmp_path / "llm", SHELL.group(1))
        assert done.returncode == 0, done.stdout + done.stderr
        paused = re.fullmatch(r"paused ([0-9a-f]{16})\n", done.stdout)
        assert paused, done.stdout + done.stderr
        approval_id = paused.group(1)

        ts, html = card_of(dev, approval_id)
        assert "Delete build/app.o" in html and "cleanup-bot" in html
        approve(dev, approval_id, ts)
        card_showing(dev, ts, "Completed")
        answer = "Done: deleted build/app.o."  # the README promises this line
        assert answer in SECTION.group(1)  # type: ignore[union-attr]
        thread = wait_until(
            lambda: answer in (t := dev.state(thread=ts)["thread"]) and t, 20, "the answer"
        )
        assert "Approved by" in thread
        assert not (folder / "build" / "app.o").exists()
        events = [line.decode() for line in store.audit.audit_lines(conn, approval_id)]
        assert sum('"resume_started"' in e for e in events) == 1  # the tool ran once
        assert sum('"tool_output": "deleted build/app.o"' in e for e in events) == 1
        conn.close()
    finally:
        dev.stop()


def test_without_its_module_allowed_the_agent_is_told_the_command_before_any_card(tmp_path, dev):
    """The shared ``approvals dev`` was started without ``--tools``: ``run_agent`` refuses
    before the first model call and prints the exact command that fixes it."""
    folder, module = user_folder(tmp_path)
    conn = redis.Redis.from_url(dev.info["redis_url"])
    wait_until(lambda: store.workers.allow_lists(conn, "approvals"), 30, "the worker's list")
    pending = conn.zcard(store.keys.PENDING_KEY)
    env_file = shlex.quote(str(dev.data_dir / "env"))
    done = second_terminal(
        folder,
        tmp_path / "llm",
        f"set -a; . {env_file}; set +a\nmkdir -p build && touch build/app.o\npython -m {module}",
    )
    assert done.returncode == 1
    fix = f"  approvals dev --port 0 --data-dir {dev.data_dir} --tools {module}"
    assert done.stderr.rstrip().endswith(f"restart approvals dev with it allowed:\n{fix}")
    assert f"not from {module} (list_files, delete_path)" in done.stderr
    assert conn.zcard(store.keys.PENDING_KEY) == pending  # no card was posted
    assert (folder / "build" / "app.o").exists()
    conn.close()
