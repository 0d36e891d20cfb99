"""Fuzz: whole segments mutated, each case run through verify and rebuild in this machine's
processes, the rebuilt logs of a sample read by Apache Kafka's own client.

Not a test. Run from the repo root:

    .venv/bin/python bench/fuzz.py [--cases 100000] [--workers 2] [--seed 1] [--java-sample 0.02]
    .venv/bin/python bench/fuzz.py --seed 1 --replay 4711 --keep /tmp/case-4711   # one case again

Templates: small partition dirs (2 to 5 segments of about 2 KiB; every codec, transactions with
commit and abort markers, headers, null keys), written batch by batch and indexed by a rebuild,
each checked by verify and by Kafka's client first. A case copies one template and mutates its
segments (`KINDS`): bit flips, a truncation, a zeroed range, a duplicated batch, a batch length
field that points past the end of the file, a flipped bit in a batch's base offset (outside the
CRC), damaged index files, or two or three of these at once. Then, in-process:
`verify_partition`, `rebuild_partition` (what `rebuild-index --mode rebuild` runs per partition),
`verify_partition` again.

Before that, a copy of the mutated dir is opened as a broker's startup opens it
(`PartitionLog.open`, the loader every writer and job uses), after a clean shutdown or an
unclean one with a recovery point drawn per case. A small model of Kafka's LogLoader, written
here from its rules (pass 4 recovers a segment without .index or with a corrupt .txnindex and
ignores what it cut; pass 5, after an unclean shutdown, recovers from the recovery point's
segment on, cuts the first invalid batch and drops every later segment; nothing else is cut),
says which batches a broker keeps: every one of them must still be there, byte for byte
(`load-lost` otherwise). Cases whose offsets go backwards or overflow a segment (a broker's
load fails or splits) are outside the model and counted as such.

It must show, per case: no exception but a KafkaLogError subclass (reported by class), no hang
(`--case-timeout` seconds per case, and a worker that stops answering), nothing left to fix after
one rebuild, no batch lost by a load that a broker keeps; and for a sample (`--java-sample`, read in batches of partition dirs per JVM), a
rebuilt log that Kafka's client (tests/java/ReadLog.java: every batch and record validated)
reads without error, batch for batch as verify counted. Prints the counts per mutation kind and
per outcome, and every failing case with the numbers that replay it. Exit 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import shutil
import signal
import struct
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402

from kafkalog_core.config import LogConfig  # noqa: E402
from kafkalog_core.errors import KafkaLogError  # noqa: E402
from kafkalog_core.log.index.txn_index import TransactionIndex  # noqa: E402
from kafkalog_core.log.names import INDEX_SUFFIXES, log_file_name  # noqa: E402
from kafkalog_core.log.partition.partition_log import PartitionLog  # noqa: E402
from kafkalog_core.maintenance.rebuild import rebuild_partition  # noqa: E402
from kafkalog_core.maintenance.verify import verify_partition  # noqa: E402
from kafkalog_core.record.batch import Compression, iter_batch_headers  # noqa: E402
from kafkalog_core.record.control import (  # noqa: E402
    ControlRecordType,
    build_end_txn_marker_batch,
)
from kafkalog_core.record.encoder import BatchOptions, encode_records  # noqa: E402

INTERVAL = 256  # the templates' index.interval.bytes
SEGMENT_BYTES = 2048
FAILURES = ("untyped-error", "left-to-fix", "timeout", "load-lost")


# ---- templates ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Template:
    name: str
    codecs: tuple[Compression, ...]
    records: int
    transactions: bool = False


TEMPLATES = (
    Template("plain", (Compression.NONE,), 120),
    Template("gzip", (Compression.GZIP,), 200),
    Template("snappy", (Compression.SNAPPY,), 200),
    Template("lz4", (Compression.LZ4,), 200),
    Template("zstd", (Compression.ZSTD,), 200),
    Template("mixed", tuple(Compression), 250),
    Template("txn", (Compression.NONE, Compression.GZIP), 150, transactions=True),
    Template("short", (Compression.NONE,), 30),  # one segment: only the active one
)


def _records(rng: random.Random, first: int, n: int) -> pa.Table:
    keys = [None if rng.random() < 0.1 else b"k%d" % rng.randrange(50) for _ in range(n)]
    return pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": [b"v%d-" % (first + i) + bytes(rng.randrange(40)) for i in range(n)],
            "timestamp": pa.array([1_700_000_000_000 + 1000 * (first + i) for i in range(n)]),
            "headers": pa.array(
                [[{"key": "h", "value": b"%d" % i}] if i % 3 else [] for i in range(n)],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )


def template_batches(t: Template, seed: int) -> list[bytes]:
    """The template's batches, offsets dense from 0: runs of 1-12 records per codec, and with
    `transactions` transactional runs of one producer, each ended by a commit or abort marker."""
    rng = random.Random(f"{seed}:{t.name}")
    batches: list[bytes] = []
    offset, epoch = 0, 0
    while offset < t.records:
        n = min(rng.randrange(1, 13), t.records - offset)
        transactional = t.transactions and rng.random() < 0.5
        options = BatchOptions(
            compression=rng.choice(t.codecs),
            max_batch_bytes=rng.choice((200, 400, 1000)),
            producer_id=7 if transactional else -1,
            producer_epoch=epoch if transactional else -1,
            base_sequence=offset if transactional else -1,
            is_transactional=transactional,
        )
        encoded = encode_records(_records(rng, offset, n), base_offset=offset, options=options)
        batches += [bytes(encoded.batch(i)) for i in range(len(encoded))]
        offset = int(encoded.last_offsets[-1]) + 1
        if transactional:
            kind = rng.choice((ControlRecordType.COMMIT, ControlRecordType.ABORT))
            batches.append(
                build_end_txn_marker_batch(
                    base_offset=offset,
                    producer_id=7,
                    producer_epoch=epoch,
                    coordinator_epoch=0,
                    control_type=kind,
                    timestamp=1_700_000_000_000 + 1000 * offset,
                )
            )
            offset += 1
    return batches


def write_template(t: Template, seed: int, directory: Path) -> None:
    """Segments of about SEGMENT_BYTES, each named by its first batch; indexes by a rebuild."""
    directory.mkdir(parents=True)
    segment: list[bytes] = []
    base = 0
    for batch in template_batches(t, seed):
        if segment and sum(map(len, segment)) + len(batch) > SEGMENT_BYTES:
            (directory / log_file_name(base)).write_bytes(b"".join(segment))
            segment = []
        if not segment:
            base = struct.unpack_from(">q", batch, 0)[0]
        segment.append(batch)
    (directory / log_file_name(base)).write_bytes(b"".join(segment))
    rebuild_partition(directory, INTERVAL)
    if not verify_partition(directory, INTERVAL).is_ok:
        raise SystemExit(f"template {t.name} does not verify")


# ---- mutations --------------------------------------------------------------------------------
def _batches(data: bytes) -> list[tuple[int, int]]:
    """(position, size) of the whole batches at the start of `data`."""
    try:
        return [(h.position, h.size) for h in iter_batch_headers(data)]
    except KafkaLogError:
        return []


def bit_flip(rng: random.Random, data: bytearray) -> str:
    flips = [rng.randrange(len(data) * 8) for _ in range(rng.randrange(1, 9))]
    for bit in flips:
        data[bit // 8] ^= 1 << (bit % 8)
    return f"{len(flips)} bits"


def truncate(rng: random.Random, data: bytearray) -> str:
    cut = rng.randrange(len(data))
    del data[cut:]
    return f"at {cut}"


def zero_range(rng: random.Random, data: bytearray) -> str:
    start = rng.randrange(len(data))
    length = min(rng.randrange(1, 513), len(data) - start)
    data[start : start + length] = bytes(length)
    return f"{length} bytes at {start}"


def on_a_batch(mutation: Callable[..., str]) -> Callable[[random.Random, bytearray], str]:
    """`mutation(rng, data, batches, position, size)` on a random whole batch of `data`."""

    def apply(rng: random.Random, data: bytearray) -> str:
        batches = _batches(bytes(data))
        if not batches:
            return "none (no whole batch)"
        position, size = rng.choice(batches)
        return mutation(rng, data, batches, position, size)

    return apply


@on_a_batch
def duplicate_batch(rng, data, batches, position: int, size: int) -> str:
    copy = bytes(data[position : position + size])
    after = rng.choice([p + s for p, s in batches if p >= position])
    data[after:after] = copy
    return f"batch at {position} again at {after}"


@on_a_batch
def length_past_end(rng, data, _batches, position: int, _size: int) -> str:
    room = len(data) - position - 12
    length = rng.choice((room + rng.randrange(1, 1000), 0x7FFFFFFF, rng.randrange(-(2**31), 0)))
    struct.pack_into(">i", data, position + 8, length)
    return f"batch at {position}: length {length}, {room} bytes follow"


@on_a_batch
def base_offset_flip(rng, data, _batches, position: int, _size: int) -> str:
    bit = rng.randrange(64)
    data[position + 7 - bit // 8] ^= 1 << (bit % 8)
    return f"batch at {position}: bit {bit}"


LOG_MUTATIONS: dict[str, Callable[[random.Random, bytearray], str]] = {
    "bit-flip": bit_flip,
    "truncate": truncate,
    "zero-range": zero_range,
    "duplicate-batch": duplicate_batch,
    "length-past-end": length_past_end,
    "base-offset-flip": base_offset_flip,
}
KINDS = (*LOG_MUTATIONS, "index-damage", "combination")


def damage_index(rng: random.Random, segment: Path) -> str:
    stem = segment.name[: -len(".log")]
    indexes = [p for s in INDEX_SUFFIXES if (p := segment.with_name(stem + s)).exists()]
    if not indexes:
        return "none (no index)"
    target = rng.choice(indexes)
    data = bytearray(target.read_bytes())
    how = rng.choice(("delete", "append", *(() if not data else ("bit-flip", "truncate", "zero"))))
    if how == "delete":
        target.unlink()
        return f"{target.name} deleted"
    if how == "append":
        data += rng.randbytes(rng.randrange(1, 40))
        what = "garbage appended"
    else:
        what = {"bit-flip": bit_flip, "truncate": truncate, "zero": zero_range}[how](rng, data)
    target.write_bytes(bytes(data))
    return f"{target.name} {how} {what}"


def mutate(rng: random.Random, pdir: Path, kind: str) -> str:
    """Apply one mutation of `kind` (a combination: two or three) to a random segment."""
    segments = sorted(pdir.glob("*.log"))
    if not segments:
        return "none (no segment left)"
    segment = rng.choice(segments)
    if kind == "combination":
        kinds = [rng.choice(KINDS[:-1]) for _ in range(rng.randrange(2, 4))]
        return " + ".join(f"{k}: {mutate(rng, pdir, k)}" for k in kinds)
    if kind == "index-damage":
        return f"{segment.name[:20]} " + damage_index(rng, segment)
    data = bytearray(segment.read_bytes())
    if not data:
        return f"{segment.name[:20]} none (empty)"
    what = LOG_MUTATIONS[kind](rng, data)
    segment.write_bytes(bytes(data))
    return f"{segment.name[:20]} {what}"


# ---- the load property: what Kafka's LogLoader keeps is kept --------------------------------------
def _kept_prefix(data: bytes) -> tuple[list[bytes], bool]:
    """The batches Kafka's recovery keeps of a .log (CRC-checked walk, stops at the first
    invalid batch) and whether it would cut anything."""
    kept, end = [], 0
    try:
        for h in iter_batch_headers(data, verify=True):
            kept.append(data[h.position : h.position + h.size])
            end = h.position + h.size
    except KafkaLogError:
        pass
    return kept, end < len(data)


def _in_model(base: int, data: bytes) -> bool:
    """Offsets that increase and fit the segment: a broker's load neither fails nor splits."""
    previous = base - 1
    try:
        for h in iter_batch_headers(data):
            if h.base_offset <= previous or not 0 <= h.last_offset - base <= 2**31 - 1:
                return False
            previous = h.last_offset
    except KafkaLogError:
        pass
    return True


