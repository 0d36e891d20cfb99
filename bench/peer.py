"""Benchmark: kafkalog against the roads users take today, with a live broker: Spark's Kafka
sink and source, and confluent-kafka's Producer.

Not a test. Run from the repo root:

    .venv/bin/python bench/peer.py [--rows 5000000] [--repeat 1] [--workloads w,orders]
        [--codecs none,zstd] [--linger-ms 50] [--no-read] [--no-write] [--out bench/out]

One process tree: this driver, one local[2] Spark session with Spark's Kafka connector on its
class path (tests/jvm_deps.py group spark-kafka), and one single-node KRaft broker
(tests/kafka_cluster.py) started by this script with kafka-server-start.sh's JVM settings
(1 GiB heap, G1). The broker shares the machine's
cores with Spark. Every figure gives wall time and CPU: Spark's (this driver, the Spark JVM and
its Python workers) and the broker's (its JVM's utime + stime from /proc/<pid>/stat, with a
stopped broker's last CPU from this process's reaped children).

Tables (Parquet, written once under --out, not timed), 8 topic partitions, zstd and none:
- `w`: a random 16-byte key, a random 100-byte value and a millisecond timestamp.
- `orders`: bench/schema.py's orders rows; key customer_id, value JSON of the six columns.

Load a topic, each road into its own new topic, one after the other (`--repeat` rounds, after a
warm-up of every road on --warm-rows rows):
- (a) spark: `df.write.format("kafka")` to the broker: acks=all, enable.idempotence=true,
  linger.ms, batch.size 1 MiB, compression.type (zstd or none), max.request.size 8 MiB.
- (b) producer: confluent-kafka's Producer in this process over the Parquet rows (read with
  pyarrow, the orders' JSON values built with kafkalog's C encoder, both timed), the same
  producer settings, partitioner murmur2_random (the Java producer's placement), then flush.
- (c) kafkalog: `ingest` (arrow task reader, direct mode), then the broker's stop (SIGTERM,
  clean shutdown), `place --apply` into its log dir, and its start until every partition of
  the topic is served at its high watermark. "kafkalog" is ingest + place; "kafkalog+restart"
  adds the stop and the start.

Read a topic (the `w` topics (c) placed): Spark's Kafka source from the running broker against
`format("kafkalog")` over the stopped broker's log dir: every column into the no-op sink;
`groupBy("partition").count()`; Structured Streaming with Trigger.AvailableNow into the no-op
sink.

Write through the data source: `df.write.format("kafkalog")` of the rows (a) sent, against (a).

Prints every run, the best of the rounds, the ratios and the load average; --json writes them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.ingest import make_source, remove_logs, settle, start_session  # noqa: E402
from bench.rss import descendants  # noqa: E402
from bench.schema import COLUMNS, _parquet_source, _tree_cpu, make_orders  # noqa: E402

PARTITIONS = 8
BATCH_BYTES = 1 << 20
BROKER_HEAP = "1g"
# Every topic keeps its records: the tables' timestamps are from 2023 and 2024, which the
# default retention.ms (7 days) would delete at the broker's first retention pass, mid-read.
KEEP = {"retention.ms": "-1"}
# The broker JVM as bin/kafka-server-start.sh runs it (1 GiB heap, G1 with its pause goals,
# the full JIT), not the test broker's quick-start options (C1 only, serial GC).
BROKER_JVM = (
    "-Xms1g",
    "-XX:TieredStopAtLevel=4",
    "-XX:-UseSerialGC",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
)


# ---------------------------------------------------------------------------------------------
# Tables


def make_sources(out: Path, rows: int, workloads: list[str]) -> dict[str, Path]:
    sources = {}
    if "w" in workloads:
        sources["w"] = make_source(out / f"peer-w-{rows}", rows, PARTITIONS)
    if "orders" in workloads:
        orders = make_orders(rows)
        table = pa.Table.from_struct_array(orders)
        sources["orders"] = _parquet_source(out / f"peer-orders-{rows}", table)
    return sources


def spark_frame(spark, workload: str, src: Path):
    """The rows as Spark's Kafka sink takes them: key and value (binary or string)."""
    from pyspark.sql import functions as F

    df = spark.read.parquet(str(src))
    if workload == "w":
        return df.select("key", "value", F.col("ts").alias("timestamp"))
    value = F.to_json(F.struct(*[F.col(c) for c in COLUMNS]))
    return df.select(
        F.col("customer_id").alias("key"),
        value.alias("value"),
        F.col("event_time").alias("timestamp"),
    )


