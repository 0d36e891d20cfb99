"""Every JVM jar the tests, benches and docs use, fetched with Maven from one pinned manifest.

tests/java/pom.xml names the groups, one Maven profile each:

- `oracle`: Apache Kafka's kafka-clients with its codecs (tests/kafka_oracle.py);
- `broker`: Kafka's KRaft broker and its command-line tools (kafka-tools), logging through log4j2
  (tests/kafka_cluster.py);
- `spark-kafka`: Spark's own Kafka connector (spark-sql-kafka-0-10) at pyspark's version;
- `spark-avro`: Spark's own Avro functions at pyspark's version;
- `delta`: Delta Lake for Spark at the coordinates delta-spark's `configure_spark_with_delta_pip`
  names for the installed pip packages.

`jar_dir(group)` copies a group's runtime jars with `mvn dependency:copy-dependencies` into its
own folder under `${XDG_CACHE_HOME:-~/.cache}/kafkalog/jvm/` on first use (one Maven run per
group, under a file lock so that two pytest-xdist workers never fetch at once) and returns it;
later calls find it there. The folder's name carries a digest of the manifest and of the
coordinates handed in, so a change of either fetches anew. A jar that pyspark already ships is not
copied into a Spark group: Spark's own classes come from pyspark, the group adds only what it
lacks. Without `mvn`, or when Maven cannot fetch, JvmDepsUnavailable carries one line saying
what to fetch; the tests fail with it (`require` in tests/conftest.py), never skip.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

POM = Path(__file__).resolve().parent / "java" / "pom.xml"
LOG4J2_CONFIG = POM.parent / "log4j2.properties"
GROUPS = ("oracle", "broker", "spark-kafka", "spark-avro", "delta")
SPARK_GROUPS = ("spark-kafka", "spark-avro", "delta")
# A jar's name is ARTIFACT-VERSION.jar, the version from the first "-<digits>." on (an artifact
# such as spark-sql-kafka-0-10_2.13 has digits of its own).
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Maven colours its messages even in batch mode
_ARTIFACT = re.compile(r"^(.*?)-(\d+\..*)\.jar$")


class JvmDepsUnavailable(RuntimeError):
    """A group's jars could not be fetched; the message is one line saying what to fetch."""


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafkalog" / "jvm"


@contextlib.contextmanager
def cache_lock() -> Iterator[Path]:
    """The cache root, held by one process at a time (Maven's local repository is not safe for
    two concurrent fetches, and a group is fetched once)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield root
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def pyspark_version() -> str:
    return importlib.metadata.version("pyspark")


def delta_coordinates() -> list[str]:
    """The Maven coordinates (group:artifact:version) that the installed delta-spark asks Spark
    to fetch for itself, read from its own configure_spark_with_delta_pip (on a builder that only
    records what it is given: no session starts)."""
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    conf: dict[str, str] = {}
    builder = SparkSession.Builder()

    def record(key: str, value: str) -> SparkSession.Builder:
        conf[key] = value
        return builder

    builder.config = record  # type: ignore[method-assign]
    configure_spark_with_delta_pip(builder)
    packages = conf.get("spark.jars.packages", "")
    return [c for c in packages.split(",") if c.startswith("io.delta:")]


def maven_properties(group: str) -> dict[str, str]:
    """The -D values that group's profile takes from the installed pip packages."""
    if group in ("spark-kafka", "spark-avro"):
        return {"spark.version": pyspark_version()}
    if group == "delta":
        spark = [
            c.split(":") for c in delta_coordinates() if c.split(":")[1].startswith("delta-spark")
        ]
        if len(spark) != 1:
            raise JvmDepsUnavailable(
                f"delta-spark's configure_spark_with_delta_pip names no one delta-spark artifact: "
                f"{delta_coordinates()}"
            )
        _, artifact, version = spark[0]
        return {"delta.artifact": artifact, "delta.version": version}
    return {}


def _digest(group: str, props: dict[str, str]) -> str:
    h = hashlib.sha256(POM.read_bytes())
    h.update(repr((group, sorted(props.items()))).encode())
    return h.hexdigest()[:12]


def _artifact(jar_name: str) -> str:
    m = _ARTIFACT.match(jar_name)
    return m.group(1) if m else jar_name


def _pyspark_artifacts() -> set[str]:
    import pyspark

    return {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}


def mvn_command(group: str, into: Path, props: dict[str, str]) -> list[str]:
    """The one Maven run that copies `group`'s runtime jars into `into`."""
    defines = [f"-D{k}={v}" for k, v in sorted(props.items())]
    return [
        "mvn", "-q", "-B", "-U", "-f", str(POM), "-P", group, *defines,
        "dependency:copy-dependencies", f"-DoutputDirectory={into}",
    ]  # fmt: skip


def _fetch(group: str, into: Path, props: dict[str, str]) -> None:
    cmd = mvn_command(group, into, props)
    by_hand = " ".join(cmd[:-1] + ["-DoutputDirectory=DIR"])
    if shutil.which("mvn") is None:
        raise JvmDepsUnavailable(
            f"the {group} jars are fetched with Maven, but `mvn` is not on PATH: install Maven "
            f"(e.g. apt-get install maven) and rerun, or run `{by_hand}` by hand"
        )
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        text = _ANSI.sub("", proc.stdout + proc.stderr)
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() not in ("", "[ERROR]")]
        error = next((ln for ln in lines if ln.startswith("[ERROR]")), lines[-1] if lines else "")
        raise JvmDepsUnavailable(f"`{by_hand}` failed: {error}")
    if group in SPARK_GROUPS:
        shipped = _pyspark_artifacts()
        for jar in into.glob("*.jar"):
            if _artifact(jar.name) in shipped:
                jar.unlink()


def jar_dir(group: str) -> Path:
    """The folder holding `group`'s jars, fetched on first use (into a temp dir renamed into
    place: an interrupted fetch leaves nothing that looks complete)."""
    if group not in GROUPS:
        raise ValueError(f"unknown JVM dependency group {group!r}; one of {GROUPS}")
    props = maven_properties(group)
    final = cache_root() / f"{group}-{_digest(group, props)}"
    if final.is_dir():
        return final
    with cache_lock() as root:
        if final.is_dir():
            return final
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{group}-"))
        try:
            _fetch(group, tmp, props)
            tmp.chmod(0o755)
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def jars(group: str) -> list[Path]:
    """`group`'s jar files, sorted (for spark.jars)."""
    return sorted(jar_dir(group).glob("*.jar"))


def classpath(*groups: str) -> str:
    """A `java -cp` class path of the groups' jars, in the order given."""
    return os.pathsep.join(f"{jar_dir(g)}/*" for g in groups)


def spark_jars(*groups: str) -> str:
    """The groups' jars as a `spark.jars` value (comma-separated paths)."""
    return ",".join(str(j) for g in groups for j in jars(g))


def main() -> int:
    """Fetch every group now (tests/run.sh, before the suite): a fetch that fails prints its
    one line and leaves the group to the tests that need it, which fail with the same line."""
    for group in GROUPS:
        try:
            jar_dir(group)
        except JvmDepsUnavailable as e:
            print(f"kafkalog: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
