"""Run the built image's three services and take one approval through them.

    sudo deploy/build-base.sh          # once, where no registry is reachable
    podman build --isolation chroot --format docker \
        --build-arg BASE=localhost/approvals-base:bookworm -f deploy/Dockerfile -t approvals:local .
    .venv/bin/python deploy/smoke_image.py approvals:local

From the repository root, with the dev extra installed: a private redis-server and the Slack
stand-in the tests use run here; the bot, a worker and the API run from the image (buildah's
chroot isolation, on the host's network, so it also works where the OCI runtime may not set
rlimits or cgroups, as inside another container). It checks what a deployment needs: both
probes answer, an API request becomes a card, a signed click approves it, the waiting
caller gets the decision, and SIGTERM to the image's PID 1 stops each service cleanly. The
bot is probed on ``/healthz``, the API on ``/v1/openapi.json``, as compose.yaml and the
manifests probe them.
The API token is made by the image's own CLI. Slow and needs root: not in CI.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import CHANNEL, SIGNING_SECRET
from tests.e2e import approve_on_card
from tests.slack_standin import SlackStandIn

#: Exit codes of a clean stop. uvicorn raises the signal again once its graceful shutdown is
#: over, so the API ends "terminated by SIGTERM" (128 + 15), as uvicorn means it to.
CLEAN_EXITS = {"worker": {0}, "bot": {0}, "api": {0, 128 + signal.SIGTERM}}


def main(image: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        redis_port, bot_port, api_port = _free_port(), _free_port(), _free_port()
        redis_server = subprocess.Popen(
            ["redis-server", "--port", str(redis_port), "--dir", folder, "--save", ""],
            stdout=subprocess.DEVNULL,
        )
        slack = SlackStandIn().start()
        env = {
            "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
            "SLACK_BOT_TOKEN": slack.token,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": slack.base_url,
            "APPROVALS_CHANNEL": CHANNEL,
            "APPROVALS_TOOL_MODULES": "approvals.dev.demo",
        }
        container = _run(["buildah", "from", image]).strip()
        services: dict[str, subprocess.Popen[bytes]] = {}
        try:
            for name, args in {
                "bot": ["bot", "--workers", "1", "--port", str(bot_port), "--host", "127.0.0.1"],
                "worker": ["worker"],
                "api": ["api", "--port", str(api_port)],
            }.items():
                services[name] = _service(container, env, args, Path(folder) / f"{name}.log")
            _check(f"http://127.0.0.1:{bot_port}/healthz", "the bot's /healthz")
            _check(f"http://127.0.0.1:{api_port}/v1/openapi.json", "the API's probe path")
            token = _output(container, env, ["tokens", "create", "--agent", "smoke"])
            _round_trip(token.splitlines()[-1], slack, bot_port, api_port)
            for name in ("worker", "bot", "api"):
                _stops_on_sigterm(name, services.pop(name))
            print("ok: the image's bot, worker and API work together")
        finally:
            for process in services.values():
                process.send_signal(signal.SIGTERM)
            for process in services.values():
                process.wait(30)
            subprocess.run(["buildah", "rm", container], capture_output=True)
            slack.stop()
            redis_server.terminate()


def _service(
    container: str, env: dict[str, str], args: list[str], log: Path
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        _in_image(container, env, ["tini", "-s", "--", "approvals", *args]),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )


def _output(container: str, env: dict[str, str], args: list[str]) -> str:
    return _run(_in_image(container, env, ["approvals", *args]))


def _in_image(container: str, env: dict[str, str], command: list[str]) -> list[str]:
    settings = [f"--env={key}={value}" for key, value in env.items()]
    run = ["buildah", "run", "--isolation", "chroot", "--network", "host", *settings]
    return [*run, container, "--", *command]


def _round_trip(token: str, slack: SlackStandIn, bot_port: int, api_port: int) -> None:
    api = f"http://127.0.0.1:{api_port}/v1/approvals"
    body = {"tool": "deploy_web", "arguments": {"version": "1.4.3"}}
    created = _json(api, token, body)
    approve_on_card(slack, f"http://127.0.0.1:{bot_port}/slack/events", created["id"])
    decided = _json(f"{api}/{created['id']}?wait=30", token)
    assert decided["status"] == "approved", decided
    print(f"ok: approval {created['id']} asked through the API, approved on its card")


def _stops_on_sigterm(name: str, service: subprocess.Popen[bytes]) -> None:
    """SIGTERM to tini, the image's PID 1, as ``docker stop`` and Kubernetes send it (buildah
    itself kills its command on a signal rather than passing it on)."""
    os.kill(_descendant(service.pid, "tini"), signal.SIGTERM)
    code = service.wait(60)
    assert code in CLEAN_EXITS[name], f"the {name} exited {code} on SIGTERM"
    print(f"ok: the {name} stopped on SIGTERM with exit code {code}", flush=True)


def _descendant(pid: int, name: str) -> int:
    """The pid of the process called ``name`` below ``pid``."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)
        except OSError:
            continue
        child = int(stat.parent.name)
        names[child] = fields[0].split("(", 1)[1]
        parents[child] = int(fields[1].split()[1])
    for child in (p for p, n in names.items() if n == name):
        ancestor = parents[child]
        while ancestor not in (0, 1, pid):
            ancestor = parents.get(ancestor, 0)
        if ancestor == pid:
            return child
    raise SystemExit(f"no {name} process under {pid}")


def _json(url: str, token: str, body: dict[str, object] | None = None) -> dict[str, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=45) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def _check(url: str, what: str) -> None:
    def answers() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    _until(answers, what)
    print(f"ok: {what} answers 200", flush=True)


def _until(condition: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.5)


def _run(command: list[str]) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "localhost/approvals:local")
