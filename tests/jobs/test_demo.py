"""The demo job (README's first command): what it writes, what it prints, how it re-runs.

The run itself is the `demo_run` fixture (tests/conftest.py), which the docs' tests share."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2
from kafka.record.memory_records import MemoryRecords

from jobs import demo

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "spark-submit.sh"
PARTITION = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
ROOT_FILES = {
    "recovery-point-offset-checkpoint",
    "replication-offset-checkpoint",
    "log-start-offset-checkpoint",
    "cleaner-offset-checkpoint",
    "meta.properties",
}
CODEC = {"gzip": 1, "zstd": 4}  # the batch attributes codec ids


def read_partition(pdir: Path) -> list:
    """Every record of a partition dir, decoded by kafka-python, with its batch."""
    records = []
    for log in sorted(pdir.glob("*.log")):
        batches = MemoryRecords(log.read_bytes())
        while batches.has_next():
            batch = batches.next_batch()
            records.extend((batch, record) for record in batch)
    return records


def check_root_is_a_pure_log_dir(output: Path) -> dict[str, set[int]]:
    topics: dict[str, set[int]] = {}
    for entry in output.iterdir():
        if entry.is_dir():
            match = PARTITION.match(entry.name)
            assert match, f"{entry.name} in the log dir is not a <topic>-<partition> dir"
            topics.setdefault(match["topic"], set()).add(int(match["partition"]))
        else:
            assert entry.name in ROOT_FILES, f"unexpected file {entry.name} in the log dir"
    return topics


@pytest.mark.spark
def test_log_dir_layout(demo_run):
    result, _, output = demo_run
    topics = check_root_is_a_pure_log_dir(output)
    assert topics == {
        demo.CUSTOMERS_TOPIC: set(range(demo.CUSTOMER_PARTITIONS)),
        demo.ORDERS_TOPIC: set(range(demo.ORDER_PARTITIONS)),
    }
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        lines = (output / name).read_text().splitlines()
        assert lines[:2] == ["0", str(demo.CUSTOMER_PARTITIONS + demo.ORDER_PARTITIONS)]
    for pdir in output.iterdir():
        if pdir.is_dir():
            assert (pdir / "partition.metadata").is_file()
            assert (pdir / "leader-epoch-checkpoint").is_file()
    # the source tables stay out of the log dir, in its meta area
    assert result.source.is_relative_to(output.parent) and not result.source.is_relative_to(output)
    # small segments: several per customers partition, with offset index entries
    for p in range(demo.CUSTOMER_PARTITIONS):
        pdir = output / f"customers-{p}"
        logs = sorted(pdir.glob("*.log"))
        assert len(logs) >= 2, f"{pdir} should have rolled segments"
        assert (pdir / logs[0].name.replace(".log", ".index")).stat().st_size >= 8


@pytest.mark.spark
def test_records_decode_with_kafka_python(demo_run):
    result, _, output = demo_run
    customers = demo.customers_table().to_pylist()
    orders = demo.orders_table().to_pylist()
    expected = {demo.CUSTOMERS_TOPIC: len(customers), demo.ORDERS_TOPIC: len(orders)}
    counts: Counter = Counter()
    keys: dict[str, set[bytes]] = {demo.CUSTOMERS_TOPIC: set(), demo.ORDERS_TOPIC: set()}
    for pdir in sorted(p for p in output.iterdir() if p.is_dir()):
        match = PARTITION.match(pdir.name)
        topic, partition = match["topic"], int(match["partition"])
        records = read_partition(pdir)
        assert [r.offset for _, r in records] == list(range(len(records)))
        n = demo.CUSTOMER_PARTITIONS if topic == demo.CUSTOMERS_TOPIC else demo.ORDER_PARTITIONS
        codec = "zstd" if topic == demo.CUSTOMERS_TOPIC else "gzip"
        for batch, record in records:
            assert batch.compression_type == CODEC[codec]
            assert batch.timestamp_type == 0  # CreateTime
            assert (murmur2(record.key) & 0x7FFFFFFF) % n == partition  # Java's partitioner
            keys[topic].add(record.key)
            if topic == demo.ORDERS_TOPIC:
                headers = dict(record.headers)
                assert headers["source"] == b"kafkalog-demo"
                assert headers["channel"] in (b"web", b"app", b"store")
        counts[topic] += len(records)
    assert counts == expected
    assert result.customers.records == len(customers) and result.orders.records == len(orders)
    assert keys[demo.CUSTOMERS_TOPIC] == {c["customer_id"].encode() for c in customers}
    # timestamps come from the rows: the earliest order event is the table's first event time
    first = min(
        r.timestamp for p in output.glob(f"{demo.ORDERS_TOPIC}-*") for _, r in read_partition(p)
    )
    assert first == int(orders[0]["event_time"].timestamp() * 1000)


@pytest.mark.spark
def test_prints_summaries_dumps_and_the_path(demo_run):
    result, lines, output = demo_run
    text = "\n".join(lines)
    for run in (result.customers, result.orders):
        assert run.status == "committed"
        assert run.brief and run.brief in text and run.summary not in text
    # the ingests' internals stay under --verbose
    assert "task reader:" not in text and "segments:" not in text
    assert "run demo-customers: committed" in text and "run demo-orders: committed" in text
    assert any(line.startswith("$ kafkalog dump-log --files") for line in lines)
    assert any(
        line.startswith("| offset: 0 CreateTime:") and "payload: {" in line for line in lines
    )
    assert any("compresscodec: gzip" in line for line in lines)
    assert any(re.fullmatch(r"offset: \d+ position: \d+", line) for line in lines)
    assert f"Kafka log dir: {output}" in lines
    assert "dump-log --files" in lines[-1]  # ends with a command to try


def test_rerun_replaces_a_demo_output_and_refuses_foreign_dirs(tmp_path, monkeypatch):
    output = tmp_path / "logs"
    messages: list[str] = []
    source = demo.prepare_output(output, messages.append)
    assert messages == [] and source.is_dir() and output.is_dir()
    (output / "customers-0").mkdir()
    (source / "customers").mkdir()
    source = demo.prepare_output(output, messages.append)
    assert messages == [f"Replacing the previous demo output in {output}"]
    assert list(output.iterdir()) == [] and list(source.iterdir()) == []

    # meta area deleted by hand: only the default folder (the demo's own) is still replaced
    shutil.rmtree(source.parent)
    (output / "orders-events-3").mkdir()
    with pytest.raises(demo.DemoError, match="the demo did not write"):
        demo.prepare_output(output, messages.append)
    monkeypatch.setattr(demo, "DEFAULT_OUTPUT", output)
    demo.prepare_output(output, messages.append)
    assert messages[-1] == f"Replacing the previous demo output in {output}"
    assert list(output.iterdir()) == []
    monkeypatch.undo()

    foreign = tmp_path / "data"
    foreign.mkdir()
    (foreign / "important.txt").write_text("keep me")
    with pytest.raises(demo.DemoError, match="the demo did not write"):
        demo.prepare_output(foreign, messages.append)
    assert (foreign / "important.txt").read_text() == "keep me"
    # an empty dir whose meta area is someone else's ingest bookkeeping is not ours either
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / ".empty.kafkalog" / "ingest-history").mkdir(parents=True)
    with pytest.raises(demo.DemoError, match="the demo did not write"):
        demo.prepare_output(empty, messages.append)
    assert (tmp_path / ".empty.kafkalog" / "ingest-history").is_dir()


@pytest.mark.spark
def test_main_refuses_a_foreign_output_with_one_line(spark, tmp_path, capsys):
    foreign = tmp_path / "data"
    foreign.mkdir()
    (foreign / "x").write_text("x")
    assert demo.main(["--output", str(foreign)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kafkalog: error: --output")
    assert (foreign / "x").exists()


def test_spark_submit_lists_the_demo():
    result = subprocess.run(
        [str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 0
    jobs_line = next(line for line in result.stdout.splitlines() if line.startswith("jobs:"))
    assert "demo" in jobs_line.split()


@pytest.mark.spark
def test_spark_submit_demo_end_to_end(tmp_path):
    """The README's command as a user runs it (its own JVM: about 20 s on 2 cores)."""
    output = tmp_path / "out"
    result = subprocess.run(
        [str(SCRIPT), "--master", "local[2]", "demo", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert f"Kafka log dir: {output}" in lines
    assert "dump-log --files" in lines[-1]
    assert set(check_root_is_a_pure_log_dir(output)) == {demo.CUSTOMERS_TOPIC, demo.ORDERS_TOPIC}
    # quiet: no log4j lines and no tracebacks (the JVM's incubator-module notice is tolerated)
    noise = [
        line
        for line in result.stderr.splitlines()
        if line.strip() and not line.startswith("WARNING: Using incubator modules")
    ]
    assert noise == []


def _partition_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.glob("*-*/*")) if p.is_file()
    }


@pytest.mark.spark
def test_the_demo_output_verifies_clean_with_and_without_its_history(spark, demo_run, tmp_path):
    """rebuild-index finds nothing to fix in the demo's fresh output, judged at its topics'
    recorded settings or, copied without its ingest history, at Kafka's defaults; a rebuild
    then leaves every file as it is."""
    from jobs import rebuild_index

    _, _, output = demo_run
    quiet = {"out": lambda _line: None}
    assert rebuild_index.run(spark, str(output), **quiet).problems == 0
    copy = tmp_path / "copied" / "logs"
    shutil.copytree(output, copy)
    verified = rebuild_index.run(spark, str(copy), **quiet)
    assert verified.problems == 0
    assert {r["index_status"] for r in verified.rows.to_pylist()} == {"ok"}
    before = _partition_files(copy)
    rebuild_index.run(spark, str(copy), mode="rebuild", **quiet)
    assert _partition_files(copy) == before
