"""Benchmark: the ingest job (`jobs.ingest.run`) vs Spark's own `df.write.parquet`, same input.

Not a test. Run from the repo root:

    .venv/bin/python bench/ingest.py [--rows 5000000] [--master local[2]] [--scaling]
        [--repeat 1] [--out bench/out] [--no-stages] [--task-profile] [--compression lz4 ...]
        [--driver-memory 1g] [--no-parquet] [--json FILE]

Input (generated once, deterministic, cached under --out, not timed): `--rows` rows of
`key` binary(16) random, `value` binary(100) random, `ts` timestamp (ms, increasing), written by
pyarrow as `--files` snappy Parquet files. Both sides read exactly these files:

- parquet: `spark.read.parquet(src).write.parquet(dst)` with Spark's default codec (snappy) and
  uncompressed.
- ingest: `jobs.ingest.run(spark, config)` with a parquet source at `src`: one topic `bench`, 8
  partitions (murmur2 of the key, as the Java producer), default topic configs (segment.bytes
  1 GiB, uncompressed, CreateTime from `ts`), ordering = source, 1 MiB batches, once per
  `--modes`: `arrow` (output.write_mode direct with source.task_reader arrow: Spark schedules
  tasks that read the Parquet files with pyarrow; what `auto` picks here, with direct_tasks
  auto: on local[2] a task per group of partitions, each reading every file and writing its
  partitions whole, each byte once), `arrow-splits` (the same with a task per input split and
  the relayout after), `direct` (no shuffle, rows read by Spark and shipped to Python with
  mapInArrow), `range` (Spark's range partitioning + sort) and `range-arrow` (the range mode
  with the arrow reader: sorted runs exchanged through the run's staging instead of Spark's
  shuffle, `jobs.ingestion.tasks.arrow_range`). This includes everything a real run does:
  mapping + per-row checks, the one write pass (encode, PartitionLog, fsync, CRC-32C
  manifests; no mode counts rows first), the driver's placing of the shares staged
  provisionally (the `place` lap), the relayout of partitions staged in several shares (one
  Spark task each: the shares laid out as one writer) and the atomic publish.

Prints a table (rows, seconds, rows/s, MB/s of record payload = rows x 124 B, output size, peak
RSS of the JVM, the Python driver and the Python workers: bench/rss.py) and the ratio
ingest/parquet (goal <= 1.0, aim 0.8). `--scaling` runs everything under local[1] and
then --master and prints the speedups. Per Spark stage (from Spark's event log, unless
--no-stages): wall time, tasks, executor run/CPU time, shuffle bytes. `--remote` times every
path through a Spark Connect client of the run's own JVM instead. `--task-profile` skips
Spark and runs the task-side functions (mapping's Arrow function, the range mode's one-pass
`write_task`) directly on Arrow data of the same rows under cProfile, and prints the split.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.rss import RssSampler  # noqa: E402
from tests.kafka_cluster import free_ports  # noqa: E402
from tests.spark_mode import connect_client, connect_server_conf, spark_mode  # noqa: E402

TOPIC = "bench"
PARTITIONS = 8
KEY_BYTES, VALUE_BYTES, TS_BYTES = 16, 100, 8
ROW_BYTES = KEY_BYTES + VALUE_BYTES + TS_BYTES
BASE_TS = 1_700_000_000_000


# ---------------------------------------------------------------------------------------------
# Input


def _binary(width: int, data: np.ndarray, n: int) -> pa.Array:
    offsets = np.arange(n + 1, dtype=np.int32) * width
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def make_source(path: Path, rows: int, files: int, seed: int = 7) -> Path:
    """`files` Parquet files holding `rows` rows in order; reused when already there."""
    done = path / "_COMPLETE"
    if done.exists() and done.read_text() == f"{rows} {files} {seed}":
        return path
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    per_file = -(-rows // files)
    start = 0
    for i in range(files):
        n = min(per_file, rows - start)
        if n <= 0:
            break
        keys = rng.integers(0, 256, KEY_BYTES * n, dtype=np.uint8)
        values = rng.integers(0, 256, VALUE_BYTES * n, dtype=np.uint8)
        ts = BASE_TS + np.arange(start, start + n, dtype=np.int64)
        table = pa.table(
            {
                "key": _binary(KEY_BYTES, keys, n),
                "value": _binary(VALUE_BYTES, values, n),
                "ts": pa.array(ts, pa.timestamp("ms", tz="UTC")),
            }
        )
        pq.write_table(table, path / f"part-{i:05d}.parquet", compression="snappy")
        start += n
    done.write_text(f"{rows} {files} {seed}")
    return path


# --modes name -> (output.write_mode, source.task_reader, output.direct_tasks)
MODES = {
    "arrow": ("direct", "arrow", "auto"),
    "arrow-splits": ("direct", "arrow", "splits"),
    "direct": ("direct", "spark", "auto"),
    "range": ("range", "spark", "auto"),
    "range-arrow": ("range", "arrow", "auto"),
}


# --compression: the topic's compression.type ("producer", Kafka's default: the ingest writes
# uncompressed batches, as the producer here sends none).
CODECS = ("producer", "uncompressed", "lz4", "snappy", "zstd", "gzip")


def ingest_config(src: Path, root: Path, mode: str = "arrow", codec: str = "producer") -> dict:
    write_mode, reader, direct_tasks = MODES[mode]
    topic: dict = {"partitions": PARTITIONS}
    if codec != "producer":
        topic["config"] = {"compression.type": codec}
    return {
        "source": {"format": "parquet", "path": str(src), "task_reader": reader},
        "output": {"root": str(root), "write_mode": write_mode, "direct_tasks": direct_tasks},
        "topics": {TOPIC: topic},
        "mapping": {
            "topic": TOPIC,
            "key": {"column": "key", "format": "bytes"},
            "value": {"column": "value", "format": "bytes"},
            "timestamp": {"column": "ts"},
        },
    }


def du(path: Path) -> int:
    total = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(os.path.join(dirpath, name)).st_size
    return total


# ---------------------------------------------------------------------------------------------
# Spark


def start_session(
    master: str,
    events: Path | None,
    tasks: int | None,
    driver_memory: str = "6g",
    extra_conf: dict[str, str] | None = None,
):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from jobs.spark.session import get_or_create_session

    cores = int(master[master.index("[") + 1 : -1]) if "[" in master else os.cpu_count() or 2
    conf = {
        "spark.master": master,
        # Static settings: only honoured when this process starts the JVM (its first SparkSession).
        "spark.driver.memory": driver_memory,  # 1g is Spark's default
        "spark.driver.maxResultSize": "1g",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
        "spark.default.parallelism": str(tasks or cores),
        "spark.sql.shuffle.partitions": str(tasks or max(cores, PARTITIONS)),
        # Local mode: one JVM, spilling to /tmp; keep the local dir off the repo.
        "spark.local.dir": "/tmp/kafkalog-bench-spark",
    }
    if events is not None:
        events.mkdir(parents=True, exist_ok=True)
        conf.update(
            {
                "spark.eventLog.enabled": "true",
                "spark.eventLog.dir": events.absolute().as_uri(),
                "spark.eventLog.compress": "false",
                "spark.eventLog.rolling.enabled": "false",
            }
        )
    conf.update(extra_conf or {})  # e.g. spark.jars of Spark's Kafka connector (bench/peer.py)
    spark = get_or_create_session(f"kafkalog-bench-ingest-{master}", conf)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def settle() -> None:
    """Start a timed run with no dirty pages: without it, one run's write-back (Parquet never
    fsyncs its 650 MB) throttles whichever run comes next, and the ratios drift with the order."""
    os.sync()


def timed_parquet(spark, src: Path, dst: Path, codec: str) -> float:
    shutil.rmtree(dst, ignore_errors=True)
    settle()
    start = time.perf_counter()
    spark.read.parquet(str(src)).write.option("compression", codec).parquet(str(dst))
    return time.perf_counter() - start


def remove_logs(root: Path) -> None:
    for d in (root, root.parent / f".{root.name}.kafkalog"):  # the log dir and its meta area
        shutil.rmtree(d, ignore_errors=True)


def timed_ingest(
    spark, src: Path, root: Path, run_id: str, tasks: int | None, mode: str, codec: str
):
    from jobs import ingest
    from jobs.ingestion.config.ingest_config import IngestConfig

    remove_logs(root)
    config = IngestConfig.from_dict(ingest_config(src, root, mode, codec))
    settle()
    start = time.perf_counter()
    result = ingest.run(spark, config, run_id=run_id, tasks=tasks, out=lambda *_: None)
    elapsed = time.perf_counter() - start
    if result.status != "committed":
        raise SystemExit(f"ingest run {run_id}: {result.status} ({result.summary})")
    return elapsed, result


def kinds_of(args) -> list[tuple[str, str | None, str]]:
    """(name, ingest mode or None for Parquet, codec) of every timed path, in run order."""
    modes = (
        ([m for m in args.modes if m.startswith("range")] or ["range"])
        if args.tasks
        else args.modes
    )
    kinds: list[tuple[str, str | None, str]] = []
    if not args.no_parquet:
        kinds.append(("parquet-snappy", None, "snappy"))
    for codec in args.compression:
        suffix = "" if codec == "producer" else f"-{codec}"
        kinds += [(f"ingest-{mode}{suffix}", mode, codec) for mode in modes]
    no_none = args.no_uncompressed or args.no_parquet
    return kinds + ([] if no_none else [("parquet-none", None, "none")])


def jvm_pid(spark) -> int:
    """The pid of the JVM behind the session (local mode: the driver and the executors)."""
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def run_master(args, master: str, src: Path, warm: Path, events: Path | None) -> dict:
    """All timed runs under one master: seconds, output sizes, driver timings and RSS peaks."""
    port = free_ports(1)[0] if args.remote else None
    serve = connect_server_conf(port) if port is not None else None
    spark = start_session(master, events, args.tasks, args.driver_memory, serve)
    sc = spark.sparkContext
    # --remote: every timed path through a Spark Connect client of this JVM (as bench/connect.py)
    timed = connect_client(port) if port is not None else spark
    with spark_mode("connect" if port is not None else "classic"):  # how pyspark builds Columns
        out = args.out
        sizes: dict[str, int] = {}
        times: dict[str, list[float]] = {}
        rss: dict[str, list[dict[str, float]]] = {}
        driver_timings: list[dict[str, int]] = []
        kinds = kinds_of(args)
        # Warm-up (JVM JIT, Python workers, page cache of the source): a small run of each kind.
        sc.setJobGroup("warmup", "warmup")
        timed_parquet(timed, warm, out / "warm-parquet", "snappy")
        for _, mode, codec in kinds:
            if mode is not None:
                warm_run = f"warm-{time.time_ns()}"
                timed_ingest(timed, warm, out / "warm-logs", warm_run, args.tasks, mode, codec)
        timed.read.parquet(str(src)).selectExpr("sum(length(value))").collect()
        sampler = RssSampler(jvm_pid(spark))
        for r in range(args.repeat):
            for kind, mode, codec in kinds:
                group = f"{master}|{kind}|{r}"
                sc.setJobGroup(group, group)
                sampler.start()
                if mode is not None:
                    root = out / "ingest-logs"
                    run_id = f"bench-{time.time_ns()}"
                    t, result = timed_ingest(timed, src, root, run_id, args.tasks, mode, codec)
                    driver_timings.append(
                        {
                            "mode": result.write_mode,
                            "reader": result.task_reader,
                            "direct_tasks": result.direct_tasks,
                            **result.timings_ms,
                        }
                    )
                    if result.records != args.rows:
                        raise SystemExit(f"ingest wrote {result.records} records, not {args.rows}")
                else:
                    root = out / f"{kind}-out"
                    t = timed_parquet(timed, src, root, codec)
                peaks = sampler.stop()
                sizes[kind] = du(root)
                remove_logs(root)  # the next path starts with the disk as free as this one did
                times.setdefault(kind, []).append(t)
                rss.setdefault(kind, []).append(peaks.as_dict())
                print(
                    f"  [{master}] {kind:15s} run {r + 1}: {t:7.2f} s  peak RSS MiB: JVM {peaks.jvm:.0f},"
                    f" py driver {peaks.python_driver:.0f}, py worker max {peaks.worker_max:.0f}"
                    f" (anon {peaks.worker_anon_max:.0f}) / sum {peaks.worker_sum:.0f}"
                    f" ({peaks.workers} procs)",
                    flush=True,
                )
    app_id = sc.applicationId
    if timed is not spark:
        timed.stop()
    spark.stop()
    for d in ("warm-parquet", "warm-logs"):
        remove_logs(out / d)
    return {
        "master": master,
        "times": times,
        "sizes": sizes,
        "rss_mib": rss,
        "driver_timings": driver_timings,
        "app_id": app_id,
    }


def print_table(res: dict, rows: int) -> None:
    best = {k: min(v) for k, v in res["times"].items()}
    peak = {k: {m: max(p[m] for p in v) for m in v[0]} for k, v in res["rss_mib"].items()}
    mb = rows * ROW_BYTES / 1e6
    print(f"\n{res['master']}: {rows:,} rows, {mb:.0f} MB of record payload (key+value+ts)")
    print(
        f"{'path':20s} {'seconds':>8s} {'rows/s':>11s} {'MB/s':>7s} {'output MB':>10s}"
        f" {'JVM MiB':>8s} {'pydrv MiB':>9s} {'wrk max':>8s} {'wrk anon':>8s} {'wrk sum':>8s}"
    )
    for kind, t in best.items():
        out_mb = res["sizes"].get(kind, 0) / 1e6
        p = peak[kind]
        print(
            f"{kind:20s} {t:8.2f} {rows / t:11,.0f} {mb / t:7.1f} {out_mb:10.1f}"
            f" {p['jvm']:8.0f} {p['python_driver']:9.0f} {p['worker_max']:8.0f}"
            f" {p.get('worker_anon_max', 0):8.0f} {p['worker_sum']:8.0f}"
        )
    print("(peak RSS: max over the repeats; see bench/rss.py for what each column measures)")
    for ingest_kind in (k for k in best if k.startswith("ingest")):
        for kind in (k for k in best if k.startswith("parquet")):
            ratio = best[ingest_kind] / best[kind]
            print(f"ratio {ingest_kind} / {kind}: {ratio:.2f}")
    for i, t in enumerate(res["driver_timings"]):
        print(f"ingest driver timings_ms (run {i + 1}): {t}")


def write_json(path: Path, args, results: list[dict], load_start: tuple) -> None:
    """The run's figures, for docs and for comparing runs (e.g. RSS at 5M vs 50M rows)."""
    doc = {
        "rows": args.rows,
        "files": args.files,
        "driver_memory": args.driver_memory,
        "load_start": load_start,  # 1, 5, 15-minute load averages
        "load_end": os.getloadavg(),
        "argv": sys.argv[1:],
        "machine_ceiling": getattr(args, "ceiling", None),  # with --scaling: bench/machine.py
        "results": [{k: v for k, v in r.items() if k != "app_id"} for r in results],
    }
    path.write_text(json.dumps(doc, indent=1))
    print(f"figures written to {path}")


