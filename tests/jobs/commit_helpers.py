"""Small builders for the commit-protocol tests: header-valid fake segments, staging, views.

Segment bodies are v2 batch headers (valid CRC) around filler bytes: enough for a log end offset
scan and for Kafka's swap range (§6 pass 2), without needing the encoder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from jobs.ingestion.staging.task_staging import (
    SEGMENT_FILE,
    TaskManifest,
    copy_segment_for_continuation,
    finalize_task_staging,
    segment_file_name,
    task_staging_dir,
)
from kafkalog_core.log.names import partition_dir_name
from kafkalog_core.record.batch import RECORD_BATCH_OVERHEAD, iter_batch_headers, pack_header
from kafkalog_core.root.meta_area import META_SUFFIX


def fake_batch(base_offset: int, count: int, filler: bytes = b"r") -> bytes:
    body = filler * (3 * count)
    buf = bytearray(RECORD_BATCH_OVERHEAD + len(body))
    buf[RECORD_BATCH_OVERHEAD:] = body
    pack_header(
        buf,
        0,
        base_offset=base_offset,
        length=len(buf) - 12,
        partition_leader_epoch=0,
        attributes=0,
        last_offset_delta=count - 1,
        base_timestamp=1000 + base_offset,
        max_timestamp=1000 + base_offset + count - 1,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        records_count=count,
    )
    return bytes(buf)


def write_segment(
    directory: Path, base: int, first: int, count: int, *, append: bool = False
) -> None:
    """Write (or append to) segment `base` with one batch of `count` records from `first`."""
    mode = "ab" if append else "wb"
    with open(directory / segment_file_name(base, "log"), mode) as f:
        f.write(fake_batch(first, count))
    with open(directory / segment_file_name(base, "index"), mode) as f:
        f.write(first.to_bytes(8, "big"))
    with open(directory / segment_file_name(base, "timeindex"), mode) as f:
        f.write(first.to_bytes(12, "big"))


def stage_range(
    root: Path,
    run_id: str,
    topic: str,
    partition: int,
    range_index: int,
    first: int,
    segments: list[int],
    *,
    attempt: str | int = 0,
    continue_segment: int | None = None,
    leader_epoch: int = 0,
) -> TaskManifest:
    """A task attempt writing `segments` (records per segment) from `first`.

    With `continue_segment`, the first entry of `segments` is appended copy-on-write to that
    existing segment.
    """
    task_dir = task_staging_dir(root, run_id, f"{topic}-{partition}-r{range_index}", attempt)
    directory = task_dir / partition_dir_name(topic, partition)
    directory.mkdir()
    offset = first
    for i, count in enumerate(segments):
        if i == 0 and continue_segment is not None:
            copy_segment_for_continuation(root, topic, partition, continue_segment, directory)
            write_segment(directory, continue_segment, offset, count, append=True)
        else:
            write_segment(directory, offset, offset, count)
        offset += count
    return finalize_task_staging(
        directory,
        run_id=run_id,
        task_key=f"{topic}-{partition}-r{range_index}",
        attempt_id=attempt,
        topic=topic,
        partition=partition,
        range_index=range_index,
        first_offset=first,
        next_offset=offset,
        record_count=offset - first,
        replaces=continue_segment,
        leader_epoch=leader_epoch,
    )


def visible(root: Path) -> dict[str, dict[str, bytes]]:
    """Everything a reader of the output root sees: {dir or '.': {file: bytes}}."""
    out: dict[str, dict[str, bytes]] = {}
    if not root.exists():
        return out
    for path in sorted(root.rglob("*")):
        if path.is_file():
            rel = path.relative_to(root)
            parent = str(rel.parent)
            out.setdefault(parent, {})[rel.name] = path.read_bytes()
    return out


def segments_only(files: dict[str, bytes]) -> dict[str, bytes]:
    return {n: b for n, b in files.items() if SEGMENT_FILE.match(n)}


def _offset(name: str) -> int | None:
    head = name.split(".", 1)[0]
    return int(head) if len(head) == 20 and head.isdigit() else None


def kafka_temp_file_passes(files: dict[str, bytes]) -> dict[str, bytes]:
    """What a broker's LogLoader passes 1-3 (§6) leave of one partition dir, plus pass 4's
    orphan-index deletion."""
    files = {n: b for n, b in files.items() if not n.endswith(".deleted")}
    cleaned = [n for n in files if n.endswith(".cleaned")]
    if cleaned:
        min_cleaned = min(_offset(n) for n in cleaned)
        for n in list(files):
            if n.endswith(".swap") and _offset(n) >= min_cleaned:
                del files[n]
        for n in cleaned:
            del files[n]
    log_swaps = [n for n in files if n.endswith(".log.swap")]
    if log_swaps:
        low = min(_offset(n) for n in log_swaps)
        high = 0
        for n in log_swaps:
            end = _offset(n)
            for header in iter_batch_headers(files[n]):
                end = header.last_offset + 1
            high = max(high, end)
        for n in list(files):
            off = _offset(n)
            if not n.endswith(".swap") and off is not None and low <= off < high:
                del files[n]
    for n in [n for n in files if n.endswith(".swap")]:
        files[n[: -len(".swap")]] = files.pop(n)
    logs = {_offset(n) for n in files if n.endswith(".log")}
    return {
        n: b
        for n, b in files.items()
        if not (SEGMENT_FILE.match(n) and not n.endswith(".log") and _offset(n) not in logs)
    }


def meta_of(root: Path) -> Path:
    return root.parent / f".{root.name}{META_SUFFIX}"


def copy_tree(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)
