"""The oracle itself (tests/kafka_oracle.py): Kafka's client reads the real-broker fixtures as our
decoder does, and refuses a damaged segment, naming the file and the batch."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kafkalog_core.record.decoder import decode_records

BROKER_DIRS = ["segments/broker-2x-interval4096", "logdirs/confluent-5.1.2"]


def our_records(log_dir: Path) -> dict[tuple[str, str], list[tuple]]:
    """(partition dir, segment) -> (offset, timestamp, key, value, headers) by our decoder,
    control records included (Kafka's client yields them too)."""
    out = {}
    for log in sorted(log_dir.glob("*/*.log")):
        table = decode_records(log.read_bytes(), include_control=True)
        out[(log.parent.name, log.name)] = [
            (
                r["offset"],
                r["timestamp"],
                r["key"],
                r["value"],
                tuple((h["key"], h["value"]) for h in r["headers"] or []),
            )
            for r in table.to_pylist()
        ]
    return out


@pytest.mark.parametrize("name", BROKER_DIRS)
def test_real_broker_logs_read_the_same_through_kafka_and_our_decoder(
    kafka_client, fixtures_dir: Path, name: str
) -> None:
    log_dir = fixtures_dir / name
    read = kafka_client.kafka_client_read(log_dir)
    theirs: dict[tuple[str, str], list[tuple]] = {seg: [] for seg in read.segments}
    for r in read.records:
        theirs[(r.dir, r.segment)].append((r.offset, r.timestamp, r.key, r.value, r.headers))
    ours = our_records(log_dir)
    assert set(theirs) == set(ours) and len(ours) > 30
    assert sum(map(len, ours.values())) > 500
    for seg, records in ours.items():
        assert theirs[seg] == records, seg
    # every byte of every segment is in some batch
    for (dir_name, segment), size in read.segments.items():
        in_batches = sum(b.size for b in read.batches if (b.dir, b.segment) == (dir_name, segment))
        assert in_batches == size == (log_dir / dir_name / segment).stat().st_size


def test_one_partition_dir_reads_alone_and_its_offsets_are_checked(
    kafka_client, fixtures_dir: Path, tmp_path: Path
) -> None:
    src = fixtures_dir / "segments/broker-2x-interval4096/test_topic_a-0"
    pdir = tmp_path / "test_topic_a-0"
    pdir.mkdir()
    for log in sorted(src.glob("*.log"))[:2]:
        shutil.copyfile(log, pdir / log.name)
    read = kafka_client.kafka_client_read(pdir)
    assert read.offset_problems() == []
    assert {b.compression for b in read.batches} == {"none"} and len(read.segments) == 2
    assert read.rows()[0][:3] == ("test_topic_a", 0, 0)
    assert read.first_offsets() == {"test_topic_a-0": 0}
    second = sorted(pdir.glob("*.log"))[1]
    second.rename(pdir / f"{int(second.name[:20]) + 1:020d}.log")
    problems = kafka_client.kafka_client_read(pdir).offset_problems()
    assert len(problems) == 1 and "segment name but base offset" in problems[0]


def _one_segment(fixtures_dir: Path, tmp_path: Path) -> Path:
    src = fixtures_dir / "segments/broker-2x-interval4096/test_topic_a-0/00000000000000000000.log"
    pdir = tmp_path / "t-0"
    pdir.mkdir()
    return Path(shutil.copyfile(src, pdir / src.name))


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("crc", "CorruptRecordException"),  # a byte of the stored CRC
        ("body", "CorruptRecordException"),  # a byte the CRC covers
        ("truncated", "bytes after the last whole batch"),
    ],
)
def test_a_damaged_segment_fails_the_oracle(
    kafka_client, fixtures_dir: Path, tmp_path: Path, damage: str, problem: str
) -> None:
    log = _one_segment(fixtures_dir, tmp_path)
    data = bytearray(log.read_bytes())
    first = int.from_bytes(data[8:12], "big") + 12  # the second batch starts here
    if damage == "crc":
        data[first + 17] ^= 0x01  # crc: after base offset (8), length (4), epoch (4), magic (1)
    elif damage == "body":
        data[first + 70] ^= 0x01
    else:
        data = data[: first + 30]
    log.write_bytes(bytes(data))
    with pytest.raises(kafka_client.JavaProgramError) as err:
        kafka_client.kafka_client_read(tmp_path)
    message = str(err.value)
    assert f"{log} at position {first}" in message and problem in message


def test_jars_that_cannot_be_fetched_fail_with_what_to_fetch(monkeypatch, tmp_path: Path) -> None:
    from tests import kafka_oracle

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn
    with pytest.raises(kafka_oracle.OracleUnavailable) as err:
        kafka_oracle.kafka_client_jars()
    message = str(err.value)
    assert "\n" not in message and "`mvn` is not on PATH" in message
    assert "-P oracle dependency:copy-dependencies" in message
    root = tmp_path / "cache/kafkalog/jvm"
    assert [p.name for p in root.iterdir()] == [".lock"]  # nothing half-fetched
