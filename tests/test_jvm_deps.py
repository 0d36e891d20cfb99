"""tests/jvm_deps.py: the groups of tests/java/pom.xml, fetched with Maven once into the cache;
without Maven, or when it refuses, one line saying what to fetch."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from tests import jvm_deps


def test_delta_coordinates_are_the_ones_the_pip_package_names() -> None:
    version = importlib.metadata.version("delta-spark")
    spark_minor = ".".join(jvm_deps.pyspark_version().split(".")[:2])
    assert jvm_deps.maven_properties("delta") == {
        "delta.artifact": f"delta-spark_{spark_minor}_2.13",
        "delta.version": version,
    }
    assert jvm_deps.maven_properties("spark-kafka") == {"spark.version": jvm_deps.pyspark_version()}


def test_spark_connector_group_adds_only_what_pyspark_lacks() -> None:
    import pyspark

    shipped = {p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    names = {p.name for p in jvm_deps.jars("spark-kafka")}
    assert f"spark-sql-kafka-0-10_2.13-{jvm_deps.pyspark_version()}.jar" in names
    assert any(n.startswith("kafka-clients-") for n in names)
    assert not {jvm_deps._artifact(n) for n in names} & {jvm_deps._artifact(n) for n in shipped}


def test_missing_mvn_fails_with_one_line_and_leaves_nothing(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn
    with pytest.raises(jvm_deps.JvmDepsUnavailable) as err:
        jvm_deps.classpath("broker")
    message = str(err.value)
    assert "\n" not in message and "`mvn` is not on PATH" in message
    assert f"-f {jvm_deps.POM} -P broker dependency:copy-dependencies" in message
    assert [p.name for p in (tmp_path / "cache/kafkalog/jvm").iterdir()] == [".lock"]


def test_a_refused_fetch_names_mavens_error(monkeypatch, tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "mvn"  # prints what Maven prints when the registry refuses
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\nprintf '\\033[0m[\\033[1;31mERROR\\033[m] Failed to execute goal on project "
        "jvm-deps: Could not transfer artifact org.apache.kafka:kafka_2.13:pom:4.1.1: "
        "status code: 403\\n[ERROR] \\n[ERROR] Re-run Maven using the -X switch\\n'\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(fake.parent))
    with pytest.raises(jvm_deps.JvmDepsUnavailable) as err:
        jvm_deps.jar_dir("broker")
    message = str(err.value)
    assert "\n" not in message and "\033" not in message
    assert message.endswith(
        "failed: [ERROR] Failed to execute goal on project jvm-deps: Could not "
        "transfer artifact org.apache.kafka:kafka_2.13:pom:4.1.1: status code: 403"
    )
    assert [p.name for p in (tmp_path / "cache/kafkalog/jvm").iterdir()] == [".lock"]