def kafka_keeps(pdir: Path, clean: bool, recovery_point: int) -> list[bytes] | None:
    """The batches Kafka's LogLoader keeps of `pdir` (None: outside the model)."""
    logs = sorted(pdir.glob("*.log"))
    segments = [(int(p.name[:20]), p.read_bytes()) for p in logs]
    if not all(_in_model(base, data) for base, data in segments):
        return None
    files: list[bytes] = []  # each .log as pass 4 leaves it
    for path, (base, data) in zip(logs, segments, strict=True):
        recover = not path.with_suffix(".index").exists()
        txn = path.with_suffix(".txnindex")
        if not recover and txn.exists():
            try:
                TransactionIndex(txn, base).sanity_check()
            except KafkaLogError:
                recover = True
        files.append(b"".join(_kept_prefix(data)[0]) if recover else data)
    kept = [list(_batches_of(data)) for data in files]
    if not clean:
        first = max([k for k, (base, _) in enumerate(segments) if base <= recovery_point] or [0])
        for k in range(first, len(segments)):
            prefix, cuts = _kept_prefix(files[k])
            kept[k] = prefix
            if cuts:
                kept = kept[: k + 1]
                break
    return [batch for segment in kept for batch in segment]


def _batches_of(data: bytes):
    """Every whole batch a reader walks (no CRC check): what an untouched segment holds."""
    try:
        for h in iter_batch_headers(data):
            yield data[h.position : h.position + h.size]
    except KafkaLogError:
        return


