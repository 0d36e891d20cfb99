"""bench/peer.py at 2000 rows against the module's live broker, so the script cannot
rot: every road loads every row (the bench checks each topic's end offsets), the reads of both
sources count the same rows per partition, and every figure of the page is there. One workload
(each adds a broker restart and five loads; the orders mapping runs in the bench itself)."""

from __future__ import annotations

from bench import peer

ROADS = {"spark", "producer", "kafkalog", "kafkalog+restart", "write-kafkalog"}
READS = {f"read-{s}-{q}" for s in ("kafka", "kafkalog") for q in ("noop", "count", "stream")}


def test_every_road_loads_the_rows_and_every_read_agrees(spark, kafka_broker, tmp_path) -> None:
    args = peer.parse_args(
        ["--rows", "2000", "--warm-rows", "0", "--workloads", "w", "--codecs", "none"]
        + ["--out", str(tmp_path)]
    )
    figures = peer.run(args, spark=spark, cluster=kafka_broker)
    results = figures["results"]
    assert set(results) == {"w/none"}
    assert set(results["w/none"]) == ROADS | READS | {"phases"}
    (phases,) = results["w/none"]["phases"]
    assert set(phases) == {"ingest", "stop", "place", "start"}
    for rec in results.values():
        for name, runs in rec.items():
            if name != "phases":
                (m,) = runs
                assert m["wall"] > 0 and m["cpu"] >= 0 and m["broker_cpu"] >= 0, (name, m)
    lines = "\n".join(peer.report(results, args.rows))
    assert "kafkalog+restart / spark" in lines and "read stream: kafkalog / kafka" in lines
    assert kafka_broker.nodes[1].running  # the fixture's broker is left serving