# ---------------------------------------------------------------------------------------------
# Stages from Spark's event log


def stage_report(events: Path, app_id: str) -> None:
    candidates = sorted(p for p in events.rglob(f"*{app_id}*") if p.is_file())
    candidates = [p for p in candidates if not p.name.startswith((".", "appstatus"))]
    if not candidates:
        print(f"(no event log for {app_id} under {events})")
        return
    log = candidates[0]
    stage_group: dict[int, str] = {}
    stages = []
    jobs: dict[int, tuple[str, float, float]] = {}
    last: dict[int, float] = {}
    job_start: dict[int, tuple[str, float]] = {}
    with open(log) as f:
        for line in f:
            e = json.loads(line)
            kind = e.get("Event")
            if kind == "SparkListenerJobStart":
                group = (e.get("Properties") or {}).get("spark.jobGroup.id", "")
                for sid in e.get("Stage IDs", []):
                    stage_group[sid] = group
                job_start[e["Job ID"]] = (group, e["Submission Time"])
            elif kind == "SparkListenerJobEnd":
                group, t0 = job_start.get(e["Job ID"], ("", e["Completion Time"]))
                jobs[e["Job ID"]] = (group, t0, e["Completion Time"])
            elif kind == "SparkListenerStageCompleted":
                info = e["Stage Info"]
                acc: dict[str, float] = {}
                for a in info.get("Accumulables", []):
                    # "Value" is the accumulator's running total: SQL metrics of a plan node run
                    # by several stages (the range sampling, then the shuffle) add up across
                    # them, so take the difference from the last value seen.
                    name, value = a.get("Name"), _num(a.get("Value"))
                    acc[name] = acc.get(name, 0.0) + value - last.get(a.get("ID"), 0.0)
                    last[a.get("ID")] = value
                stages.append(
                    {
                        "id": info["Stage ID"],
                        "name": info["Stage Name"],
                        "tasks": info["Number of Tasks"],
                        "wall": (info["Completion Time"] - info["Submission Time"]) / 1000,
                        "run": acc.get("internal.metrics.executorRunTime", 0) / 1000,
                        "cpu": acc.get("internal.metrics.executorCpuTime", 0) / 1e9,
                        "gc": acc.get("internal.metrics.jvmGCTime", 0) / 1000,
                        "in": acc.get("internal.metrics.input.bytesRead", 0) / 1e6,
                        "shw": acc.get("internal.metrics.shuffle.write.bytesWritten", 0) / 1e6,
                        "shr": acc.get("internal.metrics.shuffle.read.localBytesRead", 0) / 1e6,
                        "spill": acc.get("internal.metrics.diskBytesSpilled", 0) / 1e6,
                        "py": acc.get("time to execute Python code", 0) / 1000,
                        "topy": acc.get("data sent to Python workers", 0) / 1e6,
                    }
                )
    print(
        f"\nSpark stages ({log.name}); wall = stage submit..complete; run/cpu/gc/py = sums over "
        "tasks; py = Spark's 'time to execute Python code'; ->py = bytes sent to Python"
    )
    print(
        f"{'group':26s} {'stage':>5s} {'what':28s} {'tasks':>5s} {'wall s':>6s}"
        f" {'run s':>6s} {'cpu s':>6s} {'gc s':>5s} {'py s':>6s} {'->py MB':>7s}"
        f" {'in MB':>6s} {'shW MB':>6s} {'shR MB':>6s} {'spill':>5s}"
    )
    cache_reads: dict[str, int] = {}
    for s in sorted(stages, key=lambda s: s["id"]):
        group = stage_group.get(s["id"], "")
        if group == "warmup" or not group:
            continue
        s["name"] = _label(s, group, cache_reads)
        print(
            f"{group:26s} {s['id']:5d} {s['name'][:28]:28s} {s['tasks']:5d} {s['wall']:6.2f}"
            f" {s['run']:6.2f} {s['cpu']:6.2f} {s['gc']:5.2f} {s['py']:6.2f}"
            f" {s['topy']:7.1f} {s['in']:6.1f} {s['shw']:6.1f} {s['shr']:6.1f} {s['spill']:5.0f}"
        )
    by_group: dict[str, float] = {}
    for group, t0, t1 in jobs.values():
        if group and group != "warmup":
            by_group[group] = by_group.get(group, 0.0) + (t1 - t0) / 1000
    print("Spark job wall time per timed run (sum over its jobs):")
    for group, t in by_group.items():
        print(f"  {group:26s} {t:7.2f} s")


