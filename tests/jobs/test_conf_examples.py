"""The shipped example configs (conf/*.yaml): each loads, says at its top what it needs, and a
run without what it needs stops with one line and leaves nothing behind (no empty log dir, no
run lock)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.ingest import run
from jobs.ingestion.config.ingest_config import load_ingest_config
from kafkalog_core.errors import KafkaLogError
from kafkalog_core.root.meta_area import meta_root

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "conf").glob("*.yaml"))


def _header(path: Path) -> str:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines)


def test_conf_ships_examples() -> None:
    assert [p.name for p in CONFIGS] == [
        "ingest-avro.yaml",
        "ingest-changelog.yaml",
        "ingest-events.yaml",
    ]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_each_example_loads_and_says_what_it_needs(path: Path) -> None:
    config = load_ingest_config(path)
    header = _header(path)
    assert header.startswith("# Needs: "), f"{path.name} must start with what it needs"
    assert config.source.path and config.source.path in header


@pytest.mark.spark
@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_an_example_without_its_source_leaves_nothing(
    spark, tmp_path: Path, monkeypatch, path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_ingest_config(path)
    with pytest.raises(KafkaLogError) as failed:
        run(spark, config, run_id="example-1", out=lambda _: None)
    assert config.source.path in str(failed.value) and "\n" not in str(failed.value)
    output = Path(config.output_root).absolute()
    assert not output.exists() and not meta_root(output).exists()
    assert list(tmp_path.iterdir()) == []