def ingest_config(workload: str, src: Path, root: Path, topic: str, codec: str) -> dict:
    topic_spec: dict = {"partitions": PARTITIONS, "config": dict(KEEP)}
    if codec != "none":
        topic_spec["config"]["compression.type"] = codec
    if workload == "w":
        mapping = {
            "key": {"column": "key", "format": "bytes"},
            "value": {"column": "value", "format": "bytes"},
            "timestamp": {"column": "ts"},
        }
    else:
        mapping = {
            "key": {"column": "customer_id", "format": "string"},
            "value": {"columns": COLUMNS, "format": "json"},
            "timestamp": {"column": "event_time"},
        }
    return {
        "source": {"format": "parquet", "path": str(src), "task_reader": "arrow"},
        "output": {"root": str(root), "write_mode": "direct"},
        "topics": {topic: topic_spec},
        "mapping": {"topic": topic, **mapping},
        "ordering": "source",
    }


# ---------------------------------------------------------------------------------------------
# CPU


class Meter:
    """Wall time and CPU of one run: Spark's side (this driver, the Spark JVM and every process
    under it) and the broker's (the live broker JVM, plus what this process reaped from a
    broker that stopped during the run)."""

    def __init__(self, spark_pid: int, cluster) -> None:
        self.spark_pid, self.cluster = spark_pid, cluster

    def _broker(self) -> float:
        (node,) = self.cluster.nodes.values()
        live = _tree_cpu(node.pid) if node.pid else 0.0
        reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
        return live + reaped.ru_utime + reaped.ru_stime

    def _spark(self) -> dict[int, float]:
        """CPU seconds per process: this driver (0) and the Spark JVM with every process under
        it (with the children each has reaped)."""
        pids = {self.spark_pid, *descendants(self.spark_pid)}
        return {0: time.process_time(), **{pid: _tree_cpu_one(pid) for pid in pids}}

    def run(self, fn: Callable[[], object]) -> tuple[dict, object]:
        """Spark's CPU sums each process's growth over the run: a Python worker that exits
        mid-run and is not reaped into its parent's figures takes its last ticks along, so the
        figure is a lower bound, never a worker's whole life."""
        settle()
        s0, b0, t0 = self._spark(), self._broker(), time.perf_counter()
        result = fn()
        wall = time.perf_counter() - t0
        s1 = self._spark()
        spark = sum(max(0.0, v - s0.get(pid, 0.0)) for pid, v in s1.items())
        return {"wall": wall, "cpu": spark, "broker_cpu": self._broker() - b0}, result