def load_case(seed: int, case: int, pdir: Path) -> tuple[str, str]:
    """Open a copy of the mutated `pdir` as a broker's startup would; (outcome, detail)."""
    rng = random.Random(f"{seed}:{case}:load")
    bases = sorted(int(p.name[:20]) for p in pdir.glob("*.log"))
    clean = rng.random() < 0.4
    recovery_point = rng.choice([0, *bases]) if bases else 0
    want = kafka_keeps(pdir, clean, recovery_point)
    if want is None:
        return "out-of-model", ""
    config = LogConfig.from_dict(
        {"index.interval.bytes": str(INTERVAL), "segment.bytes": str(4 * SEGMENT_BYTES)}
    )
    try:
        PartitionLog.open(
            pdir, config, had_clean_shutdown=clean, recovery_point=recovery_point
        ).close()
    except KafkaLogError as e:
        return f"refused:{type(e).__name__}", str(e)[:300]
    have = Counter(b for p in sorted(pdir.glob("*.log")) for b in _batches_of(p.read_bytes()))
    lost = Counter(want) - have
    if lost:
        return "load-lost", (
            f"{sum(lost.values())} of the {len(want)} batches a broker keeps are gone "
            f"(clean={clean}, recovery point {recovery_point})"
        )
    return "kept", ""


