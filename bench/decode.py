"""Decode throughput: kafkalog's vectorized decoder vs kafka-python's DefaultRecordBatch iteration.

Input: 1,000,000 records (16-byte keys, 100-byte values, increasing ms timestamps), encoded by
kafkalog's encoder into batches of ~16 KiB and ~1 MiB, uncompressed and with each codec. The
encoded logs are cached under bench/out/ (git-ignored).

kafkalog decodes all records (`decode_records`, CRC verified). kafka-python iterates every
record of the first `--baseline-records` records' batches (default 100,000: it is ~linear, a
full run takes minutes) and touches offset, timestamp, key, value and headers; it cannot do
snappy here (python-snappy is not installed), so that row has no baseline.

Run:  .venv/bin/python bench/decode.py [--records 1000000] [--baseline-records 100000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from kafkalog_core.record.batch import Compression, iter_batch_headers
from kafkalog_core.record.decoder import decode_records
from kafkalog_core.record.encoder import BatchOptions, encode_records

OUT = Path(__file__).resolve().parent / "out"
BATCH_SIZES = {"16KiB": 16 * 1024, "1MiB": 1024 * 1024}


def make_records(n: int, seed: int = 7) -> pa.Table:
    """16-byte random keys, 100-byte values over a small alphabet (compressible like text)."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 256, size=n * 16, dtype=np.uint8)
    values = rng.choice(
        np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789 ,.:", np.uint8), size=n * 100
    )
    key_offsets = pa.py_buffer(np.arange(0, 16 * (n + 1), 16, dtype=np.int32))
    value_offsets = pa.py_buffer(np.arange(0, 100 * (n + 1), 100, dtype=np.int32))
    return pa.table(
        {
            "key": pa.Array.from_buffers(pa.binary(), n, [None, key_offsets, pa.py_buffer(keys)]),
            "value": pa.Array.from_buffers(
                pa.binary(), n, [None, value_offsets, pa.py_buffer(values)]
            ),
            "timestamp": pa.array(1_700_000_000_000 + np.arange(n, dtype=np.int64) // 10),
        }
    )


def encoded_log(n: int, codec: Compression, batch_bytes: int, label: str) -> bytes:
    path = OUT / f"decode_{n}_{codec.kafka_name}_{label}.log"
    if path.is_file():
        return path.read_bytes()
    OUT.mkdir(parents=True, exist_ok=True)
    encoded = encode_records(
        make_records(n), options=BatchOptions(compression=codec, max_batch_bytes=batch_bytes)
    )
    data = bytes(encoded.buffer)
    path.write_bytes(data)
    return data


def time_ours(data: bytes, n: int, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        table = decode_records(data, verify=True)
        best = min(best, time.perf_counter() - start)
        assert table.num_rows == n
    return n / best


def time_kafka_python(data: bytes, limit: int) -> tuple[float, int]:
    from kafka.record.default_records import DefaultRecordBatch

    end = 0
    count = 0
    for header in iter_batch_headers(data):
        end = header.position + header.size
        count += header.records_count
        if count >= limit:
            break
    view = memoryview(data)
    start = time.perf_counter()
    seen = 0
    position = 0
    for header in iter_batch_headers(data, end=end):
        batch = DefaultRecordBatch(view[header.position : header.position + header.size])
        if not batch.validate_crc():
            raise RuntimeError("bad CRC")
        position = header.position
        for record in batch:
            _ = (record.offset, record.timestamp, record.key, record.value, record.headers)
            seen += 1
    elapsed = time.perf_counter() - start
    assert seen == count and position >= 0
    return seen / elapsed, seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--baseline-records", type=int, default=100_000)
    args = parser.parse_args()
    print(
        f"{args.records:,} records, 16 B keys, 100 B values; kafka-python on the first "
        f"{args.baseline_records:,}"
    )
    print(
        f"{'codec':8} {'batch':6} {'MB':>7} {'kafkalog rec/s':>15} {'kafka-python rec/s':>19} {'ratio':>7}"
    )
    for label, batch_bytes in BATCH_SIZES.items():
        for codec in Compression:
            data = encoded_log(args.records, codec, batch_bytes, label)
            ours = time_ours(data, args.records)
            if codec is Compression.SNAPPY:
                theirs_text, ratio_text = "n/a", "n/a"
            else:
                theirs, _ = time_kafka_python(data, args.baseline_records)
                theirs_text, ratio_text = f"{theirs:,.0f}", f"{ours / theirs:.1f}x"
            print(
                f"{codec.kafka_name:8} {label:6} {len(data) / 1e6:7.1f} {ours:15,.0f} "
                f"{theirs_text:>19} {ratio_text:>7}"
            )


if __name__ == "__main__":
    main()
