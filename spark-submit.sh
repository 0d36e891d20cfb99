#!/usr/bin/env bash
# Run a kafkalog Spark job with the repo's environment.
#
#   ./spark-submit.sh [spark-submit options] JOB [job arguments]
#
#   JOB is a file (jobs/ingest.py) or a name (ingest -> jobs/ingest.py, rebuild-index ->
#   jobs/rebuild_index.py).
#   ./spark-submit.sh ingest --config conf/ingest-changelog.yaml --run-id r1
#   ./spark-submit.sh --master 'local[4]' --conf spark.driver.memory=4g demo
#
# First use creates .venv and installs the package (conf/venv.sh); Java 17+ is checked.
# Spark settings come from conf/spark-defaults.conf and logging from conf/log4j2.properties
# (SPARK_CONF_DIR defaults to conf/). Local masters run executors with the venv's python
# (PYSPARK_PYTHON). For any other master, kafkalog_core + jobs are zipped and shipped with
# --py-files; executors still need the third-party packages (numpy, pyarrow, crc32c, cramjam,
# lz4, zstandard, pyyaml): ship a packed venv with --archives and point
# spark.pyspark.python at it, or install them on the cluster nodes. A zip cannot carry the
# compiled C loops (kafkalog_core/_native): executors then use the numpy path (same bytes,
# slower) unless kafkalog itself is installed in that venv.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

usage() {
  cat <<EOF
usage: ./spark-submit.sh [spark-submit options] JOB [job arguments]

JOB     a job file (jobs/ingest.py) or name (ingest = jobs/ingest.py)
jobs:   $(available_jobs)

spark-submit options before JOB are passed through (--master, --conf k=v, --packages, ...).
Environment: SPARK_CONF_DIR (default conf/), KAFKALOG_VENV, KAFKALOG_PYTHON,
             KAFKALOG_PY_FILES=1 (ship kafkalog as --py-files even on a local master).
Run a job with --help for its own arguments.
EOF
}

available_jobs() {
  local names=() f
  for f in "$root"/jobs/*.py; do
    [ -e "$f" ] || continue
    f="$(basename "$f" .py)"
    case "$f" in __init__ | __main__ | _*) continue ;; esac
    names+=("${f//_/-}")
  done
  if [ "${#names[@]}" -eq 0 ]; then echo "(none yet)"; else echo "${names[*]}"; fi
}

# spark-submit options that take no value; every other --option takes one (or uses --opt=v).
flag_option() {
  case "$1" in
    --verbose | -v | --supervise | --kill | --status | --version) return 0 ;;
    *) return 1 ;;
  esac
}

spark_args=()
master=""
job=""
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h | --help)
      usage
      exit 0
      ;;
    --*=*)
      [ "${1%%=*}" = "--master" ] && master="${1#*=}"
      spark_args+=("$1")
      shift
      ;;
    -*)
      if flag_option "$1"; then
        spark_args+=("$1")
        shift
      else
        if [ "$#" -lt 2 ]; then
          echo "kafkalog: spark-submit option $1 needs a value" >&2
          exit 2
        fi
        [ "$1" = "--master" ] && master="$2"
        spark_args+=("$1" "$2")
        shift 2
      fi
      ;;
    *)
      job="$1"
      shift
      break
      ;;
  esac
done

if [ -z "$job" ]; then
  usage >&2
  exit 2
fi

# Resolve the job: an existing file, else a name under jobs/ (rebuild-index = jobs/rebuild_index.py).
module="${job//-/_}"
if [ -f "$job" ]; then
  job_file="$(cd "$(dirname "$job")" && pwd)/$(basename "$job")"
elif [ -f "$root/jobs/$module.py" ] && [[ "$job" != */* ]]; then
  job_file="$root/jobs/$module.py"
else
  echo "kafkalog: unknown job '$job' (not a file, and no jobs/$job.py); available: $(available_jobs)" >&2
  exit 2
fi

# shellcheck source=conf/venv.sh
. "$root/conf/venv.sh"
kafkalog_ensure_venv
kafkalog_check_java

export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$kafkalog_venv/bin/python}"
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$kafkalog_venv/bin/python}"
export SPARK_CONF_DIR="${SPARK_CONF_DIR:-$root/conf}"
# The driver imports jobs.* and kafkalog_core from the repo even if it is not pip-installed.
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"

submit="$kafkalog_venv/bin/spark-submit"
if [ ! -x "$submit" ]; then
  echo "kafkalog: $submit not found; is pyspark installed in $kafkalog_venv?" >&2
  exit 1
fi

# Non-local masters (or KAFKALOG_PY_FILES=1): ship our packages as a zip.
case "${master:-local}" in
  local*) ship="${KAFKALOG_PY_FILES:-0}" ;;
  *) ship=1 ;;
esac
if [ "$ship" = "1" ]; then
  zip_path="$root/build/kafkalog-pyfiles.zip"
  mkdir -p "$root/build"
  "$kafkalog_venv/bin/python" - "$root" "$zip_path" <<'PY'
import os, sys, zipfile
root, out = sys.argv[1], sys.argv[2]
tmp = out + ".tmp"
with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
    for package in ("kafkalog_core", "jobs"):
        for folder, dirs, files in os.walk(os.path.join(root, package)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".typed")):
                    path = os.path.join(folder, name)
                    zf.write(path, os.path.relpath(path, root))
os.replace(tmp, out)
PY
  spark_args+=(--py-files "$zip_path")
fi

cd "$root"
exec "$submit" ${spark_args[@]+"${spark_args[@]}"} "$job_file" "$@"
