"""The compaction audit's core (§8): cleaner-manager decisions and per-record facts.

Small partitions are written batch by batch with the scalar encoder, so every size, offset and
timestamp is known; the real-broker log dir is checked against kafka-python's own reader.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from kafka.record.memory_records import MemoryRecords

from kafkalog_core.config import LogConfig
from kafkalog_core.log.checkpoints import (
    OffsetCheckpointFile,
    read_cleaner_checkpoint,
    read_high_watermarks,
    read_log_start_checkpoint,
)
from kafkalog_core.log.names import CLEANER_OFFSET_CHECKPOINT_FILE, log_file_name
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.maintenance.cleaner import CLEANED, clean_partition
from kafkalog_core.maintenance.cleaner_audit import partition_cleaning_state, verdict
from kafkalog_core.maintenance.cleaner_facts import (
    iter_record_facts,
    kafka_retained,
    offset_map_mask,
    partition_record_facts,
    record_counts,
    retained_mask,
)
from kafkalog_core.record.batch import RECORD_BATCH_OVERHEAD, Compression, iter_batch_headers
from kafkalog_core.record.control import ControlRecordType, build_end_txn_marker_batch
from kafkalog_core.record.encoder import Record, build_batch

NOW = 1_700_000_000_000
DAY = 86_400_000
HOUR = 3_600_000
COMPACT = LogConfig.from_dict({"cleanup.policy": "compact"})


def compact(**settings: object) -> LogConfig:
    return COMPACT.with_overrides({k.replace("_", "."): str(v) for k, v in settings.items()})


def batch(base: int, *records: tuple[bytes | None, bytes | None, int], **header: object) -> bytes:
    """One v2 batch at `base` holding (key, value, timestamp) records at consecutive offsets."""
    return build_batch(
        [Record(i, ts, k, v) for i, (k, v, ts) in enumerate(records)], base_offset=base, **header
    )


def write_partition(
    d: Path, segments: list[tuple[int, list[bytes]]], mtimes: list[int] | None = None
) -> list[int]:
    """Write `<base>.log` files of raw batches; returns their sizes."""
    d.mkdir(parents=True, exist_ok=True)
    sizes = []
    for k, (base, batches) in enumerate(segments):
        path = d / log_file_name(base)
        path.write_bytes(b"".join(batches))
        if mtimes is not None:
            os.utime(path, ns=(mtimes[k] * 10**6, mtimes[k] * 10**6))
        sizes.append(path.stat().st_size)
    return sizes


def three_segments(d: Path, ts: list[int] | None = None) -> list[int]:
    """Offsets 0-3 | 4-7 | 8-9 (active), one record per batch, keys k0..k3 cycling."""
    ts = ts or [NOW - 2 * DAY + 1000 * i for i in range(10)]
    rows = [batch(i, (b"k%d" % (i % 4), b"value-%d" % i, ts[i])) for i in range(10)]
    return write_partition(d, [(0, rows[0:4]), (4, rows[4:8]), (8, rows[8:10])])


# ---------------------------------------------------------------------------------------------
# checkpoints
# ---------------------------------------------------------------------------------------------


def test_checkpoint_readers(tmp_path: Path) -> None:
    assert read_cleaner_checkpoint(tmp_path) == {}
    OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE).write(
        {("t", 0): 5, ("u", 3): 9}
    )
    assert read_cleaner_checkpoint(tmp_path) == {("t", 0): 5, ("u", 3): 9}
    assert read_log_start_checkpoint(tmp_path) == {}
    assert read_high_watermarks(tmp_path) == {}


# ---------------------------------------------------------------------------------------------
# the cleaner manager's decision
# ---------------------------------------------------------------------------------------------


def test_never_cleaned_everything_below_active_is_dirty(tmp_path: Path) -> None:
    s0, s1, s2 = three_segments(tmp_path / "t-0")
    state = partition_cleaning_state(tmp_path / "t-0", COMPACT, None, NOW)
    assert (state.log_start_offset, state.log_end_offset) == (0, 10)
    assert (state.first_dirty_offset, state.first_uncleanable_offset) == (0, 8)
    assert (state.clean_bytes, state.cleanable_bytes) == (0, s0 + s1)
    assert state.dirty_ratio == 1.0 and state.eligible
    assert state.uncleanable_bound == "active segment"
    assert verdict(state, None, COMPACT) == "would be cleaned now (dirty ratio 1.00 > 0.5)"


def test_ratio_equal_to_the_threshold_is_not_enough(tmp_path: Path) -> None:
    s0, s1, _ = three_segments(tmp_path / "t-0")
    assert s0 == s1  # same record sizes: checkpoint 4 gives exactly 0.5
    state = partition_cleaning_state(tmp_path / "t-0", COMPACT, 4, NOW)
    assert (state.clean_bytes, state.cleanable_bytes, state.dirty_ratio) == (s0, s1, 0.5)
    assert not state.eligible
    assert verdict(state, None, COMPACT) == "below min.cleanable.dirty.ratio (0.50 <= 0.5)"
    lower = compact(min_cleanable_dirty_ratio=0.49)
    assert partition_cleaning_state(tmp_path / "t-0", lower, 4, NOW).eligible


def test_checkpoint_inside_a_segment_counts_it_clean_and_dirty(tmp_path: Path) -> None:
    s0, s1, _ = three_segments(tmp_path / "t-0")
    state = partition_cleaning_state(tmp_path / "t-0", COMPACT, 2, NOW)
    assert (state.clean_bytes, state.cleanable_bytes) == (s0, s0 + s1)


def test_checkpoint_at_active_segment_leaves_nothing_to_clean(tmp_path: Path) -> None:
    three_segments(tmp_path / "t-0")
    state = partition_cleaning_state(tmp_path / "t-0", COMPACT, 8, NOW)
    assert state.cleanable_bytes == 0 and not state.eligible
    assert verdict(state, None, COMPACT) == (
        "nothing to clean (everything below the active segment is clean)"
    )
    facts, counts = partition_record_facts(tmp_path / "t-0", COMPACT, NOW, state=state)
    assert counts.cleaning_round_records == 0 and kafka_retained(facts).all()


def test_checkpoint_out_of_range_is_reset_to_log_start(tmp_path: Path) -> None:
    three_segments(tmp_path / "t-0")
    for bad in (11, -1):
        state = partition_cleaning_state(tmp_path / "t-0", COMPACT, bad, NOW)
        assert state.checkpoint_reset and state.first_dirty_offset == 0
        assert "Kafka resets it to the log start" in verdict(state, None, COMPACT)
    at_end = partition_cleaning_state(tmp_path / "t-0", COMPACT, 10, NOW)
    assert not at_end.checkpoint_reset and at_end.first_dirty_offset == 10


def test_log_start_checkpoint_moves_the_first_dirty_offset(tmp_path: Path) -> None:
    s0, s1, _ = three_segments(tmp_path / "t-0")
    state = partition_cleaning_state(tmp_path / "t-0", COMPACT, None, NOW, log_start_checkpoint=5)
    assert (state.log_start_offset, state.first_dirty_offset) == (5, 5)
    assert (state.clean_bytes, state.cleanable_bytes) == (s0 + s1, s1)
    facts, counts = partition_record_facts(tmp_path / "t-0", COMPACT, NOW, state=state)
    assert facts.column("offset").to_pylist() == list(range(5, 10))


def test_active_segment_only(tmp_path: Path) -> None:
    write_partition(tmp_path / "t-0", [(0, [batch(0, (b"a", b"1", NOW))])])
    state = partition_cleaning_state(tmp_path / "t-0", COMPACT, None, NOW)
    assert verdict(state, None, COMPACT) == "nothing to clean (active segment only)"
    write_partition(tmp_path / "e-0", [(0, [])])
    state = partition_cleaning_state(tmp_path / "e-0", COMPACT, None, NOW)
    assert verdict(state, None, COMPACT) == "nothing to clean (empty log)"


def test_delete_policy_is_not_compacted(tmp_path: Path) -> None:
    three_segments(tmp_path / "t-0")
    config = LogConfig()
    state = partition_cleaning_state(tmp_path / "t-0", config, None, NOW)
    assert not state.eligible
    assert verdict(state, None, config) == "not compacted (cleanup.policy=delete)"


def test_min_compaction_lag_holds_back_young_segments(tmp_path: Path) -> None:
    # segment 0 is two days old, segment 1 (offsets 4-7) ten minutes old
    ts = [NOW - 2 * DAY] * 4 + [NOW - 600_000] * 6
    s0, _, _ = three_segments(tmp_path / "t-0", ts)
    state = partition_cleaning_state(
        tmp_path / "t-0", compact(min_compaction_lag_ms=HOUR), None, NOW
    )
    assert (state.min_lag_offset, state.first_uncleanable_offset) == (4, 4)
    assert state.uncleanable_bound == "min.compaction.lag.ms"
    assert state.cleanable_bytes == s0
    config = compact(min_compaction_lag_ms=3 * DAY)
    state = partition_cleaning_state(tmp_path / "t-0", config, None, NOW)
    assert state.cleanable_bytes == 0
    assert verdict(state, None, config) == (
        "nothing to clean: the dirty segments are younger than min.compaction.lag.ms (3.0 d)"
    )


def test_max_compaction_lag_makes_a_log_overdue(tmp_path: Path) -> None:
    ts = [NOW - 10 * DAY + i for i in range(10)]
    s0, s1, _ = three_segments(tmp_path / "t-0", ts)
    config = compact(max_compaction_lag_ms=DAY)
    state = partition_cleaning_state(tmp_path / "t-0", config, 4, NOW)
    assert state.dirty_ratio == 0.5  # below the threshold on its own
    assert state.oldest_dirty_timestamp == ts[4]  # the first batch of the dirty segment 4
    assert state.compaction_delay_ms == NOW - DAY - ts[4]
    assert state.eligible
    assert verdict(state, None, config) == (
        "overdue: oldest dirty record older than max.compaction.lag.ms (by 9.0 d); "
        "would be cleaned now"
    )
    default = partition_cleaning_state(tmp_path / "t-0", COMPACT, 4, NOW)
    assert default.compaction_delay_ms == 0 and default.oldest_dirty_age_ms == NOW - ts[4]


def test_open_transaction_bounds_the_cleanable_range(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    rows = [batch(i, (b"k%d" % i, b"v", NOW)) for i in range(8)]
    rows[5] = batch(5, (b"t", b"v", NOW), producer_id=7, producer_epoch=0, is_transactional=True)
    s0, _, _ = write_partition(
        d, [(0, rows[0:4]), (4, rows[4:8]), (8, [batch(8, (b"z", b"v", NOW))])]
    )
    state = partition_cleaning_state(d, COMPACT, None, NOW)
    assert state.last_stable_offset == 5
    assert (state.uncleanable_bound, state.first_uncleanable_offset) == ("open transaction", 4)
    assert state.cleanable_bytes == s0
    # a transaction still open in the first segment holds back everything
    rows[1] = batch(1, (b"t", b"v", NOW), producer_id=8, producer_epoch=0, is_transactional=True)
    write_partition(d, [(0, rows[0:4])])
    state = partition_cleaning_state(d, COMPACT, None, NOW)
    assert state.cleanable_bytes == 0
    assert verdict(state, None, COMPACT) == (
        "nothing to clean: held back by an open transaction (last stable offset 1)"
    )


def test_high_watermark_bounds_the_last_stable_offset(tmp_path: Path) -> None:
    s0, _, _ = three_segments(tmp_path / "t-0")
    state = partition_cleaning_state(tmp_path / "t-0", COMPACT, None, NOW, high_watermark=6)
    assert (state.last_stable_offset, state.first_uncleanable_offset) == (6, 4)
    assert (state.cleanable_bytes, state.uncleanable_bound) == (s0, "high watermark")
    state = partition_cleaning_state(tmp_path / "t-0", COMPACT, None, NOW, high_watermark=2)
    assert verdict(state, None, COMPACT) == (
        "nothing to clean: held back by the high watermark (2, replication-offset-checkpoint)"
    )


def test_partition_log_written_partition(tmp_path: Path) -> None:
    """A partition our own writer rolled: sizes come from its files."""
    log = PartitionLog.create(tmp_path / "t-0", compact(segment_bytes=300))
    table = pa.table(
        {
            "key": [b"k%d" % (i % 3) for i in range(30)],
            "value": [b"x" * 20 for _ in range(30)],
            "timestamp": pa.array([NOW - DAY + i for i in range(30)], pa.int64()),
        }
    )
    for i in range(0, 30, 3):
        log.append_records(table.slice(i, 3))
    sizes = [s.size for s in log.segments]
    bases = [s.base_offset for s in log.segments]
    log.close()
    assert len(sizes) > 2
    state = partition_cleaning_state(tmp_path / "t-0", COMPACT, None, NOW)
    assert state.cleanable_bytes == sum(sizes[:-1])
    assert state.first_uncleanable_offset == bases[-1]
    facts, counts = partition_record_facts(tmp_path / "t-0", COMPACT, NOW, state=state)
    assert counts.records == 30 and counts.cleaning_round_records == bases[-1]
    survivors = kafka_retained(facts)
    # the round keeps, per key, its last record in the dirty range, and every active record
    expected = {bases[-1] - 1 - j for j in range(3)} | set(range(bases[-1], 30))
    assert set(facts.column("offset").to_numpy()[survivors].tolist()) == expected


# ---------------------------------------------------------------------------------------------
# per-record facts
# ---------------------------------------------------------------------------------------------


def marker(base: int, producer_id: int, kind: ControlRecordType, ts: int) -> bytes:
    return build_end_txn_marker_batch(
        base_offset=base,
        producer_id=producer_id,
        producer_epoch=0,
        coordinator_epoch=0,
        control_type=kind,
        timestamp=ts,
    )


def transactions_partition(d: Path) -> tuple[list[int], list[int]]:
    """Segment 0: keyed data, a null key, a tombstone, an aborted and a committed transaction.
    Segment 20 (active): one more record for key a, and a gzip batch."""
    old = NOW - 3 * DAY
    seg0 = [
        batch(0, (b"a", b"1", old), (b"b", b"2", old + 1)),  # 0-1
        batch(2, (None, b"nk", old + 2)),  # 2: null key
        batch(3, (b"b", None, old + 3)),  # 3: tombstone for b, 3 days old
        batch(4, (b"c", b"3", old + 4), producer_id=9, producer_epoch=0, is_transactional=True),
        batch(5, (b"d", b"4", old + 5), producer_id=10, producer_epoch=0, is_transactional=True),
        marker(6, 9, ControlRecordType.ABORT, old + 6),  # 6: offset 4 is aborted data
        marker(7, 10, ControlRecordType.COMMIT, old + 7),
        # 8: a tombstone already given a delete horizon that has passed; 9: one not yet
        batch(8, (b"e", None, NOW - DAY), delete_horizon_ms=NOW - 1),
        batch(9, (b"f", None, NOW - 2), delete_horizon_ms=NOW + DAY),
        batch(10, (b"a", b"5", NOW - 1000)),  # 10: a supersedes 0
    ]
    seg1 = [
        batch(20, (b"a", b"6", NOW)),
        batch(21, (b"g", b"7" * 50, NOW), (b"g", b"8" * 50, NOW), compression=Compression.GZIP),
    ]
    return write_partition(d, [(0, seg0), (20, seg1)]), [len(b) for b in seg0 + seg1]


def test_facts_and_counts_have_known_answers(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    transactions_partition(d)
    state = partition_cleaning_state(d, COMPACT, None, NOW)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in state.aborted_txns] == [
        (9, 4, 6)
    ]
    facts, counts = partition_record_facts(d, COMPACT, NOW, state=state)
    col = facts.to_pydict()
    assert col["offset"] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 21, 22]
    assert col["key"][:4] == [b"a", b"b", None, b"b"]
    assert col["key_size"][:4] == [1, 1, -1, 1]
    assert [o for o, a in zip(col["offset"], col["is_aborted"], strict=True) if a] == [4]
    assert [o for o, c in zip(col["offset"], col["is_control"], strict=True) if c] == [6, 7]
    assert col["control_type"][6:8] == [0, 1] and col["key"][6:8] == [None, None]
    assert [o for o, p in zip(col["offset"], col["past_delete_horizon"], strict=True) if p] == [8]
    assert col["in_cleaning_round"] == [True] * 11 + [False] * 3
    assert col["batch_base_offset"][-3:] == [20, 21, 21]
    assert counts.records == 12 and counts.transaction_markers == 2
    assert (counts.commit_markers, counts.abort_markers) == (1, 1)
    assert (counts.aborted_records, counts.transactional_records) == (1, 2)
    assert counts.null_key_records == 1
    assert counts.tombstones == 3
    assert counts.tombstones_past_retention == 1  # offset 3, 3 days old; 8 is exactly 1 day
    assert counts.tombstones_past_horizon == 1
    assert counts.oldest_tombstone_timestamp == NOW - 3 * DAY + 3
    assert counts.batches == 12  # 10 in segment 0; the gzip batch holds two records
    assert (counts.dirty_records, counts.cleaning_round_records) == (9, 9)
    assert verdict(state, counts, COMPACT) == (
        "would be cleaned now (dirty ratio 1.00 > 0.5); 1 null-key records (a compacted topic "
        "rejects them; the cleaner drops those it reaches)"
    )


def test_record_sizes_add_up_to_the_batches(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    _, batch_sizes = transactions_partition(d)
    facts, _ = partition_record_facts(d, COMPACT, NOW)
    plain = facts.filter(pc.not_equal(facts.column("batch_base_offset"), 21))
    per_batch = plain.group_by("batch_base_offset").aggregate(
        [("record_size", "sum"), ("batch_size", "max")]
    )
    assert per_batch.num_rows == 11
    for total, size in zip(
        per_batch.column("record_size_sum").to_pylist(),
        per_batch.column("batch_size_max").to_pylist(),
        strict=True,
    ):
        assert total + RECORD_BATCH_OVERHEAD == size
    assert sorted(set(facts.column("batch_size").to_pylist())) == sorted(set(batch_sizes))


def test_cleaning_round_survivors_are_the_records_the_cleaner_keeps(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    transactions_partition(d)
    facts, _ = partition_record_facts(d, COMPACT, NOW)
    survivors = kafka_retained(facts)
    gone = facts.column("offset").to_numpy()[~survivors].tolist()
    # 0: a superseded by 10; 1: b superseded by its tombstone 3; 2: null key; 4: aborted;
    # 8: tombstone past its horizon. Kept: 3 (a tombstone gets a horizon first), 5, markers,
    # 9 (horizon not reached), 10, and everything in the active segment.
    assert gone == [0, 1, 2, 4, 8]
    mapped = facts.column("offset").to_numpy()[offset_map_mask(facts)].tolist()
    assert mapped == [0, 1, 3, 5, 8, 9, 10]  # no null key, aborted data or marker
    # the Spark side's input: each row's key's latest mapped offset, null when unmapped
    latest = {b"a": 10, b"b": 3, b"d": 5, b"e": 8, b"f": 9}
    column = pa.array([latest.get(k) for k in facts.column("key").to_pylist()], pa.int64())
    assert retained_mask(facts, column).tolist() == survivors.tolist()
    with pytest.raises(ValueError):
        retained_mask(facts, column[:-1])
    # the cleaner's own round keeps exactly these records (it knows the aborted transaction
    # from the .txnindex, which a broker's recovery writes)
    PartitionLog.open(d, COMPACT, recovery_point=0).close()
    result = clean_partition(d, COMPACT, NOW, apply=True)
    assert result.status == CLEANED and result.stats.records_removed == len(gone)
    after, _ = partition_record_facts(d, COMPACT, NOW)
    kept = facts.column("offset").to_numpy()[survivors].tolist()
    assert after.column("offset").to_pylist() == kept


def test_chunks_give_the_same_facts(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    transactions_partition(d)
    state = partition_cleaning_state(d, COMPACT, None, NOW)
    whole = pa.concat_tables(iter_record_facts(d, state))
    pieces = list(iter_record_facts(d, state, chunk_bytes=100))
    assert len(pieces) > 5
    assert pa.concat_tables(pieces).equals(whole)
    total = sum(
        (record_counts(p, COMPACT, NOW) for p in pieces[1:]), record_counts(pieces[0], COMPACT, NOW)
    )
    assert total == record_counts(whole, COMPACT, NOW)


def test_legacy_messages_are_read(fixtures_dir: Path, tmp_path: Path) -> None:
    """magic 0/1 entries (kafka-go's mixed v1/v2 capture) read like v2, sizes included."""
    source = (
        fixtures_dir / "batches" / "kafkago_v1_v1c_v2_v2c_v2b_v2b_v2b_v2bc_v1b_v1bc.records.bin"
    )
    d = tmp_path / "t-0"
    d.mkdir()
    shutil.copy(source, d / log_file_name(0))
    facts, counts = partition_record_facts(d, COMPACT, NOW)
    expected = []
    records = MemoryRecords(source.read_bytes())
    while records.has_next():
        for r in records.next_batch():
            expected.append((r.offset, r.key, r.value is None, r.timestamp))
    got = facts.select(["offset", "key", "value_is_null", "timestamp"]).to_pylist()
    assert [tuple(row.values()) for row in got] == expected
    headers = list(iter_batch_headers(source.read_bytes()))
    plain_legacy = {h.base_offset: h.size for h in headers if h.magic < 2 and h.attributes & 7 == 0}
    for row in facts.select(["offset", "record_size"]).to_pylist():
        if row["offset"] in plain_legacy:  # an uncompressed legacy message is its own entry
            assert row["record_size"] == plain_legacy[row["offset"]]
    assert counts.records == len(expected)


# ---------------------------------------------------------------------------------------------
# the real broker log dir, against kafka-python
# ---------------------------------------------------------------------------------------------


def compacted_partitions(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.iterdir()
        if p.is_dir()
        and (
            p.name.startswith("__consumer_offsets-")
            or p.name == "_schemas-0"
            or p.name.endswith("-changelog-0")
        )
    )


def kafka_python_records(d: Path) -> list[tuple[int, bytes | None, bool]]:
    out = []
    for log in sorted(d.glob("*.log")):
        records = MemoryRecords(log.read_bytes())
        while records.has_next():
            batch_ = records.next_batch()
            if batch_.is_control_batch:
                continue
            for r in batch_:
                out.append((r.offset, r.key, r.value is None))
    return out


def kafka_python_counts(records: list[tuple[int, bytes | None, bool]]) -> dict[str, int]:
    """The audit's record counts, recomputed from `kafka_python_records` (another decoder)."""
    latest: dict[bytes, int] = {}
    for offset, key, _ in records:
        if key is not None:
            latest[key] = offset
    return {
        "records": len(records),
        "distinct_keys": len(latest),
        "superseded_records": sum(1 for o, k, _ in records if k is not None and o < latest[k]),
        "null_key_records": sum(1 for _, k, _ in records if k is None),
        "tombstones": sum(1 for _, _, t in records if t),
    }


def superseded_from_facts(facts: pa.Table) -> int:
    """Records with a later record of the same key, by an Arrow group-by over the facts."""
    keyed = facts.filter(pc.is_valid(facts.column("key")))
    latest = keyed.group_by("key").aggregate([("offset", "max")])
    joined = keyed.select(["key", "offset"]).join(latest, "key")
    return int(pc.sum(pc.less(joined.column("offset"), joined.column("offset_max"))).as_py() or 0)


def test_real_broker_compacted_topics_match_kafka_python(fixtures_dir: Path) -> None:
    root = fixtures_dir / "logdirs" / "confluent-5.1.2"
    checkpoints = read_cleaner_checkpoint(root)
    partitions = compacted_partitions(root)
    assert len(partitions) > 50
    total_records = 0
    for d in partitions:
        expected = kafka_python_records(d)
        want = kafka_python_counts(expected)
        topic, _, partition = d.name.rpartition("-")
        state = partition_cleaning_state(d, COMPACT, checkpoints.get((topic, int(partition))), NOW)
        facts, counts = partition_record_facts(d, COMPACT, NOW, state=state)
        where = d.name
        assert counts.records == want["records"], where
        assert facts.column("offset").to_pylist() == [o for o, _, _ in expected], where
        assert counts.null_key_records == want["null_key_records"], where
        assert counts.tombstones == want["tombstones"], where
        distinct = facts.filter(pc.is_valid(facts.column("key"))).group_by("key").aggregate([])
        assert distinct.num_rows == want["distinct_keys"], where
        assert superseded_from_facts(facts) == want["superseded_records"], where
        # the cleaner never ran and every partition is one active segment (§15)
        assert verdict(state, counts, COMPACT).startswith("nothing to clean"), where
        total_records += len(expected)
    assert total_records > 100


def test_real_broker_partition_split_into_segments(fixtures_dir: Path, tmp_path: Path) -> None:
    """__consumer_offsets data cut into a cleanable segment and an active one: the round's
    survivors follow Kafka's rule, recomputed here from kafka-python's records."""
    root = fixtures_dir / "logdirs" / "confluent-5.1.2"
    source = max(compacted_partitions(root), key=lambda p: len(kafka_python_records(p)))
    data = next(source.glob("*.log")).read_bytes()
    headers = list(iter_batch_headers(data))
    cut = headers[len(headers) * 2 // 3]
    d = tmp_path / source.name
    d.mkdir()
    (d / log_file_name(0)).write_bytes(data[: cut.position])
    (d / log_file_name(cut.base_offset)).write_bytes(data[cut.position :])
    state = partition_cleaning_state(d, COMPACT, None, NOW)
    assert state.first_uncleanable_offset == cut.base_offset
    assert state.cleanable_bytes == cut.position
    facts, _ = partition_record_facts(d, COMPACT, NOW, state=state)
    expected = kafka_python_records(d)
    latest: dict[bytes, int] = {}
    for offset, key, _ in expected:
        if key is not None and offset < cut.base_offset:
            latest[key] = offset
    kept = [
        o
        for o, k, _ in expected
        if o >= cut.base_offset or (k is not None and o >= latest.get(k, -1))
    ]
    survivors = kafka_retained(facts)
    assert facts.column("offset").to_numpy()[survivors].tolist() == kept
    assert len(kept) < len(expected)  # the split leaves something to remove
    assert int((~survivors).sum()) == len(expected) - len(kept)


def test_cleaned_batches_with_gaps_and_empty_headers(tmp_path: Path) -> None:
    """A log the cleaner already rewrote: offset gaps inside batches, an empty batch header."""
    d = tmp_path / "t-0"
    kept = build_batch(
        [Record(1, NOW, b"a", b"1"), Record(3, NOW, b"b", b"2")],
        base_offset=10,
        last_offset_delta=4,
    )
    empty = build_batch([], base_offset=15, last_offset_delta=2, producer_id=4, producer_epoch=0)
    write_partition(d, [(10, [kept, empty, batch(18, (b"a", b"3", NOW))]), (19, [])])
    state = partition_cleaning_state(d, COMPACT, None, NOW)
    assert (state.log_end_offset, state.first_uncleanable_offset) == (19, 19)
    facts, counts = partition_record_facts(d, COMPACT, NOW, state=state)
    assert facts.column("offset").to_pylist() == [11, 13, 18]
    assert facts.column("batch_base_offset").to_pylist() == [10, 10, 18]
    assert counts.batches == 2 and counts.records == 3
    assert facts.column("offset").to_numpy()[~kafka_retained(facts)].tolist() == [11]
