"""README and docs/*.md must not lie: their code blocks run as written, and their commands,
jobs, flags and files exist.

Every fenced block says what it is. `bash`, `python` and `yaml` blocks run here unless the line
before the fence says `<!-- not run: REASON -->` with a reason from `REASONS`, whose check the
block must pass (a broker, a cluster, a benchmark of minutes, example paths, part of a config).
Unlabelled and `text` blocks are pictures and output, never commands.

The blocks run in this process on the tests' SparkSession, against a copy of the demo's output
(the `demo_run` fixture): the docs' examples use the demo's log dir `demo-output/`, its source
tables in `.demo-output.kafkalog/` and the scratch names in `SCRATCH`, which are rooted in the
test's temporary directory. `./spark-submit.sh JOB ARGS` runs as `jobs.<JOB>.main(ARGS)` (what
spark-submit.sh runs; tests/jobs/test_spark_submit.py and test_demo.py run the script itself),
`.venv/bin/kafkalog ARGS` as the console script's `main(ARGS)`; each must exit 0.

docs/broker.md is one procedure against a cluster: its blocks run in order on a live
three-broker cluster (tests/kafka_cluster.py), its example host, paths and files mapped to the
cluster's and the test's, and Kafka's `kafka-*.sh` scripts run as the Java main classes they
start (`KAFKA_TOOLS`), from the broker jars.
"""

from __future__ import annotations

import importlib
import json
import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kafkalog_core.log.checkpoints import OffsetCheckpointFile
from kafkalog_core.tools import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 120

# Relative names the docs' runnable examples read or write: rooted in each test's tmp dir.
SCRATCH = (".demo-output.kafkalog", "demo-output", "my-logs", "copy-logs", "audit.html")
_SCRATCH = re.compile(r"(?<![\w./-])(?:" + "|".join(re.escape(n) for n in SCRATCH) + r")(?![\w-])")
_MARKER = re.compile(r"\s*<!-- not run: (?P<reason>.+?) -->\s*")
_FENCE = re.compile(r"(?P<indent>\s*)```(?P<language>\S*)\s*")
_EXAMPLE_PATH = re.compile(r"(?<![\w.])/(?:data|mnt|var|etc|opt)/[\w./-]+")
CONFIG_SECTIONS = {"run_id", "source", "output", "topics", "topic_defaults", "mapping", "ordering"}


@dataclass(frozen=True)
class Block:
    """One fenced block of a doc: where it is, its language, its text, why it is not run."""

    doc: str
    line: int
    language: str
    text: str
    not_run: str | None

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


