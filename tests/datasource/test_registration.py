"""format("kafkalog") is found without setup; register(spark); the write side's errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import pyspark_kafkalog

REPO = Path(__file__).resolve().parents[2]


def test_pyspark_discovers_the_module_by_its_name() -> None:
    """What pyspark/sql/worker/lookup_data_sources.py does, in a fresh interpreter."""
    code = (
        "from pkgutil import iter_modules; from importlib import import_module\n"
        "from pyspark.sql.datasource import DataSource\n"
        "found = {}\n"
        "for info in iter_modules():\n"
        "    if info.name.startswith('pyspark_'):\n"
        "        mod = import_module(info.name)\n"
        "        if issubclass(getattr(mod, 'DefaultSource', object), DataSource):\n"
        "            found[mod.DefaultSource.name()] = mod.__name__\n"
        "print(found['kafkalog'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "pyspark_kafkalog"
    assert "pyspark_kafkalog*" in (REPO / "pyproject.toml").read_text()  # shipped when installed


@pytest.mark.spark
def test_register_and_the_write_side_names_what_is_missing(spark, tmp_path: Path) -> None:
    pyspark_kafkalog.register(spark)  # harmless where auto-registration already happened
    assert pyspark_kafkalog.DefaultSource.name() == "kafkalog"
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match=r"no topic: add a \"topic\" column"):
        df.write.format("kafkalog").mode("append").save(str(tmp_path / "out"))
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        df.write.format("kafkalog").option("topic", "t").save(str(tmp_path / "out"))


@pytest.mark.spark
def test_unknown_option_fails_the_query_naming_it(spark, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="(?i)unknown option 'startingoffset'"):
        spark.read.format("kafkalog").option("subscribe", "a").option(
            "startingOffset", "earliest"
        ).load(str(tmp_path)).collect()
