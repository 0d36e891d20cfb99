"""The cleaner's round (§8): offset map, grouping, the swap and its crash rules, dry runs.

The rewrite itself is held to Kafka's filterTo in test_cleaner_kafka.py; here the parts around
it: MD5 and the map against hashlib and a plain dict, the round's end when the map fills,
Kafka's grouping rule, and that a round killed at any step and run again leaves the files of a
round that was not interrupted.
"""

from __future__ import annotations

import hashlib
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from kafkalog_core import native
from kafkalog_core.errors import LogSegmentOffsetOverflowError
from kafkalog_core.log.names import log_file_name, segment_log_files
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.maintenance.cleaner import (
    CLEANED,
    FINISHED,
    NOT_ELIGIBLE,
    PENDING,
    UNCLEANABLE,
    WOULD_CLEAN,
    CleanerSettings,
    RoundResult,
    clean_partition,
    group_segments,
)
from kafkalog_core.maintenance.cleaner_audit import SegmentSummary, scan_partition
from kafkalog_core.maintenance.offset_map import OffsetMap, key_digests, max_keys_for
from kafkalog_core.record.decoder import decode_records
from tests.log.cleaner_logs import COMPACT, DAY, NOW, changelog_partition

SETTINGS = CleanerSettings(io_buffer_size=1200, producer_id_expiration_ms=7 * DAY)


def files(d: Path) -> dict[str, tuple[bytes, int | None]]:
    """Every file of a partition dir: bytes, and the mtime (ms) of segment files the cleaner
    sets it on (a `.txnindex` keeps the time it was written, as Kafka leaves it)."""
    return {
        p.name: (
            p.read_bytes(),
            p.stat().st_mtime_ns // 10**6
            if p.name.endswith((".log", ".index", ".timeindex"))
            else None,
        )
        for p in sorted(d.iterdir())
        if p.is_file()
    }


@pytest.fixture
def without_c(monkeypatch):
    monkeypatch.setattr(native, "module", None)
    monkeypatch.setattr(native, "decode_module", None)


# ---------------------------------------------------------------------------------------------
# MD5 and the offset map
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("c", [True, False], ids=["c", "numpy"])
def test_key_digests_are_md5(monkeypatch, c) -> None:
    if not c:
        monkeypatch.setattr(native, "module", None)
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 4096, dtype=np.uint8).tobytes()
    lengths = np.array([0, 1, 55, 56, 63, 64, 65, 119, 120, 500, *rng.integers(0, 300, 40)])
    starts = rng.integers(0, 4096 - 500, lengths.shape[0])
    got = key_digests(data, starts, lengths)
    want = [hashlib.md5(data[s : s + n]).digest() for s, n in zip(starts, lengths, strict=True)]
    assert [bytes(row) for row in got] == want


def _digests(keys: np.ndarray) -> np.ndarray:
    data = keys.astype("<u4").tobytes()
    return key_digests(data, np.arange(keys.shape[0]) * 4, np.full(keys.shape[0], 4))


@pytest.mark.parametrize("c", [True, False], ids=["c", "arrow"])
def test_offset_map_keeps_the_latest_offset_per_key_up_to_its_size(monkeypatch, c) -> None:
    if not c:
        monkeypatch.setattr(native, "module", None)
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 3000, 20000)
    offsets = np.arange(20000, dtype=np.int64)
    latest: dict[int, int] = {}
    for k, o in zip(keys.tolist(), offsets.tolist(), strict=True):
        latest[k] = o
    m = OffsetMap(10**6)
    for lo in range(0, 20000, 4096):  # in pieces, as segments come
        assert m.put(_digests(keys[lo : lo + 4096]), offsets[lo : lo + 4096]).put == min(
            4096, 20000 - lo
        )
    probe = np.arange(3500)
    assert m.get(_digests(probe)).tolist() == [latest.get(int(k), -1) for k in probe]
    assert m.size == len(latest)
    # full: Kafka checks the size before every put, a key already there included
    small = OffsetMap(5)
    result = small.put(_digests(np.array([1, 2, 1, 3, 4, 5, 1, 6])), np.arange(8))
    assert (result.put, result.full, small.size) == (6, True, 5)
    assert small.get(_digests(np.array([1, 5, 6]))).tolist() == [2, 5, -1]


