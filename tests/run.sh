#!/usr/bin/env bash
# The test command (README and .ci/run both call exactly this). Installs on first use.
set -euo pipefail
. "$(cd "$(dirname "$0")/.." && pwd)/conf/venv.sh"
kafkalog_ensure_venv
kafkalog_check_java
kafkalog_ensure_packer  # the cluster tests pack the executors' environment
cd "$kafkalog_root"
# What the suite installs on first use, installed before it starts (a test run alone still
# installs what it needs): the Airflow DAG test's venv, and the JVM jars of tests/java/pom.xml.
kafkalog_ensure_airflow_venv >/dev/null ||
  echo "kafkalog: the Airflow venv could not be set up; the DAG test says why" >&2
"$kafkalog_venv/bin/python" -m tests.jvm_deps
export PYSPARK_PYTHON="$kafkalog_venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$kafkalog_venv/bin/python"
# The tests start many short-lived, small JVMs (local Spark, spark-submit, the standalone cluster's
# daemons and executors): the optimizing compiler and parallel GC threads cost them more CPU than
# they save on 2 cores. Only the tests set this (spark-submit.sh leaves a user's JVMs alone).
export SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}"
export KAFKALOG_REQUIRE_NATIVE=1  # the install must have built the C encoder loops
"$kafkalog_venv/bin/ruff" check kafkalog_core jobs tests bench pyspark_kafkalog
"$kafkalog_venv/bin/ruff" format --check --quiet kafkalog_core jobs tests bench pyspark_kafkalog
# Two workers, whole files each (module fixtures such as the cluster and the Airflow venv are made
# once): much of the suite waits on JVM start-ups. Files go out in collection order, the longest
# first (tests/conftest.py). KAFKALOG_TEST_WORKERS=0 runs in this process.
exec "$kafkalog_venv/bin/python" -m pytest -n "${KAFKALOG_TEST_WORKERS:-2}" --dist loadfile \
  --no-loadscope-reorder "$@"
