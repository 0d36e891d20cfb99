"""Apache Kafka's own Java client as the test oracle for every byte kafkalog writes.

Kafka's client classes (FileRecords, the record batches and records it yields) read what we wrote,
so a bug shared by our encoder and our decoder cannot hide. The jars are the `oracle` group of
tests/java/pom.xml (kafka-clients, pinned, with the codec jars it needs: lz4-java, snappy-java,
zstd-jni, and slf4j-api), fetched with Maven into `${XDG_CACHE_HOME:-~/.cache}/kafkalog/jvm/` on
first use by tests/jvm_deps.py.

- `run_java(source, *args, stdin=None)`: run a single-file Java program against those jars.
- `kafka_client_read(log_dir)`: tests/java/ReadLog.java over a log dir (or a partition dir).

Each program is compiled once per version of its source and of the jars (with javac, cached beside
the jars), so a call costs one JVM start; `java -cp 'JARS/*' tests/java/ReadLog.java LOGDIR` runs
it by hand. Tests take the session fixture `kafka_client` (tests/conftest.py), which fetches the
jars or fails with one line saying what to fetch.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests import jvm_deps

JAVA_DIR = Path(__file__).resolve().parent / "java"
READ_LOG = JAVA_DIR / "ReadLog.java"
# A short-lived JVM: the client compiler only, one GC thread, no class-data surprises.
JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto")


class OracleUnavailable(RuntimeError):
    """Kafka's client jars could not be fetched, or there is no JDK to compile the programs."""


class JavaProgramError(RuntimeError):
    """A Java program exited non-zero (for ReadLog: Kafka's client refused a segment)."""


def kafka_client_jars() -> Path:
    """The folder holding Kafka's client jars (tests/java/pom.xml's `oracle` group), fetched
    with Maven on first use."""
    try:
        return jvm_deps.jar_dir("oracle")
    except jvm_deps.JvmDepsUnavailable as e:
        raise OracleUnavailable(str(e)) from e


def require_oracle() -> Path:
    """The jars (fetched if need be) and a JDK to compile the programs: OracleUnavailable
    saying what is missing otherwise."""
    if shutil.which("javac") is None:
        raise OracleUnavailable(
            "the Kafka client checks compile small Java programs: install a JDK 17+ "
            "(e.g. openjdk-17-jdk-headless), not only a JRE"
        )
    return kafka_client_jars()


