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
# (PYSPARK_PYTHON). For any other master (spark://, yarn, k8s://) executors get:
# - kafkalog's Python code as --py-files (a zip of kafkalog_core, jobs, pyspark_kafkalog, made
#   fresh on every submit), and
# - a packed environment (--archives build/packed-env/kafkalog-env-HASH.tar.gz#env,
#   spark.pyspark.python=./env/bin/python): the venv's numpy, pyarrow, codecs and the compiled
#   C loops, built by jobs/spark/packed_env.py once per change of its inputs (cached by hash).
#   In client deploy mode the driver keeps the venv's python (spark.pyspark.driver.python).
#   KAFKALOG_PACKED_ENV=0 ships only the zip (the fallback: the nodes must have the packages,
#   and executors use the numpy path: same bytes, slower); KAFKALOG_PACKED_ENV=URI ships a
#   prebuilt archive (e.g. one uploaded to HDFS). A spark.pyspark.python of your own wins.
# See docs/cluster.md for YARN and Kubernetes.
#
# --remote sc://HOST:15002 (anywhere on the line, or SPARK_REMOTE in the environment) runs the
# job as a Spark Connect client of that server: plain Python, no local JVM, no spark-submit;
# the server's Python workers must import kafkalog (docs/cluster.md, "Spark Connect").
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

usage() {
  cat <<EOF
usage: ./spark-submit.sh [spark-submit options] JOB [job arguments]

JOB     a job file (jobs/ingest.py) or name (ingest = jobs/ingest.py)
jobs:   $(available_jobs)

spark-submit options before JOB are passed through (--master, --conf k=v, --packages, ...).
--remote sc://HOST:PORT (or SPARK_REMOTE): run JOB as a Spark Connect client of that server.
Environment: SPARK_CONF_DIR (default conf/), KAFKALOG_VENV, KAFKALOG_PYTHON,
             KAFKALOG_PY_FILES=1 (ship kafkalog as --py-files even on a local master),
             KAFKALOG_PACKED_ENV=0|URI (non-local masters: no packed environment for the
             executors, or a prebuilt one; default: build it, see docs/cluster.md).
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
deploy_mode=""
py_files=""   # the user's --py-files / --archives: merged with ours (spark-submit keeps the last)
archives=""
own_python=0  # the user set spark.pyspark.python: they ship their own environment
connect="${SPARK_REMOTE:-}"  # a Spark Connect server's URL: run as its client
job=""

# One spark-submit option and its value: remembered where it matters, passed through otherwise.
take_option() {
  case "$1" in
    --master) master="$2" ;;
    --deploy-mode) deploy_mode="$2" ;;
    --remote) connect="$2" && return ;;
    --py-files) py_files="$2" && return ;;
    --archives) archives="$2" && return ;;
    --conf | -c) case "$2" in spark.pyspark.python=*) own_python=1 ;; esac ;;
  esac
  spark_args+=("$1" "$2")
}

while [ "$#" -gt 0 ]; do
  case "$1" in
    -h | --help)
      usage
      exit 0
      ;;
    --*=*)
      take_option "${1%%=*}" "${1#*=}"
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
        take_option "$1" "$2"
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

# --remote after JOB too (./spark-submit.sh ingest --remote sc://host:15002 --config ...).
job_args=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --remote=*) connect="${1#*=}" && shift ;;
    --remote)
      if [ "$#" -lt 2 ]; then
        echo "kafkalog: --remote needs a Spark Connect URL (sc://host:15002)" >&2
        exit 2
      fi
      connect="$2" && shift 2
      ;;
    *) job_args+=("$1") && shift ;;
  esac
done
set -- ${job_args[@]+"${job_args[@]}"}

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

if [ -n "$connect" ]; then  # a Spark Connect client: the job in this venv's Python, no JVM here
  if [ "${#spark_args[@]}" -gt 0 ]; then
    echo "kafkalog: spark-submit options (${spark_args[*]}) do not apply to a Spark Connect client; the server has its own settings" >&2
    exit 2
  fi
  export SPARK_REMOTE="$connect"
  export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
  cd "$root"
  exec "$kafkalog_venv/bin/python" "$job_file" "$@"
fi
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
remote=0
case "${master:-local}" in
  local*) ship="${KAFKALOG_PY_FILES:-0}" ;;
  *) ship=1 remote=1 ;;
esac
if [ "$ship" = "1" ]; then
  zip_path="$root/build/kafkalog-pyfiles.zip"
  mkdir -p "$root/build"
  "$kafkalog_venv/bin/python" - "$root" "$zip_path" <<'PY'
import os, sys, tempfile, zipfile
root, out = sys.argv[1], sys.argv[2]
fd, tmp = tempfile.mkstemp(dir=os.path.dirname(out), suffix=".tmp")
os.close(fd)
with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
    for package in ("kafkalog_core", "jobs", "pyspark_kafkalog"):
        for folder, dirs, files in os.walk(os.path.join(root, package)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".typed")):
                    path = os.path.join(folder, name)
                    zf.write(path, os.path.relpath(path, root))
os.replace(tmp, out)
PY
  py_files="${py_files:+$py_files,}$zip_path"
fi

# Non-local masters: the executors' Python is the packed environment (jobs/spark/packed_env.py).
packed="${KAFKALOG_PACKED_ENV:-1}"
if [ "$remote" = "1" ] && [ "$packed" != "0" ] && [ "$own_python" = "0" ]; then
  if [ "$packed" = "1" ]; then
    kafkalog_ensure_packer
    packed="$("$kafkalog_venv/bin/python" -m jobs.spark.packed_env)"
  fi
  archives="${archives:+$archives,}$packed#env"
  spark_args+=(--conf spark.pyspark.python=./env/bin/python)
  if [ "$deploy_mode" != "cluster" ]; then  # client mode: the driver runs here, on the venv
    spark_args+=(--conf "spark.pyspark.driver.python=$PYSPARK_DRIVER_PYTHON")
  fi
fi
if [ -n "$py_files" ]; then spark_args+=(--py-files "$py_files"); fi
if [ -n "$archives" ]; then spark_args+=(--archives "$archives"); fi

cd "$root"
exec "$submit" ${spark_args[@]+"${spark_args[@]}"} "$job_file" "$@"