# ---- one case ---------------------------------------------------------------------------------
class CaseTimeout(BaseException):
    """Raised by the per-case alarm (a BaseException: no `except Exception` swallows it)."""


def _alarm(_signum, _frame) -> None:
    raise CaseTimeout


@dataclass
class CaseResult:
    case: int
    template: str
    kind: str
    mutation: str
    outcome: str  # clean / repaired / typed:<Error> / untyped-error / left-to-fix / timeout
    detail: str = ""
    seconds: float = 0.0
    batches: dict[str, int] = field(default_factory=dict)  # segment -> batches, after rebuild
    load: str = ""  # the load property: kept / out-of-model / refused:<Error> / load-lost


def case_rng(seed: int, case: int) -> random.Random:
    return random.Random(f"{seed}:{case}")


def run_case(seed: int, case: int, templates: Path, work: Path, timeout: float) -> CaseResult:
    """Copy a template, mutate it, verify, rebuild, verify; the outcome."""
    rng = case_rng(seed, case)
    template = rng.choice(TEMPLATES).name
    kind = rng.choice(KINDS)
    pdir = work / f"c{case}"
    shutil.rmtree(pdir, ignore_errors=True)
    shutil.copytree(templates / template, pdir)
    result = CaseResult(case, template, kind, mutate(rng, pdir, kind), "clean")
    loaded = work / f"l{case}"
    shutil.rmtree(loaded, ignore_errors=True)
    shutil.copytree(pdir, loaded)
    began = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        result.load, detail = load_case(seed, case, loaded)
        shutil.rmtree(loaded, ignore_errors=True)
        if result.load == "load-lost":
            result.outcome, result.detail = "load-lost", detail
            return result
        before = verify_partition(pdir, INTERVAL)
        rebuild_partition(pdir, INTERVAL)
        after = verify_partition(pdir, INTERVAL)
        signal.setitimer(signal.ITIMER_REAL, 0)
        if not after.is_ok:
            problems = [p for s in after.segments for p in s.problems] + after.problems
            result.outcome, result.detail = "left-to-fix", "; ".join(problems)[:500]
        elif not before.is_ok:
            result.outcome = "repaired"
        result.batches = {s.log_path.name: s.scan.batch_count for s in after.segments if s.scan}
    except CaseTimeout:
        result.outcome, result.detail = "timeout", f"over {timeout} s"
    except KafkaLogError as e:
        result.outcome, result.detail = f"typed:{type(e).__name__}", str(e)[:300]
    except Exception:
        result.outcome, result.detail = "untyped-error", traceback.format_exc()[-1500:]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    result.seconds = time.monotonic() - began
    return result


