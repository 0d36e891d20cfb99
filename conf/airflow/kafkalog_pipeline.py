"""Airflow DAG: ingest -> changelog ingest -> compact -> retention (dry run, then --apply) ->
verify indexes -> compaction audit. compact cleans the compacted topics only and leaves the
others alone.

Copy (or symlink) this file into your DAGs folder; set KAFKALOG_HOME to the repo checkout if the
file does not live in it. Every task is a SparkSubmitOperator running one kafkalog job with
arguments from `jobs.maintenance.schedule` (unit-tested there): run ids derived from Airflow's
run id (a retry is harmless) and `--now` = the data interval's end (a retry decides the same).

Settings come from Airflow Variables (defaults in brackets):
  kafkalog_ingest_config  [<repo>/conf/ingest-changelog.yaml]
  kafkalog_log_dir        [/data/kafka-logs]
  kafkalog_report_root    [/data/kafkalog-reports]
  kafkalog_topic_config   [none]
  kafkalog_assume_defaults [false]: "true" lets retention --apply delete by Kafka's defaults in
                           topics no --topic-config, broker metadata or ingest run names
  kafkalog_changelog_config [none]: a config with `source.changes: cdf` (as
                           conf/ingest-changelog.yaml): the `ingest_changelog` task then ingests
                           the Delta table's changes since the last run, as upserts and tombstones
  kafkalog_spark_remote   [none]: a Spark Connect server (sc://host:15002): every task then
                           runs its job as that server's client (`spark-submit.sh JOB --remote
                           URL`: no spark-submit, no JVM on the Airflow worker; docs/cluster.md,
                           "Spark Connect")
and, without kafkalog_spark_remote, the Spark connection `spark_default` (e.g. master local[2],
or your cluster).
"""

from __future__ import annotations

import os
import shlex
import sys
from datetime import datetime
from pathlib import Path

from airflow.models import Variable
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG

REPO = Path(os.environ.get("KAFKALOG_HOME", Path(__file__).resolve().parents[2]))
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from jobs.maintenance.schedule import (  # noqa: E402 - needs the repo on sys.path first
    AIRFLOW_NOW,
    AIRFLOW_RUN_ID,
    PipelineSettings,
    pipeline,
)


def _settings() -> PipelineSettings:
    return PipelineSettings(
        ingest_config=Variable.get(
            "kafkalog_ingest_config", str(REPO / "conf" / "ingest-changelog.yaml")
        ),
        log_dir=Variable.get("kafkalog_log_dir", "/data/kafka-logs"),
        report_root=Variable.get("kafkalog_report_root", "/data/kafkalog-reports"),
        topic_config=Variable.get("kafkalog_topic_config", None) or None,
        assume_defaults=Variable.get("kafkalog_assume_defaults", "false").lower() == "true",
        changelog_config=Variable.get("kafkalog_changelog_config", None) or None,
    )


with DAG(
    dag_id="kafkalog_pipeline",
    description="Ingest into a Kafka log dir, then keep it healthy",
    schedule="@daily",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,  # the jobs share the log dir's run lock anyway
    default_args={"retries": 1},
    tags=["kafkalog"],
) as dag:
    previous = None
    env = {
        "PYTHONPATH": str(REPO),
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "SPARK_CONF_DIR": str(REPO / "conf"),
    }
    remote = Variable.get("kafkalog_spark_remote", None) or None
    for task_id, (job_file, args) in pipeline(_settings(), AIRFLOW_RUN_ID, AIRFLOW_NOW).items():
        if remote is not None:  # a Spark Connect client: the job in the repo's venv, no JVM
            from airflow.providers.standard.operators.bash import BashOperator

            words = [str(REPO / "spark-submit.sh"), str(REPO / "jobs" / job_file)]
            words += ["--remote", remote, *args]
            task = BashOperator(
                task_id=task_id,
                bash_command=" ".join(shlex.quote(w) for w in words),
                env=env,
                append_env=True,
            )
        else:
            task = SparkSubmitOperator(
                task_id=task_id,
                application=str(REPO / "jobs" / job_file),
                application_args=list(args),
                conn_id="spark_default",
                env_vars=env,
                name=f"kafkalog-{task_id}",
            )
        if previous is not None:
            previous >> task
        previous = task
