"""``approvals dev`` and ``approvals demo``: run everything locally, and try it.

``dev`` owns a Redis server (unless ``REDIS_URL`` is set), serves the Slack sandbox (unless
Slack tokens are set) and supervises the production ``approvals bot`` and ``approvals worker``
commands. It writes ``<data-dir>/dev.json`` so that ``demo`` finds its Redis and channel
without any configuration, and ``<data-dir>/env``, the environment an agent or a second
terminal needs (``set -a; . .approvals/env; set +a``): ``approvals doctor`` passes in it.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import click

from approvals import store
from approvals.config import Settings
from approvals.dev.redis_server import OwnedRedis
from approvals.dev.sandbox.server import Sandbox
from approvals.dev.supervisor import ChildSpec, LineHandler, Supervisor
from approvals.errors import ApprovalsError

DEFAULT_DATA_DIR = ".approvals"
SANDBOX_CHANNEL = "C0APPROVALS"
#: The people in the sandbox: you (the first, who decides by default) and a teammate, on
#: whose behalf the demo agent runs (nobody may approve their own request).
SANDBOX_USERS = {"U0DEV": getpass.getuser(), "U0TEAMMATE": "teammate"}
DEMO_REQUESTER = "U0TEAMMATE"
DEMO_MODULE = "approvals.dev.demo"
#: The llm plugin with the demo's offline model (also an entry point: any process finds it).
MODEL_MODULE = "approvals.dev.model"
INFO_FILE = "dev.json"
ENV_FILE = "env"
#: What an agent or a second terminal needs of the bot's and the worker's environment.
AGENT_VARIABLES = (
    "REDIS_URL",
    "APPROVALS_CHANNEL",
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_API_URL",
    "SLACK_APP_TOKEN",
    "APPROVALS_TOOL_MODULES",
    "APPROVALS_LLM_PLUGINS",
)
#: Seconds the command that restarts this ``approvals dev`` stays in Redis unless refreshed.
ANNOUNCE_TTL = 30
_LISTENING = "approvals bot listening on "
F = TypeVar("F", bound=Callable[..., Any])


def _data_dir(help: str) -> Callable[[F], F]:
    return click.option(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        show_default=True,
        type=click.Path(file_okay=False, path_type=Path),
        help=help,
    )


@click.command(name="dev")
@click.option(
    "--port",
    default=3000,
    show_default=True,
    help="Port of the sandbox (with Slack tokens: of the bot in HTTP mode); 0 picks a free one.",
)
@click.option("--sandbox", is_flag=True, help="Use the local sandbox even if Slack tokens are set.")
@click.option(
    "--socket-mode",
    is_flag=True,
    help="Run the bot in Socket Mode behind the sandbox: it dials the sandbox's WebSocket, "
    "and clicks, commands and events arrive over it instead of as signed HTTP requests.",
)
@click.option(
    "--tools",
    "tool_modules",
    multiple=True,
    metavar="MODULE",
    help="A module (and its submodules) the worker may import your agent's tools from; "
    "repeat it for more. Added to APPROVALS_TOOL_MODULES and the demo's own module.",
)
@_data_dir("Where Redis keeps its data, the sandbox its channel, and `env` the agents' settings.")
def dev_run(
    port: int, sandbox: bool, socket_mode: bool, tool_modules: tuple[str, ...], data_dir: Path
) -> None:
    """Run Redis, the bot, a worker and a local Slack sandbox: no workspace, no setup."""
    try:
        with _redis(data_dir) as redis_url:
            use_sandbox = sandbox or socket_mode or not os.environ.get("SLACK_BOT_TOKEN")
            with _slack(use_sandbox, socket_mode, port, data_dir) as slack:
                _supervise(data_dir, redis_url, slack, port, tool_modules)
    except ApprovalsError as exc:
        raise click.ClickException(str(exc)) from None


@click.command(name="demo")
@_data_dir("The --data-dir of the running approvals dev (the demo's folders go there too).")
def demo_run(data_dir: Path) -> None:
    """Run an offline demo agent that lists files, then asks to delete one."""
    from approvals.dev.demo import AGENT, run_demo

    info = _read_info(data_dir)
    env = {**os.environ}
    for name, key in (("REDIS_URL", "redis_url"), ("APPROVALS_CHANNEL", "channel")):
        env[name] = env.get(name) or str(info.get(key) or "")
    if not env["REDIS_URL"]:
        raise click.ClickException(
            f"approvals dev is not running with --data-dir {data_dir}; start it, or set REDIS_URL"
        )
    try:
        outcome = run_demo(Settings.from_env(env), data_dir / "demo", info.get("requester"))
    except ApprovalsError as exc:
        raise click.ClickException(str(exc)) from None
    where = info.get("sandbox_url") or "your Slack channel"
    click.echo(f"{AGENT} listed its build folder and now asks to delete a file.")
    click.echo(f"Approve, reject or edit its card at {where} (approval {outcome.pause_id}).")


@contextlib.contextmanager
def _redis(data_dir: Path) -> Iterator[str]:
    """``REDIS_URL`` when set; else a Redis server owned by this process, for its lifetime."""
    if os.environ.get("REDIS_URL"):
        click.echo(f"approvals dev: using REDIS_URL={os.environ['REDIS_URL']}")
        yield os.environ["REDIS_URL"]
        return
    _make_data_dir(data_dir)
    server = OwnedRedis(data_dir / "redis")
    url = server.start()
    try:
        click.echo(f"approvals dev: Redis {server.version()} at {url} (AOF on, {server.folder})")
        yield url
    finally:
        server.stop()


@contextlib.contextmanager
def _slack(
    use_sandbox: bool, socket_mode: bool, port: int, data_dir: Path
) -> Iterator[Sandbox | None]:
    if not use_sandbox:
        mode = "Socket Mode" if os.environ.get("SLACK_APP_TOKEN") else f"HTTP on port {port}"
        click.echo(f"approvals dev: connecting to your Slack workspace ({mode})")
        yield None
        return
    _make_data_dir(data_dir)
    channel = os.environ.get("APPROVALS_CHANNEL") or SANDBOX_CHANNEL
    sandbox = Sandbox(
        channel=channel,
        channel_name="approvals",
        users=SANDBOX_USERS,
        state_file=data_dir / "sandbox.json",
        socket_mode=socket_mode,
    )
    try:
        sandbox.start(port=port)
    except OSError as exc:
        raise click.ClickException(f"cannot serve the sandbox on port {port}: {exc}") from None
    try:
        mode = " (the bot in Socket Mode)" if socket_mode else ""
        click.echo(f"approvals dev: Slack sandbox at {sandbox.url}{mode}")
        yield sandbox
    finally:
        sandbox.stop()


def _supervise(
    data_dir: Path,
    redis_url: str,
    sandbox: Sandbox | None,
    port: int,
    tool_modules: tuple[str, ...] = (),
) -> None:
    env = _child_env(redis_url, sandbox, tool_modules)
    # Behind the sandbox the bot takes any free port; for real Slack, the one asked for.
    bot_port = "0" if sandbox else str(port)
    bot = [sys.executable, "-m", "approvals", "bot", "--host", "127.0.0.1", "--port", bot_port]
    bot += ["--workers", "1"]  # one person clicking: one process is plenty
    specs = [
        ChildSpec("bot", bot, env),
        # Only the bot signs receipts: the worker refuses to start holding the key.
        ChildSpec("worker", [sys.executable, "-m", "approvals", "worker"], _without_key(env)),
    ]
    supervisor = Supervisor(
        specs, sys.stdout, on_line=_bot_watcher(sandbox, lambda text: supervisor.say(text))
    )
    if sandbox is not None and sandbox.link.socket_mode:
        # No port to announce: the bot is ready once its WebSocket is open.
        sandbox.workspace.on_connected = lambda: supervisor.say(_ready(sandbox))
    info = {
        "pid": os.getpid(),
        "redis_url": redis_url,
        "channel": env.get("APPROVALS_CHANNEL", ""),
        "sandbox_url": sandbox.url if sandbox else None,
        "requester": DEMO_REQUESTER if sandbox else None,
    }
    settings = Settings.from_env(env)  # a bad setting stops us here, before any file is written
    info_file = data_dir / INFO_FILE
    _make_data_dir(data_dir)
    info_file.write_text(json.dumps(info, indent=2) + "\n")
    env_file = _write_env(data_dir, env, sandbox)
    _print_banner(env, env_file)
    stop_announcing = _announce(settings)
    previous = _stop_on_signals(supervisor)
    try:
        supervisor.run()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        stop_announcing()
        for written in (info_file, env_file):
            with contextlib.suppress(FileNotFoundError):
                written.unlink()
        click.echo("approvals dev: stopped")


def _without_key(env: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in env.items() if name != "APPROVALS_SIGNING_KEY"}


def _child_env(
    redis_url: str, sandbox: Sandbox | None, tool_modules: tuple[str, ...] = ()
) -> dict[str, str]:
    """The bot's and the worker's whole environment: this one, pointed at our Redis and
    sandbox (the supervisor adds nothing to it)."""
    # The worker resumes the demo agent, so it needs the demo's model and may import its tools.
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "APPROVALS_LLM_PLUGINS": _with_modules("APPROVALS_LLM_PLUGINS", MODEL_MODULE),
        "APPROVALS_TOOL_MODULES": _with_modules(
            "APPROVALS_TOOL_MODULES", *tool_modules, DEMO_MODULE
        ),
    }
    if sandbox is not None:
        env.update(
            SLACK_BOT_TOKEN=sandbox.token,
            SLACK_SIGNING_SECRET=sandbox.signing_secret,
            SLACK_API_URL=sandbox.api_url,
            # Socket Mode: the bot dials the sandbox; else the sandbox posts signed requests.
            SLACK_APP_TOKEN=sandbox.app_token if sandbox.link.socket_mode else "",
            APPROVALS_CHANNEL=sandbox.channel,
        )
    return env


def _with_modules(variable: str, *modules: str) -> str:
    """The comma-separated list in ``variable``, with ``modules`` added (each once)."""
    names = [n.strip() for n in os.environ.get(variable, "").split(",")]
    return ",".join(dict.fromkeys(n for n in [*names, *modules] if n))


def _write_env(data_dir: Path, env: Mapping[str, str], sandbox: Sandbox | None) -> Path:
    """``<data-dir>/env``: what an agent or a second terminal needs, as ``KEY=value`` lines a
    shell sources (``set -a; . .approvals/env; set +a``). The sandbox's tokens are written
    because they are made afresh at each start; a real workspace's tokens are not copied to
    disk (they are in your shell already)."""
    names = AGENT_VARIABLES if sandbox is not None else ("REDIS_URL", "APPROVALS_CHANNEL")
    names = (*names, "APPROVALS_TOOL_MODULES", "APPROVALS_LLM_PLUGINS")
    lines = [
        "# Written by approvals dev at each start, removed when it stops: what an agent or",
        f"# a second terminal needs. Load it with:  set -a; . {data_dir / ENV_FILE}; set +a",
        *(f"{name}={shlex.quote(env.get(name, ''))}" for name in dict.fromkeys(names)),
    ]
    path = data_dir / ENV_FILE
    path.unlink(missing_ok=True)
    path.touch(mode=0o600)  # the sandbox's tokens: yours only
    path.write_text("\n".join(lines) + "\n")
    return path


def _announce(settings: Settings) -> Callable[[], None]:
    """Keep the command that restarts this ``approvals dev`` in Redis while it runs, so an
    agent whose tools its worker would refuse is told that command (``approvals.store.workers``).
    Returns what stops it, and removes the command."""
    command = "approvals " + shlex.join(sys.argv[1:])
    stop = threading.Event()

    def loop() -> None:
        conn = store.connection.connect(settings)
        while True:
            with contextlib.suppress(Exception):  # Redis restarting: the next round says it
                store.workers.announce_dev(conn, command, ANNOUNCE_TTL)
            if stop.wait(ANNOUNCE_TTL / 3):
                break
        with contextlib.suppress(Exception):
            store.workers.forget_dev(conn)
        conn.close()

    thread = threading.Thread(target=loop, name="approvals-dev-announce", daemon=True)
    thread.start()

    def stop_announcing() -> None:
        stop.set()
        thread.join(timeout=5)

    return stop_announcing


def _bot_watcher(sandbox: Sandbox | None, say: Callable[[str], None]) -> LineHandler:
    """Tell the sandbox where the bot listens each time it (re)starts, on its new port."""

    def on_line(name: str, line: str) -> None:
        if sandbox is not None and name == "bot" and _LISTENING in line:
            url = line.split(_LISTENING, 1)[1].strip()
            sandbox.set_bot_url(url)
            say(_ready(sandbox))

    return on_line


def _ready(sandbox: Sandbox) -> str:
    return f"approvals dev: ready. Open {sandbox.url} and run `approvals demo`."


def _stop_on_signals(supervisor: Supervisor) -> dict[int, Any]:
    """Ctrl-C and SIGTERM stop the children in order (a second one is not ignored)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        supervisor.say("approvals dev: stopping the bot and the worker…")
        supervisor.stop()
        default = signal.SIG_DFL if signum == signal.SIGTERM else signal.default_int_handler
        signal.signal(signum, default)

    return {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}


def _print_banner(env: Mapping[str, str], env_file: Path) -> None:
    modules = env["APPROVALS_TOOL_MODULES"].replace(",", ", ")
    click.echo(f"approvals dev: the worker imports tools from {modules} (more: --tools MODULE)")
    click.echo(f"approvals dev: agents and other terminals need this environment, from {env_file}:")
    click.echo(f"  set -a; . {shlex.quote(str(env_file))}; set +a")
    for line in env_file.read_text().splitlines():
        if not line.startswith("#"):
            click.echo(f"  {line}")


def _make_data_dir(data_dir: Path) -> None:
    """Create the folder, and keep git out of it (it holds Redis data and local state)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    ignore = data_dir / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# made by approvals dev\n*\n")


def _read_info(data_dir: Path) -> dict[str, Any]:
    """``dev.json`` of a running ``approvals dev``; empty if none runs on ``data_dir``."""
    try:
        info = json.loads((data_dir / INFO_FILE).read_text())
        os.kill(int(info["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return info if isinstance(info, dict) else {}
