"""The live single-node KRaft broker (tests/kafka_cluster.py) that the broker proofs build on:
it serves what was produced, shuts down cleanly on SIGTERM, and serves it again from the same log
dirs after a restart; Spark's own Kafka source reads from it."""

from __future__ import annotations

from tests.live.records import consume_all, create_topic, produce

RECORDS = [(b"k%d" % i, b"v%d" % i * (i % 7)) for i in range(200)]


def test_produced_records_survive_a_clean_stop_and_a_restart_on_the_same_dirs(kafka_broker):
    create_topic(kafka_broker, "fixture-restart")
    produce(kafka_broker, "fixture-restart", RECORDS)
    expected = [(offset, k, v) for offset, (k, v) in enumerate(RECORDS)]
    assert consume_all(kafka_broker, "fixture-restart", end=len(RECORDS)) == expected

    (node,) = kafka_broker.nodes.values()
    pid = node.pid
    kafka_broker.stop()
    assert not node.running and node.clean_shutdown_marked()
    assert (node.log_dirs[0] / "fixture-restart-0" / "00000000000000000000.log").stat().st_size > 0
    assert (node.log_dirs[0] / "meta.properties").read_text().count(kafka_broker.cluster_id) == 1

    kafka_broker.start()
    assert node.pid != pid
    assert not node.clean_shutdown_marked()  # a running broker removes it
    assert consume_all(kafka_broker, "fixture-restart", end=len(RECORDS)) == expected
    assert "fixture-restart-0" in node.log_file.read_text()


def test_spark_kafka_source_reads_the_topic(kafka_broker, spark):
    create_topic(kafka_broker, "fixture-spark")
    produce(kafka_broker, "fixture-spark", RECORDS[:50])
    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka_broker.bootstrap_servers)
        .option("subscribe", "fixture-spark")
        .option("startingOffsets", "earliest")
        .load()
    )
    rows = df.select("partition", "offset", "key", "value").orderBy("offset").collect()
    got = [(r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in rows]
    assert got == [(0, offset, k, v) for offset, (k, v) in enumerate(RECORDS[:50])]