# ---- workers and the run --------------------------------------------------------------------
_setup: dict = {}


def _init(seed: int, templates: str, work: str, java: str, sample: float, timeout: float) -> None:
    signal.signal(signal.SIGALRM, _alarm)
    worker = Path(tempfile.mkdtemp(dir=work, prefix="w"))
    _setup.update(seed=seed, templates=Path(templates), work=worker, java=Path(java), sample=sample)
    _setup["timeout"] = timeout


def _chunk(cases: range) -> list[CaseResult]:
    s = _setup
    results = []
    for case in cases:
        r = run_case(s["seed"], case, s["templates"], s["work"], s["timeout"])
        pdir = s["work"] / f"c{case}"
        if r.outcome not in FAILURES and case_rng(s["seed"], -case).random() < s["sample"]:
            keep = s["java"] / pdir.name  # the .log files only: what Kafka's client reads
            keep.mkdir()
            for log in pdir.glob("*.log"):
                shutil.copyfile(log, keep / log.name)
        else:
            r.batches = {}
        shutil.rmtree(pdir, ignore_errors=True)
        results.append(r)
    return results


def java_check(dirs: list[Path], expected: dict[str, dict[str, int]], batch: int) -> list[str]:
    """Kafka's client over `dirs`, `batch` partition dirs per JVM: the failures, one line each
    (a dir the client refuses is named and left out of the rest of its batch)."""
    from tests.kafka_oracle import READ_LOG, JavaProgramError, run_java

    failures = []
    for start in range(0, len(dirs), batch):
        todo = dirs[start : start + batch]
        while todo:
            try:
                out = run_java(READ_LOG, *todo)
            except JavaProgramError as e:
                text = str(e)
                bad = [d for d in todo if f"{d}/" in text]
                failures.append(text.splitlines()[-1][:300])
                if not bad:
                    break
                todo = [d for d in todo if d not in bad]
                continue
            seen: dict[str, dict[str, int]] = {}
            for line in out.splitlines():
                if line.startswith('{"type":"segment"'):
                    item = json.loads(line)
                    seen.setdefault(item["dir"], {})[item["segment"]] = item["batches"]
            for d in todo:
                want = {k: v for k, v in expected[d.name].items() if v}
                got = {k: v for k, v in seen.get(d.name, {}).items() if v}
                if got != want:
                    failures.append(f"{d.name}: Kafka's client read batches {got}, verify {want}")
            todo = []
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--java-sample", type=float, default=0.02, help="share of cases")
    parser.add_argument("--java-batch", type=int, default=500, help="partition dirs per JVM")
    parser.add_argument("--case-timeout", type=float, default=20.0, help="seconds per case")
    parser.add_argument("--chunk", type=int, default=200, help="cases per worker task")
    parser.add_argument("--replay", type=int, help="run this one case and print it")
    parser.add_argument("--keep", type=Path, help="with --replay: keep the case's dir here")
    args = parser.parse_args(argv)

    shm = Path("/dev/shm")  # a tmpfs: the cases' many small writes never wait on a disk
    base = Path(tempfile.mkdtemp(prefix="kafkalog-fuzz-", dir=shm if shm.is_dir() else None))
    templates, work, java = base / "templates", base / "work", base / "java"
    for d in (work, java):
        d.mkdir()
    try:
        for t in TEMPLATES:
            write_template(t, args.seed, templates / t.name)
        if args.replay is not None:
            return _replay(args, templates, work)
        return _run(args, templates, work, java)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _replay(args: argparse.Namespace, templates: Path, work: Path) -> int:
    signal.signal(signal.SIGALRM, _alarm)
    if args.keep:
        rng = case_rng(args.seed, args.replay)
        template, kind = rng.choice(TEMPLATES).name, rng.choice(KINDS)
        shutil.copytree(templates / template, args.keep / "before")
        mutate(rng, args.keep / "before", kind)
    r = run_case(args.seed, args.replay, templates, work, args.case_timeout)
    if args.keep:
        shutil.copytree(work / f"c{args.replay}", args.keep / "after")
    print(json.dumps(r.__dict__, indent=1))
    return 1 if r.outcome in FAILURES else 0


