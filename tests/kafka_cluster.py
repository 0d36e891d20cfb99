"""A live Apache Kafka cluster on 127.0.0.1 for tests, benches and docs: KRaft, combined mode.

`KafkaCluster(root, nodes=1)` lays out one folder per node under `root` (its config, its log
file, its log dirs), formats each node's log dirs with Kafka's own `kafka.tools.StorageTool`, and
runs each node as `kafka.Kafka` from the `broker` jars of tests/java/pom.xml (tests/jvm_deps.py
fetches them). One node is a combined-mode node: broker and controller in one JVM. Several
brokers get one dedicated controller beside them (`nodes=3`: four JVMs, ids 1..3 the brokers):
a stop then shuts the brokers down while their controller still runs, so each controlled
shutdown is approved and every broker closes its logs cleanly, and the controller stops last.
Three combined voters would save that JVM, but SIGTERM to all of them races: a node whose
controlled shutdown the quorum has not yet approved when the two others exit waits minutes for
a controller that is gone. A single controller also replicates no metadata log, and a `kill -9`
of any broker leaves it running.

    with KafkaCluster(tmp_path) as cluster:            # formats and starts; stops cleanly
        Producer(cluster.client_config()).produce(...)
        cluster.stop()                                  # SIGTERM: .kafka_cleanshutdown appears
        ...place partition dirs into cluster.nodes[1].log_dirs[0]...
        cluster.start()                                 # the same dirs, ports and cluster id

`start(configs={...})` adds broker configs (kept for later starts). The defaults are a small,
fast test broker: replication of the internal topics as the node count allows, one partition for
the offsets and transaction topics, no auto-created topics, no initial rebalance delay. Kafka's
own defaults hold for the rest: a retention or cleaner test sets `log.retention.check.interval.ms`,
`log.initial.task.delay.ms` (30 s), `log.cleaner.backoff.ms` and `log.segment.delete.delay.ms`.

The pytest fixtures `kafka_broker` and `kafka_cluster3` (tests/conftest.py) hand a started
cluster to a test module and stop it at the module's end.
"""

from __future__ import annotations

import base64
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests import jvm_deps

MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
DUMP_LOG_SEGMENTS = "kafka.tools.DumpLogSegments"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
# Small and quick to start: C1 only and the serial collector suit a test broker on 2 cores.
TEST_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto")
CONTROLLER_ID = 100  # the dedicated controller of a multi-broker cluster
CONTROLLER_HEAP = "192m"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 120.0


class KafkaClusterError(RuntimeError):
    """A node did not format, start or stop; the message ends with its log's last lines."""


def random_cluster_id() -> str:
    """A cluster id as Kafka's Uuid.randomUuid makes them: 16 random bytes in URL-safe base64
    without padding, never starting with '-' (the tools would read it as an option)."""
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 right now (all held open while choosing)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def quiet_logger() -> logging.Logger:
    """A logger for confluent-kafka clients that drops librdkafka's lines (a starting broker's
    'connection refused' is expected while waiting for it)."""
    log = logging.getLogger("kafkalog.tests.kafka_client")
    log.setLevel(logging.CRITICAL + 1)
    log.propagate = False
    return log


def java_command(
    main: str, *args: str, log_dir: Path, jvm_options: tuple[str, ...] = ()
) -> list[str]:
    """A `java` command running `main` of Kafka's broker jars, logging through our log4j2 config
    into `log_dir`/server.log, with its temp files (the codecs' native libraries) there too."""
    tmp = log_dir / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return [
        "java",
        *TEST_JVM_OPTIONS,
        *jvm_options,
        "-Djava.awt.headless=true",
        f"-Djava.io.tmpdir={tmp}",
        f"-Dkafka.logs.dir={log_dir}",
        f"-Dlog4j2.configurationFile={jvm_deps.LOG4J2_CONFIG}",
        "-cp",
        jvm_deps.classpath("broker"),
        main,
        *args,
    ]