def _tree_cpu_one(pid: int) -> float:
    """CPU seconds of one process (user + system, with its reaped children's); 0 if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------
# The three loads


def producer_settings(codec: str, linger_ms: int) -> dict[str, str]:
    """What a careful user sets on a producer for a bulk load (the Java and librdkafka names
    agree for these)."""
    return {
        "acks": "all",
        "enable.idempotence": "true",
        "linger.ms": str(linger_ms),
        "batch.size": str(BATCH_BYTES),
        "compression.type": codec,
    }


def load_spark(spark, cluster, df, topic: str, codec: str, linger_ms: int) -> None:
    writer = df.select("key", "value").write.format("kafka")
    settings = {
        **producer_settings(codec, linger_ms),
        "max.request.size": str(8 * BATCH_BYTES),
        "buffer.memory": str(64 * BATCH_BYTES),
    }
    for k, v in settings.items():
        writer = writer.option(f"kafka.{k}", v)
    writer.option("kafka.bootstrap.servers", cluster.bootstrap_servers).option(
        "topic", topic
    ).save()


def load_producer(cluster, workload: str, src: Path, topic: str, codec: str, linger_ms: int):
    from confluent_kafka import Producer

    from kafkalog_core.schema import encode_json

    conf = cluster.client_config(
        **producer_settings(codec, linger_ms),
        partitioner="murmur2_random",
        **{"queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 1 << 20},
    )
    producer = Producer(conf)
    produce, poll = producer.produce, producer.poll
    for batch in _batches(src):
        if workload == "w":
            keys, values, stamps = batch["key"], batch["value"], batch["ts"]
        else:
            keys, stamps = batch["customer_id"], batch["event_time"]
            values = encode_json(pa.StructArray.from_arrays([batch[c] for c in COLUMNS], COLUMNS))
        stamps = stamps.cast(pa.int64()) if workload == "w" else _ms(stamps)
        for key, value, ts in zip(
            keys.to_pylist(), values.to_pylist(), stamps.to_pylist(), strict=True
        ):
            while True:
                try:
                    produce(topic, value, key, timestamp=ts)
                    break
                except BufferError:
                    poll(0.05)
        poll(0)
    left = producer.flush(600)
    assert left == 0, f"{left} records not delivered"


def _batches(src: Path):
    for path in sorted(src.glob("*.parquet")):
        yield from pq.ParquetFile(path).iter_batches(batch_size=100_000)


def _ms(stamps: pa.Array) -> pa.Array:
    import pyarrow.compute as pc

    return pc.divide(stamps.cast(pa.int64()), 1000)  # microseconds -> ms


def create_topic(cluster, topic: str, **configs: str) -> None:
    from confluent_kafka.admin import NewTopic

    configs = {**KEEP, **configs}
    admin = cluster.admin()
    for f in admin.create_topics(
        [NewTopic(topic, PARTITIONS, 1, config=configs)], operation_timeout=60
    ).values():
        f.result()
    deadline = time.monotonic() + 120
    while True:  # every partition led: a load does not start against one still without a leader
        meta = admin.list_topics(topic, timeout=10).topics[topic]
        parts = meta.partitions.values()
        if meta.error is None and len(parts) == PARTITIONS and all(p.leader >= 0 for p in parts):
            return
        assert time.monotonic() < deadline, f"{topic}: partitions without a leader"
        time.sleep(0.1)


def delete_topic(cluster, topic: str) -> None:
    admin = cluster.admin()
    for f in admin.delete_topics([topic], operation_timeout=60).values():
        f.result()


def rows_of(src: Path) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in src.glob("*.parquet"))


def check_loaded(cluster, topic: str, rows: int) -> None:
    """Every row arrived (idempotence: none twice), spread over every partition; then the topic
    goes, so the broker's disk holds one loaded topic at a time."""
    ends = end_offsets(cluster, topic)
    assert sum(ends) == rows and min(ends) > 0, (topic, ends, rows)
    delete_topic(cluster, topic)


def end_offsets(cluster, topic: str) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(cluster.client_config(**{"group.id": "peer-bench"}))
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()