def _run(args: argparse.Namespace, templates: Path, work: Path, java: Path) -> int:
    began = time.monotonic()
    chunks = [range(k, min(k + args.chunk, args.cases)) for k in range(0, args.cases, args.chunk)]
    context = multiprocessing.get_context("forkserver")
    init = (args.seed, str(templates), str(work), str(java), args.java_sample, args.case_timeout)
    by_kind: Counter[tuple[str, str]] = Counter()
    outcomes: Counter[str] = Counter()
    loads: Counter[str] = Counter()
    failures: list[CaseResult] = []
    typed: dict[str, CaseResult] = {}
    expected: dict[str, dict[str, int]] = {}
    slowest = 0.0
    with context.Pool(args.workers, initializer=_init, initargs=init) as pool:
        results = pool.imap_unordered(_chunk, chunks)
        for done in range(len(chunks)):
            try:
                chunk = results.next(timeout=args.case_timeout * args.chunk + 60)
            except multiprocessing.TimeoutError:
                print(f"fuzz: a worker stopped answering after {done} chunks (a hang)")
                outcomes["worker-hang"] += 1
                break
            for r in chunk:
                by_kind[(r.kind, r.outcome)] += 1
                outcomes[r.outcome] += 1
                loads[r.load.split(":")[0]] += 1
                slowest = max(slowest, r.seconds)
                if r.outcome in FAILURES:
                    failures.append(r)
                elif r.outcome.startswith("typed:"):
                    typed.setdefault(r.outcome, r)
                if r.batches or (java / f"c{r.case}").exists():
                    expected[f"c{r.case}"] = r.batches
            if (done + 1) % max(1, len(chunks) // 20) == 0:
                n = sum(outcomes.values())
                print(f"  {n} cases, {time.monotonic() - began:.0f} s", flush=True)
    fuzz_seconds = time.monotonic() - began
    sample = sorted(java.iterdir())
    java_began = time.monotonic()
    sample_dirs = [d for d in sample if d.name in expected]
    java_failures = java_check(sample_dirs, expected, args.java_batch) if sample_dirs else []
    java_seconds = time.monotonic() - java_began
    total = sum(outcomes.values())
    _report(args, total, by_kind, outcomes, fuzz_seconds, slowest)
    print(
        "load (what Kafka's LogLoader keeps is kept): "
        + ", ".join(f"{n} {name or 'not reached'}" for name, n in sorted(loads.items()))
    )
    print(
        f"Kafka's client (ReadLog.java): {len(sample_dirs)} rebuilt partition dirs "
        f"({sum(len(v) for v in expected.values())} segments) read in "
        f"{-(-len(sample_dirs) // args.java_batch)} JVM runs, {java_seconds:.0f} s: "
        f"{len(java_failures)} failures"
    )
    for line in java_failures[:20]:
        print(f"  {line}")
    for name, r in sorted(typed.items()):
        print(f"first {name}: case {r.case} ({r.template}, {r.kind}: {r.mutation}): {r.detail}")
    for r in failures[:30]:
        print(f"FAILED case {r.case} ({r.template}, {r.kind}: {r.mutation}): {r.outcome}")
        print("  " + r.detail.replace("\n", "\n  "))
        print(f"  replay: .venv/bin/python bench/fuzz.py --seed {args.seed} --replay {r.case}")
    bad = len(failures) + len(java_failures) + outcomes["worker-hang"]
    print("fuzz: " + ("OK" if not bad else f"{bad} FAILURES"))
    return 1 if bad else 0


def _report(args, total, by_kind, outcomes, seconds, slowest) -> None:
    names = sorted(outcomes, key=lambda o: (o in FAILURES, o))
    print(
        f"fuzz: {total} cases (seed {args.seed}, {args.workers} workers) in {seconds:.0f} s, "
        f"{total / max(seconds, 1e-9):.0f} cases/s, slowest case {slowest:.2f} s"
    )
    width = max(len(k) for k in KINDS)
    print(f"{'mutation':<{width}} " + " ".join(f"{n:>12}" for n in names) + f" {'total':>8}")
    for kind in KINDS:
        counts = [by_kind[(kind, n)] for n in names]
        print(f"{kind:<{width}} " + " ".join(f"{c:>12}" for c in counts) + f" {sum(counts):>8}")
    print(f"{'all':<{width}} " + " ".join(f"{outcomes[n]:>12}" for n in names) + f" {total:>8}")


if __name__ == "__main__":
    raise SystemExit(main())