def run_kafka_tool(main: str, *args: str, log_dir: Path) -> str:
    """Run one of Kafka's command-line tools (e.g. DUMP_LOG_SEGMENTS) from the broker's jars;
    its stdout. A non-zero exit raises KafkaClusterError with its stderr."""
    proc = subprocess.run(
        java_command(main, *map(str, args), log_dir=log_dir),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        raise KafkaClusterError(f"{main} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} not written)"


@dataclass
class KafkaNode:
    """One KRaft node: a broker, a controller, or both in one JVM (combined mode)."""

    node_id: int
    roles: str  # process.roles: "broker,controller", "broker" or "controller"
    port: int | None  # the PLAINTEXT listener clients use (a broker)
    controller_port: int | None  # the CONTROLLER listener (a controller)
    dir: Path  # its config and logs; the log dirs are under it
    log_dirs: list[Path]
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def config_file(self) -> Path:
        return self.dir / "server.properties"

    @property
    def log_file(self) -> Path:
        """The node's own log (log4j2, INFO): loading, recovery, truncation, cleaner lines."""
        return self.dir / "logs" / "server.log"

    @property
    def stdout_file(self) -> Path:
        """The JVM's stdout and stderr (a crash before logging starts shows here)."""
        return self.dir / "logs" / "stdout.log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.running else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def formatted(self) -> bool:
        return all((d / "meta.properties").is_file() for d in self.log_dirs)

    def clean_shutdown_marked(self) -> bool:
        """Whether every log dir holds the marker a clean shutdown leaves."""
        return all((d / CLEAN_SHUTDOWN_MARKER).is_file() for d in self.log_dirs)


class KafkaCluster:
    """`nodes` KRaft brokers on 127.0.0.1: one combined-mode node, or brokers 1..nodes with a
    dedicated controller (`controller`, id CONTROLLER_ID) beside them.

    Ports, dirs and the cluster id are chosen once, so a stop and a start (or `restart`) come
    back on the same log dirs and the same bootstrap servers. `heap` is each broker JVM's -Xmx
    (it starts at 64 MiB and grows as needed, so idle nodes stay small on a shared machine).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        nodes: int = 1,
        *,
        configs: Mapping[str, object] | None = None,
        log_dirs_per_node: int = 1,
        heap: str = "384m",
        jvm_options: tuple[str, ...] = (),
        cluster_id: str | None = None,
    ) -> None:
        self.root = Path(root)
        self.cluster_id = cluster_id or random_cluster_id()
        self.heap = heap
        self.jvm_options = jvm_options
        ports = iter(free_ports(nodes + 1))
        self.controller: KafkaNode | None = None
        self.nodes: dict[int, KafkaNode] = {}  # the brokers, by node id
        if nodes > 1:
            cdir = self.root / "controller"
            self.controller = KafkaNode(
                CONTROLLER_ID, "controller", None, next(ports), cdir, [cdir / "metadata"]
            )
        for node_id in range(1, nodes + 1):
            ndir = self.root / f"node-{node_id}"
            log_dirs = [ndir / f"log-{j}" for j in range(log_dirs_per_node)]
            if self.controller is None:
                node = KafkaNode(
                    node_id, "broker,controller", next(ports), next(ports), ndir, log_dirs
                )
            else:
                node = KafkaNode(node_id, "broker", next(ports), None, ndir, log_dirs)
            self.nodes[node_id] = node
        replicas = min(3, nodes)
        self.configs: dict[str, str] = {
            "offsets.topic.replication.factor": str(replicas),
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": str(replicas),
            "transaction.state.log.min.isr": str(min(2, replicas)),
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": str(replicas),
            "share.coordinator.state.topic.min.isr": str(min(2, replicas)),
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "num.partitions": "1",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "broker.heartbeat.interval.ms": "1000",
            "broker.session.timeout.ms": "6000",
        }
        self.configs.update({k: str(v) for k, v in (configs or {}).items()})

    # -- what clients and tests need ------------------------------------------------------------

    @property
    def node_ids(self) -> list[int]:
        """The brokers' node ids (the replica ids of a topic's partitions)."""
        return sorted(self.nodes)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes.values())

    @property
    def log_dirs(self) -> list[Path]:
        """Every broker's log dirs, by node id."""
        return [d for n in self.nodes.values() for d in n.log_dirs]

    def client_config(self, **extra: object) -> dict[str, object]:
        """A confluent-kafka client config for this cluster (quiet while a node is down)."""
        return {"bootstrap.servers": self.bootstrap_servers, "logger": quiet_logger(), **extra}

    def admin(self):
        """A confluent-kafka AdminClient for this cluster. Keep it in a variable until its futures
        are done: a client collected early fails them with "Broker handle destroyed"."""
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.client_config())

    # -- lifecycle --------------------------------------------------------------------------------

    def _all_nodes(self) -> list[KafkaNode]:
        """The controller first (brokers register with it), then the brokers."""
        return ([self.controller] if self.controller else []) + list(self.nodes.values())

    def _properties(self, node: KafkaNode) -> str:
        voters = [n for n in self._all_nodes() if "controller" in n.roles]
        listeners = []
        if node.is_broker:
            listeners.append(f"PLAINTEXT://127.0.0.1:{node.port}")
        if node.controller_port is not None:
            listeners.append(f"CONTROLLER://127.0.0.1:{node.controller_port}")
        props = {
            "process.roles": node.roles,
            "node.id": str(node.node_id),
            "controller.quorum.voters": ",".join(
                f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in voters
            ),
            "listeners": ",".join(listeners),
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": ",".join(map(str, node.log_dirs)),
        }
        if node.is_broker:
            props["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{node.port}"
            props["inter.broker.listener.name"] = "PLAINTEXT"
        # The same configs for every node: the controller applies some of them too
        # (num.partitions and default.replication.factor at CreateTopics, the session timeout).
        props.update(self.configs)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _write_config(self, node: KafkaNode) -> None:
        (node.dir / "logs").mkdir(parents=True, exist_ok=True)
        node.config_file.write_text(self._properties(node))

    def format(self) -> None:
        """Format the log dirs of every node not formatted yet (StorageTool, one JVM per node,
        run side by side). `start` does it too; call it alone to prepare dirs beforehand."""
        todo = [n for n in self._all_nodes() if not n.formatted]
        procs = []
        for node in todo:
            self._write_config(node)
            cmd = java_command(
                STORAGE_TOOL, "format", "--config", str(node.config_file),
                "--cluster-id", self.cluster_id, log_dir=node.dir / "logs",
            )  # fmt: skip
            procs.append(
                subprocess.Popen(
                    cmd,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    text=True,
                )
            )
        for node, proc in zip(todo, procs, strict=True):
            out, _ = proc.communicate()
            if proc.returncode != 0 or not node.formatted:
                raise KafkaClusterError(
                    f"StorageTool format of node {node.node_id} failed: {out.strip()}"
                )

    def start(
        self, configs: Mapping[str, object] | None = None, *, timeout: float = START_TIMEOUT_S
    ) -> KafkaCluster:
        """Start every node that is not running (formatting first where needed), with `configs`
        added to the broker configs, and wait until the admin client sees every broker."""
        self.configs.update({k: str(v) for k, v in (configs or {}).items()})
        self.format()
        for node in self._all_nodes():
            if not node.running:
                self._launch(node)
        self.wait_ready(timeout=timeout)
        return self

    def start_node(self, node_id: int, *, timeout: float = START_TIMEOUT_S) -> None:
        """Start one broker again (after `kill` or `stop_node`) and wait until it serves."""
        self._launch(self.nodes[node_id])
        self.wait_ready(timeout=timeout)

    def _launch(self, node: KafkaNode) -> None:
        self._write_config(node)
        heap = self.heap if node.is_broker else CONTROLLER_HEAP
        cmd = java_command(
            MAIN, str(node.config_file), log_dir=node.dir / "logs",
            jvm_options=(f"-Xmx{heap}", "-Xms64m", *self.jvm_options),
        )  # fmt: skip
        with open(node.stdout_file, "ab") as out:
            node.process = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def wait_ready(self, *, timeout: float = START_TIMEOUT_S) -> None:
        """Wait until the cluster's metadata lists every running broker as an (unfenced) broker;
        a node that exits meanwhile fails at once with its log's last lines."""
        from confluent_kafka import KafkaException

        admin = self.admin()
        deadline = time.monotonic() + timeout
        started = [n for n in self._all_nodes() if n.running]
        want = {n.node_id for n in started if n.is_broker}
        while True:
            for node in started:
                if not node.running:
                    raise KafkaClusterError(
                        f"Kafka node {node.node_id} exited {node.process.returncode} while "
                        f"starting; {node.log_file}:\n{_tail(node.log_file)}\n"
                        f"{_tail(node.stdout_file)}"
                    )
            try:
                if want <= set(admin.list_topics(timeout=2).brokers):
                    return
            except KafkaException:
                pass
            if time.monotonic() > deadline:
                node = self.nodes[min(want)] if want else started[0]
                raise KafkaClusterError(
                    f"Kafka brokers {sorted(want)} did not all answer within {timeout:.0f} s; "
                    f"{node.log_file}:\n{_tail(node.log_file)}"
                )
            time.sleep(0.2)

    def stop_node(self, node_id: int, *, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM one broker and wait for its clean shutdown."""
        self._stop([self.nodes[node_id]], timeout)

    def stop(self, *, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM every running broker at once and wait until all have exited, then the
        dedicated controller (it approves the brokers' controlled shutdowns). Kafka writes
        `.kafka_cleanshutdown` into each log dir as it closes them."""
        self._stop([n for n in self.nodes.values() if n.running], timeout)
        if self.controller is not None and self.controller.running:
            self._stop([self.controller], timeout)

    def _stop(self, nodes: list[KafkaNode], timeout: float) -> None:
        for node in nodes:
            if node.running:
                node.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        stuck = []
        for node in nodes:
            if node.process is None:
                continue
            try:
                node.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait()
                stuck.append(node.node_id)
        if stuck:
            raise KafkaClusterError(
                f"Kafka nodes {stuck} did not stop within {timeout:.0f} s of SIGTERM; killed"
            )

    def kill(self, node_id: int) -> None:
        """SIGKILL one broker (kill -9: no clean shutdown) and reap it."""
        self._kill(self.nodes[node_id])

    @staticmethod
    def _kill(node: KafkaNode) -> None:
        if node.running:
            node.process.kill()
            node.process.wait()

    def restart(
        self, configs: Mapping[str, object] | None = None, *, timeout: float = START_TIMEOUT_S
    ) -> KafkaCluster:
        """Stop cleanly and start again on the same dirs."""
        self.stop()
        return self.start(configs, timeout=timeout)

    def close(self) -> None:
        """Stop what still runs; kill it if a clean stop fails."""
        try:
            self.stop()
        finally:
            for node in self._all_nodes():
                self._kill(node)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
