"""Shared test setup: where the reference fixtures live, and one SparkSession for the run."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("KAFKALOG_SHARED", REPO_ROOT.parent / "shared"))
FIXTURES = SHARED / "fixtures"


# The files that take longest in a whole run (pytest --durations), heaviest first: the Airflow
# one builds its venv, then waits on seven spark-submits; the others run many Spark jobs or start
# JVMs of their own (spark-submit, a Hive or standalone-cluster session, killed writers).
# tests/run.sh hands whole files to two workers in collection order (--no-loadscope-reorder),
# so these start at once and no long file is left to run alone at the end of the suite.
LONGEST_FIRST = (
    "tests/jobs/maintenance/test_airflow_dag.py",
    "tests/jobs/test_direct_one_pass.py",
    "tests/jobs/test_mapping.py",
    "tests/jobs/test_arrow_range.py",
    "tests/cluster/test_cluster_ingest.py",
    "tests/live/test_broker_oracle.py",
    "tests/live/test_place_broker.py",
    "tests/live/test_place_cluster3.py",
    "tests/test_readme.py",
    "tests/datasource/test_connector_parity.py",
    "tests/jobs/test_delta_spark_reader.py",
    "tests/datasource/test_write_kill9.py",
    "tests/jobs/test_hive_tables.py",
    "tests/jobs/test_ingest_changes.py",
    "tests/jobs/test_spark_submit.py",
    "tests/notebooks/test_explore.py",
    "tests/datasource/test_write.py",
    "tests/jobs/test_connect.py",
    "tests/jobs/test_ingest_errors.py",
    "tests/jobs/test_arrow_reader.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    missing = [name for name in LONGEST_FIRST if not (REPO_ROOT / name).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py LONGEST_FIRST names no file: {missing}")
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """../shared/fixtures: real broker/client bytes. Missing fixtures fail loudly, never skip."""
    if not (FIXTURES / "MANIFEST.json").is_file():
        pytest.fail(f"reference fixtures not found at {FIXTURES} (set KAFKALOG_SHARED)")
    return FIXTURES


@pytest.fixture(scope="session")
def manifest(fixtures_dir: Path) -> dict:
    return json.loads((fixtures_dir / "MANIFEST.json").read_text())


# The jar groups (tests/jvm_deps.py) of the run's one SparkSession: a process has one Spark
# driver, so every test that reads with Spark's own Kafka source or Avro functions shares it.
SPARK_JAR_GROUPS = ("spark-kafka", "spark-avro")


def session_builder(app_name: str, driver_memory: str = "2g", jar_groups: tuple[str, ...] = ()):
    """The tests' local Spark setup (local[2], no UI, few shuffle partitions, UTC), shared by
    the session's `spark`, the Hive process of `test_hive_tables` and bench/. `jar_groups` adds
    those groups of tests/java/pom.xml with spark.jars (fetched on first use; raises
    jvm_deps.JvmDepsUnavailable saying what to fetch)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from tests import jvm_deps

    builder = SparkSession.builder
    if jar_groups:
        builder = builder.config("spark.jars", jvm_deps.spark_jars(*jar_groups))
    return (
        builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
    )


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole run, with SPARK_JAR_GROUPS on its class path. Its JVM
    also serves Spark Connect (pyspark's own plugin, on a free port): `connect` sessions run on
    the same local[2] at no start-up cost, their Python workers this interpreter as the classic
    session's."""
    from tests import jvm_deps
    from tests.kafka_cluster import free_ports
    from tests.spark_mode import connect_server_conf

    port = free_ports(1)[0]
    try:
        builder = session_builder("kafkalog-tests", jar_groups=SPARK_JAR_GROUPS)
    except jvm_deps.JvmDepsUnavailable as e:
        pytest.fail(str(e), pytrace=False)
    session = builder.config(map=connect_server_conf(port)).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    session.kafkalog_connect_url = f"sc://localhost:{port}"  # type: ignore[attr-defined]
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect(spark):
    """A Spark Connect client session on the run's local server (`spark`'s JVM): no
    SparkContext, no RDDs, no JVM handles, as a cluster's Connect endpoint gives."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    session = ConnectSession.builder.remote(spark.kafkalog_connect_url).create()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_client():
    """Apache Kafka's Java client as the oracle (tests/kafka_oracle.py): its jars, fetched into
    the user cache on first use. Missing jars fail loudly with what to fetch, never skip."""
    from tests import kafka_oracle

    try:
        kafka_oracle.require_oracle()
    except kafka_oracle.OracleUnavailable as e:
        pytest.fail(str(e), pytrace=False)
    return kafka_oracle


@pytest.fixture(scope="module")
def broker_configs() -> dict[str, object]:
    """Broker configs for this module's `kafka_broker` / `kafka_cluster3` at start: a module
    overrides this fixture (e.g. {"log.cleaner.backoff.ms": 100})."""
    return {}


def _started_cluster(root: Path, nodes: int, configs: dict[str, object], heap: str):
    from tests import jvm_deps
    from tests.kafka_cluster import KafkaCluster

    cluster = KafkaCluster(root, nodes, configs=configs, heap=heap)
    try:
        cluster.start()
    except jvm_deps.JvmDepsUnavailable as e:
        cluster.close()
        pytest.fail(str(e), pytrace=False)
    except BaseException:
        cluster.close()
        raise
    return cluster


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory, broker_configs):
    """One live KRaft node (tests/kafka_cluster.py) for the test module, started with
    `broker_configs`; stopped cleanly at the module's end. A test may stop, restart or kill it,
    but leaves it running for the next."""
    cluster = _started_cluster(tmp_path_factory.mktemp("kafka"), 1, broker_configs, "384m")
    yield cluster
    cluster.close()


@pytest.fixture(scope="module")
def kafka_cluster3(tmp_path_factory, broker_configs):
    """Three live KRaft brokers (ids 1..3) and their dedicated controller, for replication
    tests, started with `broker_configs`; stopped at the module's end."""
    cluster = _started_cluster(tmp_path_factory.mktemp("kafka3"), 3, broker_configs, "256m")
    yield cluster
    cluster.close()


@pytest.fixture(scope="session")
def demo_run(spark, tmp_path_factory):
    """One run of the demo for the whole test run: (result, printed lines, output root).

    The output root's parent holds only the demo's log dir (`demo-output`) and its meta area
    beside it. Read-only for its users: a test that changes files works on a copy.
    """
    from jobs import demo

    output = tmp_path_factory.mktemp("demo") / "demo-output"
    lines: list[str] = []
    result = demo.run_demo(spark, output, out=lines.append)
    return result, lines, output
