"""The live three-broker KRaft cluster (tests/kafka_cluster.py): a replicated topic reaches an ISR of
three, and a consumer still reads every record after the leader is killed with SIGKILL."""

from __future__ import annotations

import time

from tests.live.records import consume_all, create_topic, produce

RECORDS = [(b"k%d" % i, b"v%d" % i) for i in range(300)]


def partition_state(cluster, topic: str):
    """(leader, isr) of partition 0 of `topic` as the cluster's metadata says."""
    meta = cluster.admin().list_topics(topic, timeout=10).topics[topic].partitions[0]
    return meta.leader, sorted(meta.isrs)


def wait_for(check, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s"
        time.sleep(0.2)
    return result


def test_rf3_topic_survives_kill_9_of_its_leader(kafka_cluster3):
    cluster = kafka_cluster3
    create_topic(cluster, "fixture-rf3", replicas=3, **{"min.insync.replicas": 2})
    wait_for(lambda: partition_state(cluster, "fixture-rf3")[1] == cluster.node_ids, "ISR of 3")
    produce(cluster, "fixture-rf3", RECORDS)  # acks=all: on all three replicas
    leader, _ = partition_state(cluster, "fixture-rf3")

    cluster.kill(leader)
    new_leader = wait_for(
        lambda: (s := partition_state(cluster, "fixture-rf3"))[0] not in (-1, leader) and s[0],
        "new leader",
    )
    assert new_leader in cluster.node_ids and new_leader != leader
    expected = [(offset, k, v) for offset, (k, v) in enumerate(RECORDS)]
    assert consume_all(cluster, "fixture-rf3", end=len(RECORDS)) == expected

    cluster.start_node(leader)  # back on its dirs: it catches up into the ISR again
    wait_for(lambda: partition_state(cluster, "fixture-rf3")[1] == cluster.node_ids, "ISR of 3")
