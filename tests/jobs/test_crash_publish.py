"""Crash at every step of a publish: what readers see, and what recovery converges to.

One incremental run is staged once (a continued last segment, a rolled segment, a second range,
a brand-new partition, a discarded speculative attempt). For every file-system step of its
publish we restore that staged state, crash right before the step (an exception from the hook,
and for a few steps a real `os._exit` in a subprocess), then check:

(a) every segment file at its final name holds exactly the old or the new bytes, and Kafka's
    loader (§6 passes 1-3, simulated) resolves every partition dir to exactly the old or the new
    set of complete segments;
(b) `recover_interrupted_publish` ends with bytes identical to an uninterrupted publish and one
    committed history record; and if a broker loaded the dir before our recovery, recovery still
    ends in a consistent state (completed, or cleanly rolled back).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.ingestion.commit.plan import PublishPlan, plan_publish
from jobs.ingestion.commit.publish import publish, recover_interrupted_publish
from jobs.ingestion.commit.state import scan_existing_state
from jobs.ingestion.run.history import IngestHistory
from jobs.ingestion.run.meta import PublishError
from jobs.ingestion.staging.task_staging import staging_root
from kafkalog_core.root.meta_area import publish_journal_path
from tests.jobs.commit_helpers import (
    copy_tree,
    kafka_temp_file_passes,
    segments_only,
    stage_range,
    visible,
)

REPO = Path(__file__).resolve().parents[2]


class Crash(Exception):
    pass


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    base = tmp_path_factory.mktemp("crash")
    work = base / "work"
    root = work / "logs"
    r1 = [
        stage_range(root, "r1", "orders", 0, 0, 0, [3, 4]),
        stage_range(root, "r1", "orders", 1, 0, 0, [2]),
    ]
    publish(plan_publish(r1, {}, output_root=root, run_id="r1"))
    old = visible(root)
    state = scan_existing_state(root)
    r2 = [
        stage_range(root, "r2", "orders", 0, 0, 7, [2, 3], continue_segment=3, leader_epoch=1),
        stage_range(root, "r2", "orders", 0, 1, 12, [4]),
        stage_range(root, "r2", "orders", 1, 0, 2, [3], attempt=1),
        stage_range(root, "r2", "orders", 1, 0, 2, [3], attempt=4),  # speculative, discarded
        stage_range(root, "r2", "clicks", 0, 0, 0, [2, 2]),
    ]
    plan = plan_publish(
        r2, state, output_root=root, run_id="r2", topic_ids={"clicks": "AQEBAQEBAQEBAQEBAQEBAQ"}
    )
    (base / "plan.json").write_text(plan.to_json())
    template = base / "template"
    copy_tree(work, template)

    steps: list[str] = []
    publish(plan, hook=steps.append)
    new = visible(root)
    copy_tree(template, work)
    return {
        "base": base,
        "work": work,
        "root": root,
        "template": template,
        "plan": plan,
        "old": old,
        "new": new,
        "steps": steps,
    }


def _restore(s) -> None:
    copy_tree(s["template"], s["work"])


def _crash_at(s, step: str) -> None:
    def hook(current: str) -> None:
        if current == step:
            raise Crash(step)

    with pytest.raises(Crash):
        publish(s["plan"], hook=hook)


def _check_readers_see_old_or_new(s, step: str) -> None:
    old, new = s["old"], s["new"]
    now = visible(s["root"])
    for d, files in now.items():
        if d == ".":
            continue
        for name, data in segments_only(files).items():
            versions = [v[d][name] for v in (old, new) if d in v and name in v[d]]
            assert data in versions, f"crash before {step}: {d}/{name} is neither old nor new"
        seen = segments_only(kafka_temp_file_passes(files))
        candidates = [segments_only(v[d]) for v in (old, new) if d in v]
        assert seen in candidates, f"crash before {step}: Kafka would load {d} as {sorted(seen)}"
    for d in set(old) - {"."}:
        assert d in now, f"crash before {step}: partition dir {d} vanished"


def _check_recovered(s, step: str) -> None:
    outcome = recover_interrupted_publish(s["root"])
    if outcome is None:  # crashed before the journal: nothing moved, the next run publishes
        assert visible(s["root"]) == s["old"], step
        publish(s["plan"])
    else:
        assert outcome == "completed", step
    assert visible(s["root"]) == s["new"], f"crash before {step}: recovery differs"
    assert not publish_journal_path(s["root"]).exists()
    assert not staging_root(s["root"], "r2").exists()
    history = IngestHistory(s["root"]).read().to_pylist()
    assert [r["run_id"] for r in history if r["status"] == "committed"] == ["r1", "r2"], step
    assert recover_interrupted_publish(s["root"]) is None


def test_every_step_is_listed(scenario) -> None:
    steps = scenario["steps"]
    assert steps[0] == "journal" and steps[-2:] == ["history", "cleanup"]
    kinds = {step.split(":")[0] for step in steps}
    assert {"cleaned", "swap", "final", "rename-dir", "metadata", "checkpoint"} <= kinds
    assert len(steps) == len(set(steps))
    # Kafka's order: .cleaned -> .swap in descending offsets, .log first when going final.
    swaps = [int(st.split("/")[-1][:20]) for st in steps if st.startswith("swap:orders-0/")]
    assert swaps == sorted(swaps, reverse=True) and len(set(swaps)) == 3
    finals = [st.split("/")[-1] for st in steps if st.startswith("final:orders-0/")]
    assert finals[0].endswith(".log")


def test_crash_before_each_step_then_recover(scenario) -> None:
    for step in scenario["steps"]:
        _restore(scenario)
        _crash_at(scenario, step)
        _check_readers_see_old_or_new(scenario, step)
        _check_recovered(scenario, step)


def test_broker_loading_before_recovery_still_ends_consistent(scenario) -> None:
    root = scenario["root"]
    for step in scenario["steps"]:
        _restore(scenario)
        _crash_at(scenario, step)
        for d in [p for p in root.iterdir() if p.is_dir()]:
            kept = kafka_temp_file_passes({p.name: p.read_bytes() for p in d.iterdir()})
            for p in d.iterdir():
                if p.name not in kept:
                    p.unlink()
            for name, data in kept.items():
                (d / name).write_bytes(data)
        try:
            outcome = recover_interrupted_publish(root)
        except PublishError as e:
            # The broker completed some partitions and rolled others back: refused loudly.
            assert "rolled it back" in str(e), step
            continue
        if outcome == "completed":
            assert visible(root) == scenario["new"], step
        elif outcome is None:
            assert visible(root) == scenario["old"], step  # crashed before the journal
        else:
            assert outcome == "rolled back", step
            now = visible(root)
            for d, files in scenario["old"].items():
                if d != ".":
                    assert segments_only(now[d]) == segments_only(files), step
            assert not publish_journal_path(root).exists()
            assert IngestHistory(root).find_run("r2") is None


_CHILD = """
import os, sys
from pathlib import Path
from jobs.ingestion.commit.plan import PublishPlan
from jobs.ingestion.commit.publish import publish
plan = PublishPlan.from_json(Path(sys.argv[1]).read_text())
target = sys.argv[2]
def hook(step):
    if step == target:
        os._exit(137)
publish(plan, hook=hook)
"""


def test_killed_process_at_chosen_steps_then_recover(scenario) -> None:
    steps = scenario["steps"]
    chosen = []
    for prefix in (
        "journal",
        "cleaned:",
        "swap:",
        "final:",
        "rename-dir:",
        "checkpoint:",
        "history",
    ):
        picks = [st for st in steps if st.startswith(prefix)]
        chosen.append(picks[len(picks) // 2])
    plan_file = scenario["base"] / "plan.json"
    assert PublishPlan.from_json(plan_file.read_text()) == scenario["plan"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for step in chosen:
        _restore(scenario)
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, str(plan_file), step],
            cwd=REPO,
            env=env,
            capture_output=True,
            timeout=120,
        )
        assert proc.returncode == 137, proc.stderr.decode()[-2000:]
        _check_readers_see_old_or_new(scenario, step)
        _check_recovered(scenario, step)
