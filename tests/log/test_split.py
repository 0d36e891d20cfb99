"""A segment whose offsets overflow it is split the way a broker's load splits it (§6 pass 4,
§8.8), safe to kill at any step; and a seeded mini fuzz of damaged segments: after one rebuild,
verify finds nothing left to fix."""

from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import signal
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from kafkalog_core.log.split import plan_split
from kafkalog_core.maintenance.rebuild import rebuild_partition
from kafkalog_core.maintenance.verify import OFFSET_OVERFLOW, verify_partition
from kafkalog_core.record.batch import iter_batch_headers
from tests.killer import STEPS as KILL_STEPS
from tests.killer import Killer
from tests.log.test_recovery import write_log

INTERVAL = 200  # write_log's index.interval.bytes
RAISE = 1 << 40  # a flipped bit 40 of a base offset: far past any segment


def checksums(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.iterdir())}


def records(d: Path) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of the partition's .log files, read by kafka-python
    (which checks every batch's CRC)."""
    out = []
    for log in sorted(d.glob("*.log")):
        batches = MemoryRecords(log.read_bytes())
        while batches.has_next():
            batch = batches.next_batch()
            assert batch.validate_crc()
            out.extend((r.offset, r.value) for r in batch)
    return out


def raise_base_offset(log: Path, batch: int) -> tuple[int, int]:
    """Flip bit 40 of one batch's base offset (outside the CRC); (its offsets before)."""
    data = bytearray(log.read_bytes())
    h = list(iter_batch_headers(bytes(data)))[batch]
    struct.pack_into(">q", data, h.position, h.base_offset ^ RAISE)
    log.write_bytes(bytes(data))
    return h.base_offset, h.last_offset


def write_partition(tmp_path: Path) -> Path:
    """orders-0 with 130 records in at least four segments."""
    d = tmp_path / "orders-0"
    write_log(d, n=130)
    assert len(list(d.glob("*.log"))) >= 4
    return d


@pytest.fixture
def pdir(tmp_path: Path) -> Path:
    return write_partition(tmp_path)


def expect_split(d: Path, first: int, last: int, original: list) -> None:
    """Everything verifies, every record is there once, the raised batch after the others."""
    assert verify_partition(d, INTERVAL).is_ok
    moved = [(o + RAISE, v) for o, v in original if first <= o <= last]
    kept = [(o, v) for o, v in original if not first <= o <= last]
    assert records(d) == kept + moved


@pytest.mark.parametrize("where", ["last", "middle", "first batch"])
def test_a_raised_base_offset_is_split_off_and_nothing_is_lost(
    pdir: Path, where: str, kafka_client
) -> None:
    original = records(pdir)
    logs = sorted(pdir.glob("*.log"))
    log = logs[-1] if where == "last" else logs[2]
    batch = 0 if where == "first batch" else 3
    first, last = raise_base_offset(log, batch)
    pv = verify_partition(pdir, INTERVAL)
    assert [s.log_status for s in pv.segments if s.log_path == log] == [OFFSET_OVERFLOW]
    plan = plan_split(log, [(s.base_offset, s.base_offset + 1) for s in pv.segments])
    assert plan.tail_bytes == 0 and plan.pieces[0].base_offset == int(log.name[:20])
    assert [p.base_offset for p in plan.pieces[1:]] == [first + RAISE, last + 1]
    assert sum(p.end - p.start for p in plan.pieces) == log.stat().st_size
    assert (plan.pieces[0].end == 0) == (where == "first batch")  # an empty first piece
    done = rebuild_partition(pdir, INTERVAL)
    assert any("split" in a for a in done.actions)
    expect_split(pdir, first, last, original)
    read = kafka_client.kafka_client_read(pdir)  # Kafka's client reads every segment, too
    assert [(r.offset, r.value) for r in read.records] == records(pdir)
    again = checksums(pdir)
    second = rebuild_partition(pdir, INTERVAL)
    assert not second.actions and {r["action"] for r in second.to_rows()} == {"none"}
    assert checksums(pdir) == again


# a split's durable order: copies fsynced and dated before their renames, then the swap
STEPS = (*KILL_STEPS, "fsync", "utime")


@pytest.mark.parametrize("where", ["last", "middle"])
def test_a_kill_at_any_step_of_a_split_converges(
    pdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    original = records(pdir)
    logs = sorted(pdir.glob("*.log"))
    first, last = raise_base_offset(logs[-1] if where == "last" else logs[1], 2)
    reference = tmp_path / "reference" / pdir.name
    shutil.copytree(pdir, reference)
    rebuild_partition(reference, INTERVAL)
    want = checksums(reference)
    k = 0
    while True:
        work = tmp_path / f"kill-{k}" / pdir.name
        shutil.copytree(pdir, work)
        Killer(monkeypatch, k, STEPS)
        try:
            rebuild_partition(work, INTERVAL)
            finished = True
        except KeyboardInterrupt:
            finished = False
        finally:
            monkeypatch.undo()
        # no kill loses a record: each is in a segment or in a file the next run finishes
        rebuild_partition(work, INTERVAL)
        assert checksums(work) == want, f"killed after {k} steps"
        shutil.rmtree(work.parent)
        if finished:
            break
        k += 1
    assert k >= 10  # copies, fsyncs, renames and deletes: each step interrupted once
    expect_split(reference, first, last, original)


def test_a_corrupt_tail_after_the_raised_batch_is_quarantined_with_the_later_segments(
    pdir: Path,
) -> None:
    logs = sorted(pdir.glob("*.log"))
    log = logs[1]
    raise_base_offset(log, 2)
    data = bytearray(log.read_bytes())
    h = list(iter_batch_headers(bytes(data)))[5]
    data[h.position + 30] ^= 0xFF  # inside batch 5's CRC-covered header: a corrupt batch
    log.write_bytes(bytes(data))
    done = rebuild_partition(pdir, INTERVAL)
    assert verify_partition(pdir, INTERVAL).is_ok
    later = [p.name for p in logs[2:]]
    assert all((pdir / (name + ".quarantine")).exists() for name in later)
    tail = pdir / (log.name + ".quarantine")
    assert tail.read_bytes() == bytes(data[h.position :])
    assert any("crc-mismatch" in a for a in done.actions)


# ---- the mini fuzz --------------------------------------------------------------------------

CASES = 280
KINDS = ("flip", "offset", "truncate", "zeros", "duplicate", "length", "index")


def mutate(d: Path, rng: random.Random) -> str:
    """One damage to one file of the partition: a flipped bit (anywhere, or in a batch's base
    offset, which the CRC does not cover), a truncation, a zeroed range, a batch repeated, a
    length field pointing past the end, or a flipped bit in an index."""
    kind = KINDS[rng.randrange(len(KINDS))]
    if kind == "index":
        target = rng.choice(sorted([*d.glob("*.index"), *d.glob("*.timeindex")]))
    else:
        target = rng.choice(sorted(d.glob("*.log")))
    data = bytearray(target.read_bytes())
    if not data:
        return "empty"
    headers = list(iter_batch_headers(bytes(data))) if kind != "index" else []
    if kind in ("flip", "index"):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == "offset":
        data[rng.choice(headers).position + rng.randrange(8)] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del data[rng.randrange(len(data)) :]
    elif kind == "zeros":
        start = rng.randrange(len(data))
        end = min(len(data), start + rng.randrange(1, 300))
        data[start:end] = bytes(end - start)
    elif kind == "duplicate":
        h, at = rng.choice(headers), rng.choice(headers)
        data[at.position : at.position] = data[h.position : h.position + h.size]
    else:
        h = rng.choice(headers)
        struct.pack_into(">i", data, h.position + 8, len(data) + rng.randrange(1, 1 << 20))
    target.write_bytes(bytes(data))
    return f"{kind} {target.name}"


@contextmanager
def no_hang(seconds: int) -> Iterator[None]:
    """Fail a case that runs far longer than any should (a loop that never ends)."""

    def alarm(*_):
        raise TimeoutError(f"no answer after {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


_CUT = re.compile(r"cut (\d+) zero bytes")


def stored_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.iterdir() if p.name.endswith((".log", ".quarantine")))


def test_mini_fuzz_one_rebuild_leaves_nothing_to_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the fuzz checks what a rebuild decides; the order of its durable steps is the kill
    # tests' business, so fsync (most of the time on a busy disk) is skipped here
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    base = tmp_path / "base" / "orders-0"
    write_log(base, n=80)
    assert len(list(base.glob("*.log"))) >= 3
    failures = []
    for case in range(CASES):
        d = tmp_path / "case" / "orders-0"
        shutil.copytree(base, d)
        what = mutate(d, random.Random(case))
        before = stored_bytes(d)
        try:
            with no_hang(60):
                verify_partition(d, INTERVAL)
                done = rebuild_partition(d, INTERVAL)
                after = verify_partition(d, INTERVAL)
        except Exception as e:  # any exception at all is a finding
            failures.append(f"case {case} ({what}): {type(e).__name__}: {e}")
        else:
            if not after.is_ok:
                left = [r["problem"] for r in after.to_rows() if not r["ok"]] + after.problems
                failures.append(f"case {case} ({what}): still to fix: {left}")
            lines = done.actions + [r["action"] for r in done.to_rows()]
            cut = sum(int(n) for line in lines for n in _CUT.findall(line))
            if stored_bytes(d) != before - cut:  # every byte kept: in a segment or quarantined
                failures.append(f"case {case} ({what}): {before - stored_bytes(d)} bytes lost")
        shutil.rmtree(d.parent)
    assert not failures, "\n".join(failures)
