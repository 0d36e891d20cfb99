"""The README must not lie: its commands, job names, files and flags exist as written."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from kafkalog_core.tools.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _code_blocks(language: str = "bash") -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, re.S)


def _commands(block: str) -> list[str]:
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [line for line in lines if line]


def test_readme_opens_with_the_demo_and_the_test_command():
    first = _commands(_code_blocks()[0])
    assert first == ["./spark-submit.sh demo", "tests/run.sh"]
    assert README.index("./spark-submit.sh demo") < README.index("## ")


def test_ci_runs_exactly_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "tests/run.sh" in ci
    assert (ROOT / "tests" / "run.sh").stat().st_mode & 0o111
    assert (ROOT / "spark-submit.sh").stat().st_mode & 0o111


def test_every_spark_submit_job_named_in_the_readme_exists():
    jobs = set()
    for block in _code_blocks():
        for command in _commands(block):
            words = shlex.split(command)
            if words[0] == "./spark-submit.sh":
                jobs.add(words[1])
    assert {"demo", "ingest", "jobs/ingest.py", "retention", "rebuild-index"} <= jobs
    for job in jobs:
        module = job.replace("-", "_")  # spark-submit.sh: rebuild-index -> jobs/rebuild_index.py
        path = ROOT / job if job.endswith(".py") else ROOT / "jobs" / f"{module}.py"
        assert path.is_file(), job


def test_every_repo_file_the_readme_names_exists():
    named = set(
        re.findall(r"`((?:conf|jobs|kafkalog_core|notebooks|docs|tests|bench)/[^`\s]*)`", README)
    )
    assert "conf/ingest-changelog.yaml" in named
    for name in named:
        assert (ROOT / name).exists(), name


def test_every_kafkalog_example_parses_with_the_real_cli():
    parser = build_parser()
    examples = [
        shlex.split(c)[1:]
        for block in _code_blocks()
        for c in _commands(block)
        if c.startswith(".venv/bin/kafkalog ")
    ]
    assert len(examples) >= 3
    for argv in examples:
        argv = ["x.log" if a == "..." else a for a in argv]  # the README's elided file list
        args = parser.parse_args(argv)
        assert args.files if args.command == "dump-log" else args.dir


def test_every_yaml_example_is_a_valid_ingest_config():
    """The data-source section shows an ingest config beside the same df.write: it must load."""
    import yaml

    from jobs.ingestion.config.ingest_config import IngestConfig

    blocks = _code_blocks("yaml")
    assert blocks
    for block in blocks:
        config = IngestConfig.from_dict(yaml.safe_load(block))
        assert config.topics