def doc_blocks(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = _FENCE.fullmatch(lines[i])
        if fence is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        indent = len(fence["indent"])
        text = "\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n"
        before = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marker = _MARKER.fullmatch(before)
        doc = path.relative_to(ROOT).as_posix()
        blocks.append(Block(doc, i + 1, fence["language"], text, marker and marker["reason"]))
        i = end + 1
    return blocks


BLOCKS = [block for path in DOCS for block in doc_blocks(path)]
# docs/broker.md's blocks are one procedure against a live cluster: they run in order, in
# test_broker_doc_runs_against_a_live_cluster, not one by one on the demo's output.
BROKER_DOC = "docs/broker.md"
RUNNABLE = [
    b
    for b in BLOCKS
    if b.language in ("bash", "python", "yaml") and not b.not_run and b.doc != BROKER_DOC
]


def commands(text: str) -> list[list[str]]:
    """The block's shell commands as argument lists: continuations joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    found = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if "|" in words:  # `... | head`: the command is what feeds the pipe
            words = words[: words.index("|")]
        if words:
            found.append(words)
    return found


def _spark_submit_job(words: list[str]) -> tuple[str, list[str]]:
    """(job, its arguments) of `./spark-submit.sh [--option value ...] JOB ARGS`."""
    rest = words[1:]
    while rest and rest[0].startswith("--"):
        rest = rest[2:]
    return rest[0], rest[1:]


def _job_module(job: str) -> str:
    """spark-submit.sh's rule: `rebuild-index` -> jobs/rebuild_index.py; a file as given."""
    if job.endswith(".py"):
        return job[: -len(".py")].replace("/", ".")
    return "jobs." + job.replace("-", "_")


def _bench_commands_exist(block: Block) -> bool:
    """Each command runs a bench/ script that takes every flag the command gives it."""
    for words in commands(block.text):
        if words[:1] != [".venv/bin/python"] or not words[1].startswith("bench/"):
            return False
        source = (ROOT / words[1]).read_text()
        if any(f'"{w.split("=")[0]}"' not in source for w in words[2:] if w.startswith("--")):
            return False
    return True


def _is_config_part(block: Block) -> bool:
    part = yaml.safe_load(block.text)
    return isinstance(part, dict) and set(part) <= CONFIG_SECTIONS


REASONS: dict[str, Callable[[Block], bool]] = {
    "needs a Kafka broker": lambda b: re.search(r"(?m)^\s*kafka-[\w-]+", b.text) is not None,
    "needs a Spark Connect server": lambda b: (
        re.search(r"(--remote\s+|SPARK_REMOTE=)sc://", b.text) is not None
    ),
    "needs a Spark cluster": lambda b: (
        re.search(r"--master\s+(yarn|k8s://|spark://)", b.text) is not None
    ),
    "runs a benchmark for minutes": _bench_commands_exist,
    "uses example paths": lambda b: any(
        not Path(p).exists() for p in _EXAMPLE_PATH.findall(b.text)
    ),
    "is part of an ingest config": _is_config_part,
}


# ---- the README as a front page ----------------------------------------------------------------


def test_readme_opens_with_the_demo_and_the_test_command():
    text = README.read_text()
    first = next(b for b in BLOCKS if b.doc == "README.md")
    assert commands(first.text) == [["./spark-submit.sh", "demo"], ["tests/run.sh"]]
    assert text.index("./spark-submit.sh demo") < text.index("## ")


def test_readme_is_a_front_page_linking_one_page_per_part():
    text = README.read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)\)", text))
    pages = {p.relative_to(ROOT).as_posix() for p in DOCS[1:]}
    assert linked == pages
    for part in ("ingest", "maintenance", "datasource", "cluster", "broker", "benchmarks"):
        assert f"docs/{part}.md" in pages


def test_ci_runs_exactly_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "tests/run.sh" in ci
    assert (ROOT / "tests" / "run.sh").stat().st_mode & 0o111
    assert (ROOT / "spark-submit.sh").stat().st_mode & 0o111


# ---- what every doc names exists -------------------------------------------------------------


def test_every_block_says_what_it_is():
    assert RUNNABLE
    for block in BLOCKS:
        assert block.language in ("bash", "python", "yaml", "text", ""), block
        if block.not_run is not None:
            assert block.not_run in REASONS, f"{block}: unknown reason {block.not_run!r}"
            assert REASONS[block.not_run](block), f"{block}: not true: {block.not_run}"
        if block.language in ("text", ""):
            code = re.search(
                r"(?m)^\s*(\./spark-submit\.sh|\.venv/bin/|from \w|import )", block.text
            )
            assert code is None, f"{block}: a command in a block marked as text"


def test_every_spark_submit_job_named_in_the_docs_exists():
    jobs = set()
    for block in BLOCKS:
        if block.language == "bash":
            jobs |= {
                _spark_submit_job(w)[0] for w in commands(block.text) if w[0] == "./spark-submit.sh"
            }
    assert {"demo", "ingest", "jobs/ingest.py", "retention", "rebuild-index"} <= jobs
    for job in jobs:
        path = ROOT / (_job_module(job).replace(".", "/") + ".py")
        assert path.is_file(), job


