"""`kafkalog place` on a live three-broker KRaft cluster (tests/kafka_cluster.py): replication
factor 3 by the route docs/broker.md recommends, and the wrong route shown losing the data.

The right route: the topic created with one replica (broker 1), broker 1 stopped, the partition
placed, broker 1 started, then a reassignment to replicas [1, 2, 3]: the followers copy the
placed log through replication (ISR of 3), and after a `kill -9` of the leader a consumer reads
every record from the new leader.

The wrong route: an empty replica leading while the loaded one follows. `place` refuses it; the
same bytes put into the follower's dir by hand are truncated away by the broker itself.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from kafkalog_core.log.checkpoints import PartitionMetadataFile
from kafkalog_core.log.cluster_metadata import read_cluster_metadata
from kafkalog_core.log.names import PARTITION_METADATA_FILE
from kafkalog_core.record.schema import HEADERS_TYPE
from kafkalog_core.tools.place import run_place
from tests.kafka_cluster import KafkaCluster, run_kafka_tool
from tests.live.records import write_partition
from tests.live.test_kafka_cluster3 import wait_for
from tests.live.test_place_broker import kafkalogs_records, place_cli, read_everything

N = 300
KEEP = {"retention.ms": "-1"}  # the records' 1970s timestamps stay
REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"


def write_topic(output: Path, topic: str, n: int = N) -> int:
    """Partition 0 of `topic` in kafkalog's output root: a few segments of records with
    headers; its log end offset."""
    data = pa.table(
        {
            "key": [b"k%d" % i for i in range(n)],
            "value": [b"value-%d" % i * 3 for i in range(n)],
            "timestamp": pa.array([1_000_000 + i for i in range(n)], pa.int64()),
            "headers": pa.array([[("h", b"%d" % i)] for i in range(n)], HEADERS_TYPE),
        }
    )
    return write_partition(output, topic, 0, data, **{"segment.bytes": 8000})


def partition_state(cluster: KafkaCluster, topic: str) -> tuple[int, list[int]]:
    """(leader, isr) of partition 0 of `topic`; (-1, []) while the metadata lacks it."""
    topics = cluster.admin().list_topics(topic, timeout=10).topics
    meta = topics[topic].partitions.get(0) if topic in topics else None
    return (meta.leader, sorted(meta.isrs)) if meta is not None else (-1, [])


def create_on(cluster: KafkaCluster, topic: str, replicas: list[int]) -> None:
    from confluent_kafka.admin import NewTopic

    admin = cluster.admin()
    new = NewTopic(topic, num_partitions=1, replica_assignment=[replicas], config=KEEP)
    for future in admin.create_topics([new], operation_timeout=30).values():
        future.result()
    wait_for(lambda: partition_state(cluster, topic)[1] == sorted(replicas), "the new topic's ISR")


def reassign(cluster: KafkaCluster, topic: str, replicas: list[int], tmp: Path) -> None:
    """kafka-reassign-partitions.sh --execute, from the broker's jars."""
    plan = tmp / "reassign.json"
    partitions = [{"topic": topic, "partition": 0, "replicas": replicas}]
    plan.write_text(json.dumps({"version": 1, "partitions": partitions}))
    node = cluster.nodes[1]
    run_kafka_tool(
        REASSIGN, "--bootstrap-server", cluster.bootstrap_servers, "--execute",
        "--reassignment-json-file", plan, log_dir=node.dir / "logs",
    )  # fmt: skip


@pytest.fixture(scope="module")
def output(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("place3") / "output"


def test_one_replica_placed_then_reassigned_to_three_survives_kill_9_of_its_leader(
    kafka_cluster3, output, tmp_path
) -> None:
    cluster, topic = kafka_cluster3, "rf3"
    end = write_topic(output, topic)
    expected = kafkalogs_records(output / f"{topic}-0")
    assert len(expected) == end == N and expected[0][5] == [("h", b"0")]
    create_on(cluster, topic, [1])
    cluster.stop_node(1)
    log_dir = cluster.nodes[1].log_dirs[0]
    out = io.StringIO()
    assert run_place(str(output), [str(log_dir)], [topic], out, apply=True) == 0, out.getvalue()
    cluster.start_node(1)
    assert read_everything(cluster, topic, 0, end) == expected

    reassign(cluster, topic, [1, 2, 3], tmp_path)
    wait_for(lambda: partition_state(cluster, topic)[1] == [1, 2, 3], "ISR of 3")
    meta = cluster.admin().list_topics(topic, timeout=10).topics[topic].partitions[0]
    assert sorted(meta.replicas) == [1, 2, 3]
    for node in (2, 3):  # the followers hold the whole log, copied from the leader
        copy = kafkalogs_records(cluster.nodes[node].log_dirs[0] / f"{topic}-0")
        assert copy == expected, node

    leader = meta.leader
    cluster.kill(leader)
    wait_for(lambda: partition_state(cluster, topic)[0] not in (-1, leader), "a new leader", 60)
    assert read_everything(cluster, topic, 0, end) == expected
    cluster.start_node(leader)
    wait_for(lambda: partition_state(cluster, topic)[1] == [1, 2, 3], "ISR of 3 again")


def test_an_empty_leader_truncates_a_loaded_follower_and_place_refuses_that_topic(
    kafka_cluster3, output
) -> None:
    """Replicas [2, 1]: broker 2 (empty) leads. `place` into broker 1 alone is refused; the
    bytes copied there by hand are truncated to the leader's empty log."""
    cluster, topic = kafka_cluster3, "wrong-route"
    end = write_topic(output, topic)
    create_on(cluster, topic, [2, 1])
    assert partition_state(cluster, topic)[0] == 2
    cluster.stop_node(1)
    log_dir = cluster.nodes[1].log_dirs[0]
    status, out, err = place_cli(output, log_dir, topic)
    refusal = (
        f"{topic}-0 has replicas on brokers [2, 1], and the log dirs of broker(s) [2] are not "
        "placed: an empty replica there could lead, and the loaded one, following it, "
        "truncates to its empty log (the data is lost)"
    )
    assert status == 1 and refusal in err, err
    assert not (log_dir / f"{topic}-0" / "00000000000000000000.log").stat().st_size

    # by hand, bypassing place: the bytes with the cluster's topic id
    topic_id = read_cluster_metadata(log_dir).topics[topic]
    dest = log_dir / f"{topic}-0"
    shutil.rmtree(dest)
    shutil.copytree(output / f"{topic}-0", dest)
    PartitionMetadataFile(dest / PARTITION_METADATA_FILE).write(topic_id)
    assert len(kafkalogs_records(dest)) == end
    cluster.start_node(1)
    wait_for(lambda: partition_state(cluster, topic)[1] == [1, 2], "broker 1 back in the ISR")
    node = cluster.nodes[1]
    lines = node.log_file.read_text(errors="replace").splitlines()
    assert any("Truncating" in line and f"{topic}-0" in line for line in lines)
    cluster.stop_node(1)  # its log, closed: every record is gone
    try:
        assert kafkalogs_records(dest) == []
    finally:
        cluster.start_node(1)