def _label(s: dict, group: str, cache_reads: dict[str, int]) -> str:
    """What an ingest stage does, from its shape (callsite line numbers move with edits)."""
    if "ingest" not in group:
        return "read + write parquet" if s["tasks"] > 1 else "file listing / schema"
    if "relayout" in s["name"]:  # the RDD job of jobs/ingestion/relayout/shares.py (its callsite)
        return "relayout: shares as one writer"
    if "arrow_range" in s["name"]:  # jobs/ingestion/tasks/arrow_range.py: two jobs, in this order
        seen = cache_reads.setdefault(f"{group}:arrow_range", 0)
        cache_reads[f"{group}:arrow_range"] = seen + 1
        return "exchange: read+map+sort runs" if seen % 2 == 0 else "write pass: runs->ranges"
    if "arrow" in group:  # the tasks read the files: no rows flow through the JVM
        return "write pass: pyarrow read+write" if s["tasks"] > 1 else "small job"
    if "direct" in group:  # one write job over the input splits
        if s["topy"] > 0:
            return "write pass: read+map+write(py)"
        return "file listing / schema"
    if "range_bounds" in s["name"]:  # jobs/ingestion/ranges/bounds.py: a sample mapped, sorted
        return "bounds: read+sample+map(py)" if s["tasks"] > 1 else "bounds: sort the sample"
    if s["shw"] > 0 and s["topy"] == 0 and s["shr"] == 0:  # before the bounds: count(*)
        return "bounds: count source rows"
    if s["shw"] > 0 and s["topy"] > 0:
        cache_reads[group] = 0
        return "range shuffle: read+map(py)"
    if s["shr"] > 0 and s["topy"] > 0:  # one pass: the write reads the shuffle and sorts
        return "write pass: shuffle read+sort+write(py)"
    if s["shr"] > 0 and s["in"] == 0 and s["tasks"] > 1:
        return "shuffle read, sort, cache"
    if s["topy"] > 0 and group not in cache_reads:  # before the shuffle: RangePartitioner
        return "range sampling: read+map(py)"
    if s["topy"] > 0:
        return "write pass (py)"
    if s["in"] > 0:
        return "count pass (cached rows)"
    return "file listing / schema" if s["tasks"] == 1 else s["name"]


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return 0.0