def wait_served(cluster, topic: str, ends: list[int], timeout: float = 300) -> None:
    """Until every partition of `topic` answers with the high watermark the placed log ends at."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if end_offsets(cluster, topic) == ends:
                return
        except Exception:  # a partition without a leader yet
            pass
        assert time.monotonic() < deadline, f"{topic} not served at {ends}"
        time.sleep(0.1)


def load_kafkalog(
    spark, meter: Meter, cluster, config: dict, topic: str, run_id: str, rows: int
) -> dict:
    """ingest, stop, place, start until served: each phase timed on its own."""
    from jobs import ingest
    from jobs.ingestion.config.ingest_config import IngestConfig
    from kafkalog_core.log.names import live_partition_dirs
    from kafkalog_core.tools.place import place

    root = Path(config["output"]["root"])
    remove_logs(root)
    settings = {k: str(v) for k, v in config["topics"][topic].get("config", {}).items()}
    create_topic(cluster, topic, **settings)  # the topic must exist: place takes its id
    (node,) = cluster.nodes.values()
    log_dir = node.log_dirs[0]

    def run_ingest():
        result = ingest.run(
            spark, IngestConfig.from_dict(config), run_id=run_id, out=lambda *_: None
        )
        assert result.status == "committed", result.summary
        return result

    phases = {}
    phases["ingest"], _ = meter.run(run_ingest)
    ends = [0] * PARTITIONS
    for t, p, path in live_partition_dirs(root):
        if t == topic:
            ends[p] = _log_end(path)
    assert sum(ends) == rows, (topic, ends, rows)
    phases["stop"], _ = meter.run(cluster.stop)
    phases["place"], _ = meter.run(
        lambda: place(root, [log_dir], [topic], apply=True, topic_configs={topic: settings})
    )
    phases["start"], _ = meter.run(lambda: (cluster.start(), wait_served(cluster, topic, ends)))
    remove_logs(root)
    return phases


def _log_end(pdir: Path) -> int:
    from kafkalog_core.config import LogConfig
    from kafkalog_core.log.partition.partition_log import PartitionLog

    log = PartitionLog.open(pdir, LogConfig())
    try:
        return log.log_end_offset
    finally:
        log.close()


def _sum(phases: dict, names: tuple[str, ...]) -> dict:
    return {k: sum(phases[n][k] for n in names) for k in ("wall", "cpu", "broker_cpu")}


# ---------------------------------------------------------------------------------------------
# Reads and the data-source write


def read_runs(spark, meter: Meter, cluster, topic: str, out: Path, tag: str) -> dict[str, dict]:
    """Spark's Kafka source from the running broker, then format("kafkalog") over the stopped
    broker's log dir (the broker runs again afterwards)."""
    (node,) = cluster.nodes.values()
    log_dir = str(node.log_dirs[0])
    kafka_opts = {
        "kafka.bootstrap.servers": cluster.bootstrap_servers,
        "subscribe": topic,
        "startingOffsets": "earliest",
    }

    def queries(fmt: str, opts: dict, path: str | None) -> dict[str, Callable[[], object]]:
        def batch():
            reader = spark.read.format(fmt).options(**opts)
            return reader.load(path) if path else reader.load()

        def stream():
            reader = spark.readStream.format(fmt).options(**opts)
            df = reader.load(path) if path else reader.load()
            ckpt = out / f"peer-ckpt-{fmt}-{tag}"
            shutil.rmtree(ckpt, ignore_errors=True)
            q = (
                df.writeStream.format("noop")
                .option("checkpointLocation", str(ckpt))
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination()
            assert q.exception() is None, q.exception()
            return q

        return {
            "noop": lambda: batch().write.format("noop").mode("overwrite").save(),
            "count": lambda: batch().groupBy("partition").count().collect(),
            "stream": stream,
        }

    res: dict[str, dict] = {}
    counts = {}

    def timed(source: str, name: str, fn: Callable[[], object]) -> None:
        """A query that fails is reported with its first line, and the others still run."""
        try:
            res[f"{source}-{name}"], r = meter.run(fn)
        except Exception as e:  # noqa: BLE001 - the bench reports it and goes on
            line = next((x for x in str(e).splitlines() if "Reason:" in x), str(e).split("\n")[0])
            res[f"{source}-{name}"] = {"failed": line.strip()[:300]}
            print(f"  {tag} read-{source}-{name} FAILED: {line.strip()[:300]}", flush=True)
            return
        if name == "count":
            counts[source] = sorted(map(tuple, r))

    for name, fn in queries("kafka", kafka_opts, None).items():
        timed("kafka", name, fn)
    cluster.stop()
    try:
        kl_opts = {"subscribe": topic, "startingOffsets": "earliest"}
        for name, fn in queries("kafkalog", kl_opts, log_dir).items():
            timed("kafkalog", name, fn)
    finally:
        cluster.start()
    if len(counts) == 2:
        assert counts["kafka"] == counts["kafkalog"], counts
    return res


def write_datasource(spark, df, root: Path, topic: str, codec: str, run_id: str) -> None:
    remove_logs(root)
    writer = (
        df.write.format("kafkalog")
        .mode("append")
        .option("topic", topic)
        .option(f"topics.{topic}.partitions", str(PARTITIONS))
        .option("runId", run_id)
    )
    if codec != "none":
        writer = writer.option(f"topics.{topic}.config.compression.type", codec)
    writer.save(str(root))


# ---------------------------------------------------------------------------------------------
# The session


def one_round(spark, meter, cluster, sources, args, rnd: str, results: dict) -> None:
    """Every road once per (workload, codec), in turns: a round of the comparison."""
    for workload, src in sources.items():
        for codec in args.codecs:
            rec = results.setdefault(f"{workload}/{codec}", {})
            one_case(
                spark, meter, cluster, workload, src, codec, args, f"{workload}-{codec}-{rnd}", rec
            )


def one_case(spark, meter, cluster, workload, src, codec, args, base: str, rec: dict) -> None:
    df = spark_frame(spark, workload, src)
    rows = rows_of(src)

    def add(name: str, figures: dict) -> None:
        rec.setdefault(name, []).append(figures)
        if name != "phases" and "failed" not in figures:
            print(f"  {base} {name}: {figures['wall']:.2f} s", flush=True)

    def load(name: str, fn: Callable[[str], object]) -> None:
        """One road into its own new topic; a failure is reported and the others still run."""
        topic = f"{name}-{base}"
        create_topic(cluster, topic)
        try:
            add(name, meter.run(lambda: fn(topic))[0])
            check_loaded(cluster, topic, rows)
        except Exception as e:  # noqa: BLE001 - the bench reports it and goes on
            line = next((x for x in str(e).splitlines() if "Exception:" in x), str(e)[:300])
            rec.setdefault(name, []).append({"failed": line.strip()[:300]})
            print(f"  {base} {name} FAILED: {line.strip()[:300]}", flush=True)
            delete_topic(cluster, topic)

    load("spark", lambda t: load_spark(spark, cluster, df, t, codec, args.linger_ms))
    load("producer", lambda t: load_producer(cluster, workload, src, t, codec, args.linger_ms))

    topic = f"kafkalog-{base}"
    config = ingest_config(workload, src, args.out / "peer-logs", topic, codec)
    phases = load_kafkalog(spark, meter, cluster, config, topic, f"peer-{base}", rows)
    add("kafkalog", _sum(phases, ("ingest", "place")))
    add("kafkalog+restart", _sum(phases, ("ingest", "stop", "place", "start")))
    add("phases", phases)

    if not args.no_write:
        ds_root = args.out / "peer-ds"
        frame = df.select("key", "value", "timestamp")
        add(
            "write-kafkalog",
            meter.run(lambda: write_datasource(spark, frame, ds_root, topic, codec, f"ds-{base}"))[
                0
            ],
        )
        remove_logs(ds_root)

    if not args.no_read and workload == "w":
        for name, m in read_runs(spark, meter, cluster, topic, args.out, base).items():
            add(f"read-{name}", m)
    delete_topic(cluster, topic)


def best(runs: list[dict]) -> dict:
    """The fastest run; a query that failed in every round gives its failure."""
    done = [m for m in runs if "failed" not in m]
    return min(done, key=lambda m: m["wall"]) if done else runs[0]


def report(results: dict, rows: int) -> list[str]:
    lines = []
    pairs = [
        ("kafkalog / spark", "kafkalog", "spark"),
        ("kafkalog+restart / spark", "kafkalog+restart", "spark"),
        ("kafkalog / producer", "kafkalog", "producer"),
        ("kafkalog+restart / producer", "kafkalog+restart", "producer"),
        ("write: format(kafkalog) / format(kafka)", "write-kafkalog", "spark"),
        ("read noop: kafkalog / kafka", "read-kafkalog-noop", "read-kafka-noop"),
        ("read count: kafkalog / kafka", "read-kafkalog-count", "read-kafka-count"),
        ("read stream: kafkalog / kafka", "read-kafkalog-stream", "read-kafka-stream"),
    ]
    for case, rec in results.items():
        lines.append(f"\n{case}, {rows:,} rows, {PARTITIONS} partitions")
        for name, runs in rec.items():
            if name == "phases":
                continue
            b = best(runs)
            if "failed" in b:
                lines.append(f"  {name:24s} FAILED: {b['failed']}")
                continue
            lines.append(
                f"  {name:24s} {b['wall']:8.2f} s wall  {b['cpu']:8.2f} s cpu  "
                f"broker {b['broker_cpu']:7.2f} s cpu   (runs: "
                + ", ".join(f"{m['wall']:.2f}" for m in runs)
                + ")"
            )
        ph = min(rec["phases"], key=lambda p: sum(m["wall"] for m in p.values()))
        lines.append(
            "  kafkalog phases: "
            + ", ".join(
                f"{k} {m['wall']:.2f} s (broker {m['broker_cpu']:.2f})" for k, m in ph.items()
            )
        )
        for label, num, den in pairs:
            if (
                num in rec
                and den in rec
                and not {"failed"} & (best(rec[num]).keys() | best(rec[den]).keys())
            ):
                lines.append(
                    f"  {label:40s} {best(rec[num])['wall'] / best(rec[den])['wall']:6.3f}x"
                )
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--warm-rows", type=int, default=50_000, help="0: no warm-up")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--workloads", default="w,orders")
    parser.add_argument("--codecs", default="none,zstd")
    parser.add_argument("--linger-ms", type=int, default=50)
    parser.add_argument("--no-read", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--driver-memory", default="3g")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    args.codecs = args.codecs.split(",")
    args.workloads = args.workloads.split(",")
    args.out = args.out.absolute()
    return args


def run(args: argparse.Namespace, spark=None, cluster=None) -> dict:
    """Every round; `spark` (with Spark's Kafka connector) and a running single-node `cluster`
    are made here (and the cluster stopped at the end) unless given."""
    from bench.ingest import jvm_pid
    from tests import jvm_deps
    from tests.kafka_cluster import KafkaCluster

    args.out.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    sources = make_sources(args.out, args.rows, args.workloads)
    if spark is None:
        spark = start_session(
            "local[2]", None, None, args.driver_memory,
            {"spark.jars": jvm_deps.spark_jars("spark-kafka")},
        )  # fmt: skip
    own = cluster is None
    if own:
        broker_root = args.out / "peer-broker"
        shutil.rmtree(broker_root, ignore_errors=True)
        cluster = KafkaCluster(broker_root, 1, heap=BROKER_HEAP, jvm_options=BROKER_JVM)
    results: dict = {}
    loads = []
    try:
        if own:
            cluster.start()
        meter = Meter(jvm_pid(spark), cluster)
        if args.warm_rows:
            # every road once, on the first table and codec (the JITs, Spark's code paths)
            warm = make_sources(args.out, min(args.warm_rows, args.rows), args.workloads[:1])
            codecs, args.codecs = args.codecs, args.codecs[:1]
            one_round(spark, meter, cluster, warm, args, "warm", {})
            args.codecs = codecs
            print(f"warm-up done (load {os.getloadavg()[0]:.1f})", flush=True)
        for r in range(args.repeat):
            one_round(spark, meter, cluster, sources, args, f"r{r}", results)
            loads.append(os.getloadavg())
            print(f"round {r} done (load {loads[-1][0]:.1f})", flush=True)
    finally:
        if own:
            cluster.close()
            shutil.rmtree(broker_root, ignore_errors=True)
    return {"rows": args.rows, "load": [load_start, *loads], "results": results}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    figures = run(args)
    lines = report(figures["results"], args.rows)
    lines.append(
        "\nload average (1 min): "
        + ", ".join(f"{x[0]:.1f}" for x in figures["load"])
        + " (at the start, then after each round)"
    )
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
