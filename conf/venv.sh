# Sourced by spark-submit.sh and tests/run.sh: make sure .venv exists and matches pyproject.toml.
# Installs on first use (and again whenever pyproject.toml changes); a no-op afterwards.
# Needs only python3 (>= 3.10) on PATH. Set KAFKALOG_PYTHON to pick another interpreter.

kafkalog_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kafkalog_venv="${KAFKALOG_VENV:-$kafkalog_root/.venv}"

kafkalog_ensure_venv() {
  local py="${KAFKALOG_PYTHON:-python3}"
  if ! command -v "$py" >/dev/null 2>&1; then
    echo "kafkalog: $py not found; install Python 3.10+ first" >&2
    return 1
  fi
  local stamp="$kafkalog_venv/.kafkalog-installed"
  local want
  # pyproject.toml and the C sources and headers: a change to either reinstalls (rebuilds the extension)
  want="$(cat "$kafkalog_root/pyproject.toml" "$kafkalog_root"/kafkalog_core/*.[ch] | sha256sum | cut -c1-16)"
  if [ -x "$kafkalog_venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  echo "kafkalog: setting up $kafkalog_venv (first use; takes a few minutes)..." >&2
  if [ ! -x "$kafkalog_venv/bin/python" ]; then
    "$py" -m venv "$kafkalog_venv" || return 1
  fi
  kafkalog_quiet_pip "$kafkalog_venv/bin/python" install --upgrade pip || return 1
  kafkalog_quiet_pip "$kafkalog_venv/bin/python" install -e "$kafkalog_root[test]" || return 1
  kafkalog_path_repo || return 1
  echo "$want" >"$stamp"
}

# pip with its output kept in a log: setuptools' build prints warnings on every successful
# build of the extension (ext-modules "still *experimental*", the "Editable installation" box)
# that a user need not see. On failure the log is printed whole, so every error stays visible.
kafkalog_quiet_pip() {
  local python="$1" log status
  shift
  log="$(mktemp "${TMPDIR:-/tmp}/kafkalog-pip.XXXXXX")" || return 1
  "$python" -m pip "$@" -q >"$log" 2>&1
  status=$?
  if [ "$status" -ne 0 ]; then
    cat "$log" >&2
    echo "kafkalog: pip $* failed (exit $status); its output is above" >&2
  fi
  rm -f "$log"
  return "$status"
}

# The repo root on the venv's path (a .pth file), as spark-submit.sh's PYTHONPATH puts it: jobs,
# kafkalog_core and pyspark_kafkalog import from any directory, in a notebook kernel and in
# Spark's Python workers alike, and PySpark's data source discovery (pkgutil.iter_modules over
# sys.path) finds pyspark_kafkalog. setuptools' editable finder imports them too, but is
# invisible to that discovery.
kafkalog_path_repo() {
  local site
  site="$("$kafkalog_venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")" || return 1
  echo "$kafkalog_root" >"$site/kafkalog-repo.pth"
}

# venv-pack2, which packs the executors' environment for non-local masters
# (jobs/spark/packed_env.py): installed into the venv on first need (spark-submit.sh, tests/run.sh).
kafkalog_ensure_packer() {
  "$kafkalog_venv/bin/python" -c "import venv_pack" 2>/dev/null && return 0
  echo "kafkalog: installing venv-pack2 into $kafkalog_venv..." >&2
  kafkalog_quiet_pip "$kafkalog_venv/bin/python" install "venv-pack2>=0.9,<1"
}

kafkalog_check_java() {
  if ! command -v java >/dev/null 2>&1; then
    echo "kafkalog: Java 17+ is required for Spark, but 'java' is not on PATH (install openjdk-17-jre-headless)" >&2
    return 1
  fi
  local version major
  version="$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')"
  major="${version%%.*}"
  if [ "$major" = "1" ]; then major="$(echo "$version" | cut -d. -f2)"; fi
  if [ -z "$major" ] || [ "$major" -lt 17 ] 2>/dev/null; then
    echo "kafkalog: Java 17+ is required for Spark 4, found '$version'" >&2
    return 1
  fi
}

# A separate venv with Airflow and its Spark provider (conf/airflow/requirements.txt), for the
# DAG test: cached like .venv, reinstalled when the requirements change. Prints its python.
kafkalog_ensure_airflow_venv() {
  local py="${KAFKALOG_PYTHON:-python3}" venv="${KAFKALOG_AIRFLOW_VENV:-$kafkalog_root/.venv-airflow}"
  local req="$kafkalog_root/conf/airflow/requirements.txt"
  local stamp="$venv/.kafkalog-installed" want
  want="$(sha256sum "$req" | cut -c1-16)"
  if [ -x "$venv/bin/airflow" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "$venv/bin/python"
    return 0
  fi
  echo "kafkalog: setting up $venv (Airflow, first use; takes a few minutes)..." >&2
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv" >&2 || return 1
  kafkalog_quiet_pip "$venv/bin/python" install --upgrade pip || return 1
  kafkalog_quiet_pip "$venv/bin/python" install -r "$req" || return 1
  echo "$want" >"$stamp"
  echo "$venv/bin/python"
}