def test_every_kafkalog_example_parses_with_the_real_cli():
    parser = cli.build_parser()
    examples = [
        w[1:]
        for block in BLOCKS
        if block.language == "bash"
        for w in commands(block.text)
        if w[0] == ".venv/bin/kafkalog"
    ]
    assert len(examples) >= 3
    required = {"dump-log": ("files",), "check-logdir": ("dir",), "place": ("log_dirs", "topics")}
    for argv in examples:
        args = parser.parse_args(argv)
        assert all(getattr(args, name) for name in required[args.command]), argv


def test_every_repo_file_the_docs_name_exists():
    ignored = {line for line in (ROOT / ".gitignore").read_text().splitlines() if "/" in line}
    for path in DOCS:
        text = path.read_text()
        named = re.findall(
            r"`((?:conf|jobs|kafkalog_core|notebooks|docs|tests|bench|pyspark_kafkalog)/[^`\s]*)`",
            text,
        )
        named += re.findall(r"\]\(((?!https?:)[^)#]+)\)", text)  # relative links
        for name in set(named) - ignored:  # an ignored dir (bench/out/) is an output
            # `_native*.so`: the built files; `jobs/spark/sources`: a module named by its path
            found = [*ROOT.glob(name), *path.parent.glob(name), *ROOT.glob(name + ".py")]
            assert found, f"{path}: {name}"


# ---- the runnable blocks run -----------------------------------------------------------------


