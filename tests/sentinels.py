"""A Redis primary, its replicas and the Sentinels that watch them, as real processes on
loopback: Debian's ``redis-server`` (``--sentinel`` runs a Sentinel from the same binary).
Shared by the tests (``tests/store/test_sentinel.py``) and the benchmark (B11); nothing here
imports pytest."""

from __future__ import annotations

import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.processes import free_port, start_redis, wait_until

SERVICE = "approvals"


@dataclass
class Node:
    """One redis-server (primary or replica) of the topology."""

    port: int
    process: subprocess.Popen[bytes]

    def client(self, timeout: float = 2.0) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=timeout, socket_connect_timeout=timeout)

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class Topology:
    """A primary, its replicas and the Sentinels, all on 127.0.0.1."""

    binary: str
    folder: Path
    nodes: list[Node]
    sentinels: list[tuple[int, subprocess.Popen[bytes]]]
    down_after_ms: int
    killed: list[Node] = field(default_factory=list)

    def env(self, db: int = 0) -> dict[str, str]:
        """What a process of the product is given: only where the Sentinels are. The host and
        port of ``REDIS_URL`` point nowhere (port 9, discard): only its database counts."""
        return {
            "REDIS_SENTINELS": ",".join(f"127.0.0.1:{port}" for port, _ in self.sentinels),
            "REDIS_SENTINEL_SERVICE": SERVICE,
            "REDIS_URL": f"redis://127.0.0.1:9/{db}",
        }

    def sentinel(self, index: int = 0) -> redis.Redis:
        return redis.Redis(port=self.sentinels[index][0], socket_timeout=2, decode_responses=True)

    def named_ports(self) -> list[int | None]:
        """The primary's port as each Sentinel names it (None: that one does not answer)."""
        ports: list[int | None] = []
        for index in range(len(self.sentinels)):
            with self.sentinel(index) as sentinel:
                try:
                    ports.append(int(sentinel.sentinel_get_master_addr_by_name(SERVICE)[1]))
                except redis.RedisError:
                    ports.append(None)
        return ports

    def primary_port(self) -> int:
        """The primary's port, as the first Sentinel that answers names it."""
        for port in self.named_ports():
            if port is not None:
                return port
        raise AssertionError("no Sentinel answers")

    def primary(self) -> Node:
        port = self.primary_port()
        return next(node for node in self.nodes if node.port == port)

    def replicas(self) -> list[Node]:
        port = self.primary_port()
        return [node for node in self.nodes if node.port != port and node.alive()]

    def kill_primary(self) -> Node:
        """SIGKILL the primary; returns it (``failover_done`` waits for its successor)."""
        node = self.primary()
        node.process.send_signal(signal.SIGKILL)
        node.process.wait(10)
        self.killed.append(node)
        return node

    def failover_done(self, old: Node, timeout: float = 30.0) -> Node:
        """The new primary, once every Sentinel names it and it answers as a primary."""

        def promoted() -> Node | None:
            ports = set(self.named_ports())
            if len(ports) != 1 or old.port in ports or None in ports:
                return None
            node = next(n for n in self.nodes if n.port in ports)
            with node.client() as client:
                try:
                    role = client.role()[0]
                except redis.RedisError:
                    return None
            return node if role in (b"master", "master") else None

        return wait_until(promoted, timeout, "the Sentinels to promote a replica", 0.01)

    def wait_ready(self, replicas: int, timeout: float = 30.0) -> None:
        """Every Sentinel knows the primary, ``replicas`` replicas and every other Sentinel,
        and the replicas are in sync: a failover can happen from here."""

        def ready() -> bool:
            for index in range(len(self.sentinels)):
                with self.sentinel(index) as sentinel:
                    try:
                        master = sentinel.sentinel_master(SERVICE)
                    except redis.RedisError:
                        return False
                if int(master["num-slaves"]) < replicas:
                    return False
                if int(master["num-other-sentinels"]) < len(self.sentinels) - 1:
                    return False
            with self.primary().client() as client:
                info = client.info("replication")
            online = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
            return len([r for r in online if r.get("state") == "online"]) >= replicas

        wait_until(ready, timeout, "the Sentinels and replicas to be ready", 0.05)

    def stop(self) -> None:
        for process in [p for _, p in self.sentinels] + [n.process for n in self.nodes]:
            if process.poll() is None:
                process.terminate()
        for process in [p for _, p in self.sentinels] + [n.process for n in self.nodes]:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def start_topology(
    binary: str,
    folder: Path,
    *,
    replicas: int = 2,
    sentinels: int = 3,
    down_after_ms: int = 1000,
    failover_timeout_ms: int = 5000,
    appendonly: bool = True,
) -> Topology:
    """A primary with ``replicas`` replicas and ``sentinels`` Sentinels (quorum: a majority),
    each its own process, ready to fail over when this returns."""
    aof = ["--appendonly", "yes" if appendonly else "no", "--appendfsync", "everysec"]
    folder.mkdir(parents=True, exist_ok=True)
    nodes: list[Node] = []
    sentinel_processes: list[tuple[int, subprocess.Popen[bytes]]] = []
    topology = Topology(binary, folder, nodes, sentinel_processes, down_after_ms)
    try:
        first = folder / "node0"
        first.mkdir()
        process, url = start_redis(binary, first, aof)
        primary = int(url.rsplit(":", 1)[1])
        nodes.append(Node(primary, process))
        for index in range(1, replicas + 1):
            where = folder / f"node{index}"
            where.mkdir()
            process, url = start_redis(
                binary, where, [*aof, "--replicaof", "127.0.0.1", str(primary)]
            )
            nodes.append(Node(int(url.rsplit(":", 1)[1]), process))
        quorum = sentinels // 2 + 1
        for index in range(sentinels):
            port = free_port()
            conf = folder / f"sentinel{index}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {folder}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {primary} {quorum}\n"
                f"sentinel down-after-milliseconds {SERVICE} {down_after_ms}\n"
                f"sentinel failover-timeout {SERVICE} {failover_timeout_ms}\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
            )
            process = subprocess.Popen(
                [binary, str(conf), "--sentinel"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            sentinel_processes.append((port, process))
        topology.wait_ready(replicas)
    except BaseException:
        topology.stop()
        raise
    return topology


def restart_node(topology: Topology, node: Node) -> Node:
    """Start ``node`` again where it was (the Sentinels make it a replica of the new primary)."""
    where = topology.folder / f"node{topology.nodes.index(node)}"
    process, _ = start_redis(topology.binary, where, ["--appendonly", "yes"], port=node.port)
    replacement = Node(node.port, process)
    topology.nodes[topology.nodes.index(node)] = replacement
    return replacement