def _compiled(source: Path, jars: Path) -> Path:
    """The classes of `source`, compiled once per version of its text and of the jars (cached
    beside the jars)."""
    digest = hashlib.sha256(source.read_bytes() + jars.name.encode()).hexdigest()[:16]
    classes = jvm_deps.cache_root() / "classes" / f"{source.stem}-{digest}"
    if classes.is_dir():
        return classes
    with jvm_deps.cache_lock():
        if classes.is_dir():
            return classes
        classes.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=classes.parent, prefix=".javac-"))
        try:
            cmd = ["javac", "-nowarn", "-cp", f"{jars}/*", "-d", str(tmp), str(source)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise JavaProgramError(f"javac {source.name} failed:\n{proc.stderr}")
            tmp.chmod(0o755)
            tmp.rename(classes)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return classes


def run_java(source: str | os.PathLike[str], *args: str, stdin: bytes | None = None) -> str:
    """Run the single-file Java program `source` (its public class named as the file) with
    Kafka's client jars on the class path; its stdout. A non-zero exit raises JavaProgramError
    with the program's stderr."""
    source = Path(source)
    jars = require_oracle()
    classpath = f"{jars}/*{os.pathsep}{_compiled(source, jars)}"
    # The codec jars unpack their native libraries into java.io.tmpdir and leave them there.
    with tempfile.TemporaryDirectory(prefix="kafkalog-java-") as tmp:
        cmd = ["java", *JVM_FLAGS, f"-Djava.io.tmpdir={tmp}", "-cp", classpath, source.stem]
        proc = subprocess.run([*cmd, *map(str, args)], input=stdin, capture_output=True)
    if proc.returncode != 0:
        # slf4j-api without a binding says so on every start: not part of the failure.
        err = "\n".join(
            line
            for line in proc.stderr.decode(errors="replace").splitlines()
            if not line.startswith("SLF4J:")
        )
        raise JavaProgramError(f"{source.name} exited {proc.returncode}: {err.strip()}")
    return proc.stdout.decode()


@dataclass(frozen=True)
class KafkaBatch:
    """A record batch as Kafka's client sees it (RecordBatch's accessors)."""

    dir: str
    segment: str
    position: int
    size: int
    base_offset: int
    last_offset: int
    count: int | None
    magic: int
    compression: str  # CompressionType.name: none, gzip, snappy, lz4, zstd
    timestamp_type: str  # CreateTime, LogAppendTime, NoTimestampType
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    partition_leader_epoch: int
    transactional: bool
    control: bool
    crc: int


@dataclass(frozen=True)
class KafkaRecord:
    """A record as Kafka's client sees it; None is a null key/value/header value, b"" empty."""

    dir: str
    segment: str
    position: int  # of its batch
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    control: bool  # in a control batch (a transaction marker), not a data record


@dataclass(frozen=True)
class KafkaLog:
    """Everything Kafka's client read from a log dir, in partition dir and file order."""

    batches: list[KafkaBatch]
    records: list[KafkaRecord]
    segments: dict[tuple[str, str], int]  # (dir, segment) -> file size

    def rows(self) -> list[tuple]:
        """The data records as (topic, partition, offset, key, value, headers, timestamp) with
        headers as [{"key", "value"}], sorted: the rows of tests/jobs/ingest_helpers.read_root."""
        out = []
        for r in self.records:
            if r.control:
                continue
            topic, _, part = r.dir.rpartition("-")
            headers = [{"key": k, "value": v} for k, v in r.headers]
            out.append((topic, int(part), r.offset, r.key, r.value, headers, r.timestamp))
        return sorted(out, key=lambda row: (row[0], row[1], row[2]))

    def first_offsets(self) -> dict[str, int]:
        """Partition dir -> base offset of its first batch (the log start a reader sees)."""
        out: dict[str, int] = {}
        for b in self.batches:
            out.setdefault(b.dir, b.base_offset)
        return out

    def offset_problems(self) -> list[str]:
        """Where offsets are not as a log that nothing compacted holds them: each segment named
        by its first batch's base offset, each batch starting one past the previous one's last
        offset, each batch's records exactly base..last offset."""
        offsets: dict[tuple[str, str, int], list[int]] = {}
        for r in self.records:
            offsets.setdefault((r.dir, r.segment, r.position), []).append(r.offset)
        problems = []
        last: dict[str, int] = {}
        seen: set[tuple[str, str]] = set()
        for b in self.batches:
            where = f"{b.dir}/{b.segment} at position {b.position}"
            if (b.dir, b.segment) not in seen:
                seen.add((b.dir, b.segment))
                if int(b.segment[:20]) != b.base_offset:
                    problems.append(f"{where}: segment name but base offset {b.base_offset}")
            if b.dir in last and b.base_offset != last[b.dir] + 1:
                problems.append(f"{where}: base offset {b.base_offset} after {last[b.dir]}")
            if offsets.get((b.dir, b.segment, b.position)) != [
                *range(b.base_offset, b.last_offset + 1)
            ]:
                problems.append(f"{where}: records not {b.base_offset}..{b.last_offset}")
            last[b.dir] = b.last_offset
        return sorted(problems)


def _b64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def kafka_client_read(log_dir: str | os.PathLike[str]) -> KafkaLog:
    """Every batch and record of every `.log` under `log_dir` (a log dir of partition dirs, or
    one partition dir), read and validated by Kafka's client in one JVM. Raises
    JavaProgramError naming the file and batch position when the client refuses anything."""
    batches: list[KafkaBatch] = []
    records: list[KafkaRecord] = []
    segments: dict[tuple[str, str], int] = {}
    control, position = False, -1
    for line in run_java(READ_LOG, str(log_dir)).splitlines():
        item = json.loads(line)
        kind = item.pop("type")
        if kind == "batch":
            batches.append(KafkaBatch(**item))
            control, position = item["control"], item["position"]
        elif kind == "record":
            item["key"] = _b64(item["key"])
            item["value"] = _b64(item["value"])
            item["headers"] = tuple((k, _b64(v)) for k, v in item["headers"])
            records.append(KafkaRecord(**item, position=position, control=control))
        else:
            segments[(item["dir"], item["segment"])] = item["size"]
    return KafkaLog(batches, records, segments)