@pytest.fixture
def scratch(demo_run, tmp_path, monkeypatch) -> Path:
    """A copy of the demo's output and meta area; the examples run from the repo root."""
    shutil.copytree(demo_run[2].parent, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(ROOT)
    return tmp_path


def _rooted(text: str, scratch: Path) -> str:
    return _SCRATCH.sub(lambda m: f"{scratch}/{m[0]}", text)


def _exit_code(main: Callable[[list[str]], int], argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exit_:  # --help
        return exit_.code if isinstance(exit_.code, int) else 1


def _run_command(words: list[str], demo_output: Path) -> None:
    program, argv = words[0], words[1:]
    if program == "./spark-submit.sh":
        job, argv = _spark_submit_job(words)
        assert len(words) - len(argv) == 2, f"spark-submit options in a runnable block: {words}"
        if job == "demo":  # the demo_run fixture ran it: its output is this test's starting point
            assert argv == [] and (demo_output / "customers-0").is_dir()
            return
        main = importlib.import_module(_job_module(job)).main
        assert _exit_code(main, argv) == 0, words
    elif program == ".venv/bin/kafkalog":
        assert cli.main(argv) == 0, words
    elif program == "ls":
        assert argv and all(Path(a).exists() for a in argv), words
    elif program == "tests/run.sh":  # this very suite; .ci/run runs it
        assert "tests/run.sh" in (ROOT / ".ci" / "run").read_text()
    else:
        pytest.fail(f"no way to run {program!r}: teach this test, or mark the block not run")


@pytest.mark.spark
@pytest.mark.parametrize("block", RUNNABLE, ids=str)
def test_docs_code_runs(block: Block, spark, scratch: Path) -> None:
    text = _rooted(block.text, scratch)
    if block.language == "yaml":
        from jobs.ingestion.config.ingest_config import IngestConfig

        assert IngestConfig.from_dict(yaml.safe_load(text)).topics
    elif block.language == "python":
        code = compile(text, str(block), "exec")
        exec(code, {"spark": spark, "__name__": "__docs__"})  # noqa: S102
    else:
        for words in commands(text):
            _run_command(words, scratch / "demo-output")


# ---- docs/broker.md against a live cluster -------------------------------------------------------

# Kafka's command-line scripts, as the Java main classes they run (the broker jars of
# tests/java/pom.xml): the scripts themselves are not on the test machine's PATH.
KAFKA_TOOLS = {
    "kafka-topics.sh": "org.apache.kafka.tools.TopicCommand",
    "kafka-get-offsets.sh": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-console-consumer.sh": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-reassign-partitions.sh": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
}
BROKER_TOPIC = "customers"


def _broker_doc_names(cluster, scratch: Path) -> dict[str, str]:
    """docs/broker.md's example host, paths and files -> the live cluster's and the test's."""
    node = cluster.nodes[1]
    return {
        "broker1:9092": f"127.0.0.1:{node.port}",
        "/data/staging-logs": str(scratch / "staging-logs"),
        "/var/lib/kafka/data": str(node.log_dirs[0]),
        "/etc/kafka/server.properties": str(node.config_file),
        "cluster-customers.properties": str(scratch / "cluster-customers.properties"),
        "rf3.json": str(scratch / "rf3.json"),
    }


def _run_broker_command(words: list[str], cluster, scratch: Path) -> str:
    """One command of docs/broker.md on broker 1 of `cluster`; its output."""
    from tests.kafka_cluster import run_kafka_tool

    program, argv = words[0], words[1:]
    node = cluster.nodes[1]
    if program in KAFKA_TOOLS:
        return run_kafka_tool(KAFKA_TOOLS[program], *argv, log_dir=node.dir / "logs")
    if program == "kafka-server-stop.sh":
        cluster.stop_node(1)
    elif program == "kafka-server-start.sh":
        assert argv == ["-daemon", str(node.config_file)], words
        cluster.start_node(1)
    elif program == "grep":
        pattern, path = argv
        found = [line for line in Path(path).read_text().splitlines() if re.match(pattern, line)]
        assert found, words
        return "\n".join(found)
    else:
        _run_command(words, scratch / "demo-output")
    return ""


def test_broker_doc_runs_against_a_live_cluster(kafka_cluster3, spark, scratch: Path) -> None:
    """Every block of docs/broker.md, in order, on a live three-broker cluster: the topic
    created on broker 1, ingested, placed while broker 1 is stopped, consumed, reassigned to
    three replicas."""
    from tests.live.records import consume_all
    from tests.live.test_kafka_cluster3 import wait_for

    cluster = kafka_cluster3
    blocks = [b for b in BLOCKS if b.doc == BROKER_DOC]
    assert blocks and all(b.language == "bash" and not b.not_run for b in blocks), blocks
    names = _broker_doc_names(cluster, scratch)
    Path(names["cluster-customers.properties"]).write_text(
        "cleanup.policy=compact\nretention.ms=-1\nretention.bytes=-1\n"
    )
    partitions = [{"topic": BROKER_TOPIC, "partition": p, "replicas": [1, 2, 3]} for p in range(6)]
    Path(names["rf3.json"]).write_text(json.dumps({"version": 1, "partitions": partitions}))
    outputs = []
    for block in blocks:
        text = _rooted(block.text, scratch)
        for example, live in names.items():
            text = text.replace(example, live)
        for words in commands(text):
            outputs.append(_run_broker_command(words, cluster, scratch))
    staging = Path(names["/data/staging-logs"])
    ends = OffsetCheckpointFile(staging / "replication-offset-checkpoint").read()
    ends = {p: end for (topic, p), end in ends.items() if topic == BROKER_TOPIC}
    assert len(ends) == 6 and sum(ends.values()) > 0
    offsets = {f"{BROKER_TOPIC}:{p}:{end}" for p, end in ends.items()}  # kafka-get-offsets.sh
    assert offsets <= set("\n".join(outputs).split())

    def isr_of_3() -> bool:
        topics = cluster.admin().list_topics(BROKER_TOPIC, timeout=10).topics
        parts = topics[BROKER_TOPIC].partitions.values()
        return len(parts) == 6 and all(sorted(p.isrs) == [1, 2, 3] for p in parts)

    wait_for(isr_of_3, "ISR of 3 after the reassignment")
    for p, end in ends.items():  # every record, from the leader broker 1 and its followers
        served = consume_all(cluster, BROKER_TOPIC, p)
        assert (served[-1][0] + 1 if served else 0) == end, p