# ---------------------------------------------------------------------------------------------
# Task-side profile (no Spark)


def task_profile(src: Path, rows: int, out: Path, batch_rows: int = 10_000) -> None:
    """Run the ingest's task functions on Arrow data of the benchmark rows, as Spark would."""
    from jobs.ingestion.commit.place import place_ranges
    from jobs.ingestion.config.ingest_config import IngestConfig
    from jobs.ingestion.mapping.arrow_mapping import map_batch
    from jobs.ingestion.mapping.rules import ORDER_COLUMN, mapping_rules
    from jobs.ingestion.tasks.planner import OnePassPlan
    from jobs.ingestion.tasks.writer import DEFAULT_BATCH_BYTES, WriterSettings, write_task
    from kafkalog_core.log.partition.append import batch_options_for

    table = pq.read_table(src).slice(0, rows)
    n = table.num_rows
    config = IngestConfig.from_dict(ingest_config(src, out / "task-logs"))
    plan = mapping_rules(config)
    # What mapping's mapInArrow receives (stage 1 output): Spark's column set for this config.
    ts_ms = table.column("ts").cast(pa.int64()).combine_chunks()
    entry = pa.struct([("key", pa.string()), ("value", pa.binary())])
    headers = pa.ListArray.from_arrays(
        pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], entry)
    )  # no headers: every row an empty list, as the mapping's F.array() gives
    prepared = pa.table(
        {
            "topic": pa.array(np.full(n, TOPIC, dtype=object), pa.string()),
            "key": table.column("key").combine_chunks(),
            "value": table.column("value").combine_chunks(),
            "headers": headers,
            "timestamp": ts_ms,
            "_kl_partition_in": pa.nulls(n, pa.int32()),
            ORDER_COLUMN: pa.StructArray.from_arrays(
                [pa.array(np.arange(n, dtype=np.int64))], names=["pos"]
            ),
        }
    )
    batches = prepared.to_batches(max_chunksize=batch_rows)

    def timed(fn, *a):
        t0 = time.perf_counter()
        value = fn(*a)
        return value, time.perf_counter() - t0

    cache: dict = {}
    mapped, t_map = timed(lambda: [map_batch(b, plan, cache) for b in batches])
    mapped_table = pa.Table.from_batches(mapped)
    # Range partitioning + sortWithinPartitions: by (topic, partition, pos); one task per
    # partition here (the real job's range boundaries rarely align, so a task may hold 2).
    order = np.lexsort(
        (
            np.arange(n),
            mapped_table.column("partition").to_numpy(),
        )
    )
    sorted_table = mapped_table.take(pa.array(order)).select(
        ["topic", "partition", "key", "value", "headers", "timestamp"]
    )
    parts = sorted_table.column("partition").to_numpy()
    bounds = np.searchsorted(parts, np.arange(PARTITIONS + 1))
    tasks = [
        sorted_table.slice(bounds[i], bounds[i + 1] - bounds[i]).to_batches(batch_rows)
        for i in range(PARTITIONS)
    ]

    spec = config.topic(TOPIC)
    settings = WriterSettings(
        output_root=str(out / "task-logs"),
        run_id="task-profile",
        configs={TOPIC: spec.log_config},
        batch_options={
            TOPIC: batch_options_for(
                spec.log_config,
                leader_epoch=0,
                now_ms=None,
                max_batch_bytes=DEFAULT_BATCH_BYTES,
            )
        },
    )
    one_pass = OnePassPlan({})

    def write_all():
        staged = [
            m for i, b in enumerate(tasks) for m in write_task(b, i, f"a{i}", one_pass, settings)
        ]
        return place_ranges(staged, {})

    shutil.rmtree(out / "task-logs", ignore_errors=True)
    manifests, t_write = timed(write_all)
    size = sum(m.size_bytes for m in manifests)
    shutil.rmtree(out / "task-logs", ignore_errors=True)
    profiler = cProfile.Profile()
    profiler.enable()
    write_all()
    profiler.disable()
    shutil.rmtree(out / "task-logs", ignore_errors=True)

    mb = n * ROW_BYTES / 1e6
    print(f"\nTask-side functions on {n:,} rows ({mb:.0f} MB payload), {batch_rows}-row batches,")
    print(
        f"one process, {PARTITIONS} simulated tasks (one per partition); {size / 1e6:.0f} MB written"
    )
    print(f"  mapping map_batch (mapInArrow body): {t_map:6.2f} s  ({n / t_map:,.0f} rows/s)")
    print(f"  write_task + place_ranges (one pass): {t_write:6.2f} s  ({n / t_write:,.0f} rows/s)")
    stats = pstats.Stats(profiler)
    total = stats.total_tt
    wanted = [
        ("encode_records", "encode.py"),
        ("append_batches", "partition_log_append.py"),
        ("close", "partition_log.py"),
        ("fsync_file", "staging.py"),
        ("fsync_dir", "checkpoint_file.py"),
        ("_sync_and_checksum", "staging.py"),
        ("write_manifest", "staging.py"),
        ("finalize_task_staging", "staging.py"),
        ("partition_runs", "writer.py"),
        ("rebase_manifest", "staging.py"),
        ("concat_tables", ""),
        ("combine_chunks", ""),
        ("from_batches", ""),
        ("create", "partition_log.py"),
    ]
    print(f"  write_task under cProfile: {total:.2f} s; cumulative time by function:")
    for func, file in wanted:
        ct = sum(
            v[3]
            for (path, _, name), v in stats.stats.items()  # type: ignore[attr-defined]
            if name == func and (not file or path.endswith(file))
        )
        print(f"    {func:24s} {ct:6.2f} s  {100 * ct / total:5.1f} %")
    if os.environ.get("BENCH_PSTATS"):
        stats.sort_stats("tottime").print_stats(25)


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--scaling", action="store_true", help="also run local[1]; print speedups")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs of each path (best of)")
    ap.add_argument("--files", type=int, default=8, help="source Parquet files")
    ap.add_argument("--tasks", type=int, default=None, help="ingest tasks (range mode only)")
    ap.add_argument(
        "--modes",
        nargs="+",
        default=list(MODES),
        choices=list(MODES),
        help="ingest paths to time: arrow / direct / range / range-arrow (see the docstring)",
    )
    ap.add_argument(
        "--compression",
        nargs="+",
        default=["producer"],
        choices=CODECS,
        help="the topic's compression.type; each ingest path runs once per codec given",
    )
    ap.add_argument(
        "--driver-memory", default="6g", help="spark.driver.memory (Spark's default is 1g)"
    )
    ap.add_argument(
        "--remote",
        action="store_true",
        help="time every path through a Spark Connect client of this run's JVM (pyspark's "
        "Connect plugin on a free port; no stage table); bench/connect.py sets both side by side",
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the figures as JSON")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    ap.add_argument("--no-uncompressed", action="store_true", help="skip the uncompressed Parquet")
    ap.add_argument("--no-parquet", action="store_true", help="time the ingest paths only")
    ap.add_argument("--no-stages", action="store_true", help="no Spark event log / stage table")
    ap.add_argument("--task-profile", action="store_true", help="task-side cProfile, no Spark")
    ap.add_argument("--profile-rows", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    args.out = args.out.absolute()
    args.out.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    load_start = os.getloadavg()
    src = make_source(args.out / f"ingest-src-{args.rows}", args.rows, args.files)
    warm = make_source(args.out / "ingest-src-warm", 100_000, 2)
    print(
        f"source: {src} ({du(src) / 1e6:.0f} MB on disk, {args.files} files), "
        f"ready in {time.perf_counter() - t0:.1f} s"
    )
    if args.task_profile:
        task_profile(src, min(args.profile_rows, args.rows), args.out)
        return 0

    events = None if args.no_stages or args.remote else args.out / "ingest-events"
    if events is not None:
        shutil.rmtree(events, ignore_errors=True)
    masters = (["local[1]"] if args.scaling and args.master != "local[1]" else []) + [args.master]
    ceiling = None
    if len(masters) == 2:
        from bench.machine import machine_scaling

        ceiling = args.ceiling = machine_scaling()
        print(
            "machine ceiling for 1 -> 2 cores (two processes sharing nothing): "
            + ", ".join(f"{kind} x{ratio:.2f}" for kind, ratio in ceiling.items())
        )
    results = []
    for master in masters:
        res = run_master(args, master, src, warm, events)
        results.append(res)
        print_table(res, args.rows)
        if events is not None:
            stage_report(events, res["app_id"])
    if len(results) == 2:
        one, many = ({k: min(v) for k, v in r["times"].items()} for r in results)
        print(f"\nscaling {results[0]['master']} -> {results[1]['master']} (speedup = t1 / t2):")
        for kind in many:
            print(
                f"  {kind:16s} {one[kind]:7.2f} s -> {many[kind]:7.2f} s  x{one[kind] / many[kind]:.2f}"
            )
        if ceiling is not None:
            print(
                "  (the machine's own ceiling: "
                + ", ".join(f"{kind} x{ratio:.2f}" for kind, ratio in ceiling.items())
                + ")"
            )
    remove_logs(args.out / "ingest-logs")
    if args.json is not None:
        write_json(args.json, args, results, load_start)
    print(f"\ntotal benchmark time {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