def test_the_map_size_is_kafkas() -> None:
    # 128 MiB / 24-byte slots, filled to 0.9: SkimpyOffsetMap's capacity for one cleaner thread
    assert max_keys_for() == int((134217728 // 24) * 0.9) == 5033164
    assert max_keys_for(134217728, threads=2) == int((67108864 // 24) * 0.9)


# ---------------------------------------------------------------------------------------------
# the round
# ---------------------------------------------------------------------------------------------


def _records(d: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for p in segment_log_files(d):
        t = decode_records(p.read_bytes())
        out += list(
            zip(
                t.column("offset").to_pylist(),
                t.column("key").to_pylist(),
                t.column("value").to_pylist(),
                strict=True,
            )
        )
    return out


def test_a_round_keeps_the_latest_record_per_key_and_offsets(tmp_path) -> None:
    d = changelog_partition(tmp_path / "t-0")
    before = _records(d)
    result = clean_partition(d, COMPACT, NOW, apply=True, settings=SETTINGS)
    assert result.status == CLEANED and result.end_offset == 75
    after = _records(d)
    end = result.end_offset
    # beyond the round nothing changed; inside it, per key only its latest record (the
    # aborted transaction's are gone, a tombstone whose horizon passed too)
    assert [r for r in after if r[0] >= end] == [r for r in before if r[0] >= end]
    cleaned = [r for r in after if r[0] < end]
    keys = [k for _, k, _ in cleaned]
    assert len(keys) == len(set(keys)) and None not in keys
    aborted = {14, 15}
    for offset, key, _ in cleaned:
        later = [o for o, k, _ in before if k == key and o < end and o > offset]
        assert not [o for o in later if o not in aborted], (offset, key)
    assert (b"k4", None) not in [(k, v) for _, k, v in cleaned]  # its horizon had passed
    assert (b"k3", None) in [(k, v) for _, k, v in cleaned]  # got a horizon instead
    # offsets never change; segments named by their first offset, the old files gone
    assert set(after) <= set(before)
    names = sorted(p.name for p in d.iterdir())
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    assert [p.name for p in segment_log_files(d)] == [
        log_file_name(g[0]) for g in result.groups
    ] + [log_file_name(75)]


def test_cleaned_segments_keep_the_last_source_segments_mtime(tmp_path) -> None:
    d = changelog_partition(tmp_path / "t-0")
    mtimes = {p.name: p.stat().st_mtime_ns // 10**6 for p in segment_log_files(d)}
    result = clean_partition(d, COMPACT, NOW, apply=True, settings=SETTINGS)
    for group in result.groups:
        want = mtimes[log_file_name(group[-1])]
        stem = log_file_name(group[0])[:-4]
        for suffix in (".log", ".index", ".timeindex"):
            assert (d / (stem + suffix)).stat().st_mtime_ns // 10**6 == want


def test_a_dry_run_reports_the_round_and_changes_nothing(tmp_path) -> None:
    d = changelog_partition(tmp_path / "t-0")
    before = files(d)
    dry = clean_partition(d, COMPACT, NOW, apply=False, settings=SETTINGS)
    assert dry.status == WOULD_CLEAN
    assert files(d) == before
    applied = clean_partition(d, COMPACT, NOW, apply=True, settings=SETTINGS)
    assert (dry.end_offset, dry.groups, dry.stats) == (
        applied.end_offset,
        applied.groups,
        applied.stats,
    )
    assert dry.bytes_after == sum((d / log_file_name(g[0])).stat().st_size for g in applied.groups)


def test_a_second_round_right_after_changes_nothing(tmp_path) -> None:
    d = changelog_partition(tmp_path / "t-0")
    first = clean_partition(d, COMPACT, NOW, apply=True, settings=SETTINGS)
    before = files(d)
    again = clean_partition(
        d, COMPACT, NOW, cleaner_checkpoint=first.end_offset, apply=True, settings=SETTINGS
    )
    assert again.status == NOT_ELIGIBLE and files(d) == before


def test_the_numpy_path_writes_the_same_bytes(tmp_path, monkeypatch) -> None:
    with_c = changelog_partition(tmp_path / "a" / "t-0")
    clean_partition(with_c, COMPACT, NOW, apply=True, settings=SETTINGS)
    monkeypatch.setattr(native, "module", None)
    monkeypatch.setattr(native, "decode_module", None)
    plain = changelog_partition(tmp_path / "b" / "t-0")
    clean_partition(plain, COMPACT, NOW, apply=True, settings=SETTINGS)
    assert {k: v[0] for k, v in files(with_c).items()} == {k: v[0] for k, v in files(plain).items()}


def test_the_slab_size_changes_no_byte(tmp_path) -> None:
    # slabs decode a few batches at a time; read chunks then span slabs
    whole = changelog_partition(tmp_path / "a" / "t-0")
    clean_partition(whole, COMPACT, NOW, apply=True, settings=SETTINGS)
    sliced = changelog_partition(tmp_path / "b" / "t-0")
    small = CleanerSettings(io_buffer_size=1200, producer_id_expiration_ms=7 * DAY, slab_bytes=150)
    clean_partition(sliced, COMPACT, NOW, apply=True, settings=small)
    assert {k: v[0] for k, v in files(whole).items()} == {k: v[0] for k, v in files(sliced).items()}


def test_a_full_map_ends_the_round_where_kafkas_would(tmp_path) -> None:
    d = changelog_partition(tmp_path / "t-0")
    # 4 keys: k0 k1 (offsets 0-2), k2 k3 (3-4); the batch at 5 brings a null key and k4: the
    # map is full before k4 at offset 6, so the round ends after offset 4
    tiny = CleanerSettings(
        dedupe_buffer_size=24 * 5, load_factor=0.9, io_buffer_size=1200, threads=1
    )
    assert tiny.max_keys == 4
    result = clean_partition(d, COMPACT, NOW, apply=True, settings=tiny)
    assert result.map_full and result.end_offset == 5
    assert result.groups == [[0]]
    # every data record beyond the round's end stays (13 and 16 are markers)
    offsets = [o for o, _, _ in _records(d)]
    assert [o for o in offsets if o >= 5] == [o for o in range(5, 77) if o not in (13, 16)]


def test_an_abort_marker_beyond_the_range_still_keeps_its_data_out_of_the_map(tmp_path) -> None:
    from kafkalog_core.record.control import ControlRecordType, build_end_txn_marker_batch
    from kafkalog_core.record.encoder import Record, build_batch

    d = tmp_path / "t-0"
    d.mkdir()
    t = NOW - DAY
    first = build_batch([Record(0, t, b"k0", b"committed")], base_offset=0)
    aborted = build_batch(
        [Record(0, t + 1, b"k0", b"aborted")],
        base_offset=1,
        producer_id=300,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    (d / log_file_name(0)).write_bytes(first + aborted)
    marker = build_end_txn_marker_batch(
        control_type=ControlRecordType.ABORT,
        producer_id=300,
        producer_epoch=0,
        coordinator_epoch=0,
        base_offset=2,
        timestamp=t + 2,
    )
    (d / log_file_name(2)).write_bytes(marker)  # the active segment: its .txnindex has the txn
    PartitionLog.open(d, COMPACT, recovery_point=0).close()
    assert (d / log_file_name(2).replace(".log", ".txnindex")).stat().st_size == 34
    result = clean_partition(d, COMPACT, NOW, apply=True, settings=SETTINGS)
    assert result.status == CLEANED and result.end_offset == 2
    assert _records(d) == [(0, b"k0", b"committed")]  # the aborted record neither stays nor wins


def test_grouping_follows_segment_bytes_and_index_bytes(tmp_path) -> None:
    d = changelog_partition(tmp_path / "t-0")
    segments = list(scan_partition(d).segments[:-1])
    sizes = [s.size for s in segments]
    assert sizes == [469, 494, 301, 1752]

    def groups(**settings) -> list[list[int]]:
        config = COMPACT.with_overrides({k.replace("_", "."): v for k, v in settings.items()})
        return [[s.base_offset for s in g] for g in group_segments(d, segments, config, 75)]

    assert groups() == [[0, 10], [18], [23]]  # 469 + 494 <= 1200 < 469 + 494 + 301
    assert groups(segment_bytes=5000) == [[0, 10, 18, 23]]
    assert groups(segment_bytes=963) == [[0, 10], [18], [23]]
    assert groups(segment_bytes=962) == [[0], [10, 18], [23]]
    # the time indexes are 12, 24, 12 and 24 bytes: segment.index.bytes caps their sums too
    assert groups(segment_bytes=5000, segment_index_bytes=36) == [[0, 10], [18, 23]]
    assert groups(segment_bytes=5000, segment_index_bytes=35) == [[0], [10], [18], [23]]


@pytest.mark.parametrize(
    "segment, at, why",
    [
        (10, 100, "bytes after the last whole batch"),  # the second batch's length field
        (10, 107, "corrupt batch header"),  # its magic byte: a header no reader can parse
        (18, None, "bytes after the last whole batch"),  # a partial batch at a rewritten tail
    ],
    ids=["length", "magic", "tail"],
)
def test_what_a_brokers_cleaner_fails_on_is_uncleanable_and_left_as_it_is(
    tmp_path, segment, at, why
) -> None:
    d = changelog_partition(tmp_path / "t-0")
    path = d / log_file_name(segment)
    data = bytearray(path.read_bytes())
    if at is None:
        data += data[:40]
    else:
        data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    before = files(d)
    result = clean_partition(d, COMPACT, NOW, apply=True, settings=SETTINGS)
    assert result.status == UNCLEANABLE and why in result.reason, result.reason
    assert str(path) in result.reason
    assert files(d) == before


def test_the_active_segment_is_never_read_so_its_tail_and_crcs_do_not_matter(tmp_path) -> None:
    clean = changelog_partition(tmp_path / "clean" / "t-0")
    d = changelog_partition(tmp_path / "t-0")
    active = d / log_file_name(75)
    data = bytearray(active.read_bytes())
    data[-3] ^= 0xFF  # a record byte of its last batch: a CRC mismatch
    active.write_bytes(bytes(data) + data[:30])  # and a partial batch after it
    want = clean_partition(clean, COMPACT, NOW, apply=True, settings=SETTINGS)
    result = clean_partition(d, COMPACT, NOW, apply=True, settings=SETTINGS)
    assert result.status == CLEANED, result.reason
    assert (result.end_offset, result.groups) == (want.end_offset, want.groups)
    cleaned = {n: v for n, v in files(d).items() if not n.startswith(log_file_name(75)[:-4])}
    assert cleaned == {n: v for n, v in files(clean).items() if n in cleaned}
    assert active.read_bytes() == bytes(data) + data[:30]


def test_a_topic_that_is_not_compacted_is_not_cleaned(tmp_path) -> None:
    d = changelog_partition(tmp_path / "t-0")
    before = files(d)
    delete = COMPACT.with_overrides({"cleanup.policy": "delete"})
    result = clean_partition(d, delete, NOW, apply=True, settings=SETTINGS)
    assert result.status == NOT_ELIGIBLE and result.reason.startswith("not compacted")
    assert files(d) == before


# ---------------------------------------------------------------------------------------------
# killed at any step
# ---------------------------------------------------------------------------------------------


class Killed(BaseException):
    """Stands for kill -9 at a step (the subprocess test in the job's tests kills for real)."""


def _steps(d: Path, journal: Path) -> int:
    steps = []
    clean_partition(
        d, COMPACT, NOW, apply=True, settings=SETTINGS, journal=journal,
        hook=lambda step, path: steps.append((step, path.name)),
    )  # fmt: skip
    return len(steps)


def test_a_round_killed_at_any_step_then_run_again_ends_as_one_that_was_not(tmp_path) -> None:
    source = changelog_partition(tmp_path / "source" / "t-0")
    whole = tmp_path / "whole" / "t-0"
    shutil.copytree(source, whole)
    total = _steps(whole, tmp_path / "whole.journal")
    want = files(whole)
    assert total > 20
    picks = sorted(random.Random(24).sample(range(total), 10)) + [total - 1]
    for step in picks:
        d = tmp_path / f"kill-{step}" / "t-0"
        shutil.copytree(source, d)
        journal = tmp_path / f"kill-{step}.journal"
        count = 0

        def hook(_step: str, _path: Path, at: int = step) -> None:
            nonlocal count
            if count == at:
                raise Killed
            count += 1

        with pytest.raises(Killed):
            clean_partition(
                d, COMPACT, NOW, apply=True, settings=SETTINGS, journal=journal, hook=hook
            )
        # a dry run sees the leftovers and says so, without touching them
        leftovers = files(d)
        if journal.exists() or any(n.endswith((".cleaned", ".swap")) for n in leftovers):
            assert clean_partition(d, COMPACT, NOW, journal=journal).status == PENDING
            assert files(d) == leftovers
        again = clean_partition(d, COMPACT, NOW, apply=True, settings=SETTINGS, journal=journal)
        assert again.status in (CLEANED, FINISHED), (step, again.reason)
        assert again.end_offset == 75
        assert files(d) == want, step


def test_the_journal_records_the_round_before_the_swap_commits(tmp_path) -> None:
    d = changelog_partition(tmp_path / "t-0")
    journal = tmp_path / "j"
    seen = []

    def hook(step: str, path: Path) -> None:
        if step == "rename" and path.name.endswith(".cleaned"):
            seen.append(journal.exists())

    clean_partition(d, COMPACT, NOW, apply=True, settings=SETTINGS, journal=journal, hook=hook)
    assert seen and all(seen)
    assert journal.exists()  # the caller removes it once the checkpoint is written


def test_grouping_measures_the_offset_span_from_the_oldest_segment(tmp_path) -> None:
    # Kafka's groupSegmentsBySize: a segment joins while the last offset it may hold is at most
    # Int.MaxValue past the group's first base offset (the new segment's relative offsets)
    def segment(base: int) -> SegmentSummary:
        return SegmentSummary(base, 100, base + 1, NOW, NOW, 1)

    segments = [segment(0), segment(10**9), segment(2 * 10**9)]
    config = COMPACT.with_overrides({"segment.bytes": 10**6})
    groups = group_segments(tmp_path, segments, config, 2_500_000_000)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 10**9], [2 * 10**9]]


@pytest.mark.parametrize(
    "error",
    [OSError("injected: no space left on device"), LogSegmentOffsetOverflowError("injected")],
    ids=["io", "kafkalog"],
)
def test_an_error_mid_round_leaves_the_partition_dir_as_it_was(tmp_path, error) -> None:
    d = changelog_partition(tmp_path / "t-0")
    before = files(d)
    creates = []

    def hook(step: str, path: Path) -> None:
        if step == "flush":
            creates.append(path)
            if len(creates) == 2:  # the second group's segment is written, the first complete
                raise error

    if isinstance(error, OSError):  # not the data's fault: it propagates
        with pytest.raises(OSError, match="injected"):
            clean_partition(d, COMPACT, NOW, apply=True, settings=SETTINGS, hook=hook)
    else:  # what a broker's cleaner fails on: the partition is uncleanable, one line says why
        result = clean_partition(d, COMPACT, NOW, apply=True, settings=SETTINGS, hook=hook)
        assert result.status == UNCLEANABLE and "injected" in result.reason
    assert files(d) == before


def test_a_segment_a_brokers_load_would_cut_makes_the_partition_uncleanable(
    tmp_path: Path,
) -> None:
    """After an unclean shutdown a broker's load CRC-checks the segments from the recovery
    point on; a batch that fails there is cut with everything after it, later segments
    included. A round on the files as they are would map those later records and drop the older
    values of their keys, which the loaded log still needs: after a clean shutdown (nothing
    recovered, and Kafka's cleaner checks no CRC) it cleans; recovered, it refuses, changing
    nothing; with the recovery point past the damaged segment, it cleans again."""
    source = changelog_partition(tmp_path / "source" / "t-0")
    damaged = segment_log_files(source)[1]
    data = bytearray(damaged.read_bytes())
    data[70] ^= 0xFF  # inside the first batch's records: its CRC fails, its header is fine
    damaged.write_bytes(bytes(data))
    cut_base = int(damaged.name[:20])
    later = int(segment_log_files(source)[2].name[:20])

    def round_on_copy(name: str, recovery_from: int | None) -> tuple[RoundResult, Path]:
        d = tmp_path / name / "t-0"
        shutil.copytree(source, d)
        return clean_partition(d, COMPACT, NOW, recovery_from=recovery_from, apply=True), d

    clean, _ = round_on_copy("clean", None)
    assert clean.status == CLEANED
    refused, d = round_on_copy("unclean", 0)
    assert refused.status == UNCLEANABLE
    assert f"{log_file_name(cut_base)}: a broker's load recovers it" in refused.reason
    assert "would cut it at position 0, deleting the" in refused.reason
    assert files(d) == files(source)
    # the broker's load (kafkalog's loader, held to a live broker's) cuts exactly there
    loaded = PartitionLog.open(d, COMPACT, recovery_point=0, had_clean_shutdown=False)
    assert loaded.log_end_offset == cut_base
    loaded.close()
    past, _ = round_on_copy("past", later)
    assert past.status == CLEANED
