"""The executors' Python for a Spark cluster: a packed venv with kafkalog's compiled C loops.

    python -m jobs.spark.packed_env [--cache-dir build/packed-env]   # prints the archive path

On a non-local master `spark-submit.sh` ships this archive with `--archives ENV#env` and points
`spark.pyspark.python` at `./env/bin/python`, so executors run the driver's numpy, pyarrow,
codecs and C build (`kafkalog_core/_native*.so`) instead of whatever the nodes have.

What goes in: the third-party packages the task side imports (`EXECUTOR_PACKAGES`, pinned to
the versions this interpreter has) and the compiled `_native` extension. Not in it: pyspark
(Spark puts its own pyspark.zip and py4j on every Python worker's PYTHONPATH) and kafkalog's
Python code, which travels fresh with each submit as `--py-files` (a zip cannot carry the .so,
hence `kafkalog_core.__path__` reaching the env's `kafkalog_core/` for `_native`). So the
archive changes only with its inputs, and is cached by their hash (`env_key`): built once per
machine (per CI run), reused by every later submit.

Packed with venv-pack2: pip-installable, small (pure Python), maintained, and it packs a plain
`python -m venv` (relocatable scripts and the interpreter link), which is exactly what Spark's
`--archives` unpacks. The venv links to this machine's base interpreter, so cluster nodes need
the same Python at the same path (one image for driver and executors: see docs/cluster.md).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CACHE_DIR = REPO_ROOT / "build" / "packed-env"
ARCHIVE_PREFIX = "kafkalog-env-"

# What executors import besides pyspark and kafkalog: the core's (numpy, pyarrow, CRC, codecs,
# YAML for topic configs). pandas, delta-rs, matplotlib and delta-spark are driver-side only.
EXECUTOR_PACKAGES = ("numpy", "pyarrow", "crc32c", "cramjam", "lz4", "zstandard", "pyyaml")

# Left out of the archive: headers, tests and caches nobody imports on an executor.
EXCLUDES = (
    "*/__pycache__/*.opt-*.pyc",
    "*/site-packages/pyarrow/include/*",
    "*/site-packages/pyarrow/src/*",
    "*/site-packages/pyarrow/tests/*",
    "*/site-packages/pyarrow/libarrow_flight.so*",  # Arrow Flight RPC: a third of pyarrow
    "*/site-packages/pyarrow/_flight.*",
    "*/site-packages/numpy/_core/include/*",
    "*/site-packages/numpy/*/tests/*",
    "*/site-packages/numpy/tests/*",
)


def requirements(packages: Sequence[str] = EXECUTOR_PACKAGES) -> list[str]:
    """`name==version` for each package as this interpreter has it: the driver's versions."""
    pins = []
    for name in packages:
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            raise SystemExit(f"kafkalog: {name} is not installed in {sys.prefix}") from None
    return pins


def native_library() -> Path | None:
    """The built `_native` extension the driver imports, or None (no compiler at install)."""
    try:
        from kafkalog_core import _native
    except ImportError:
        return None
    return Path(_native.__file__)


def env_key(pins: Sequence[str], native: Path | None) -> str:
    """What the archive depends on: the pins, the interpreter, the C sources and their build."""
    digest = hashlib.sha256()
    for part in (*pins, sys.version, platform.machine(), sys.implementation.cache_tag):
        digest.update(part.encode() + b"\0")
    for source in sorted((REPO_ROOT / "kafkalog_core").glob("_native*.[ch]")):
        digest.update(source.read_bytes())
    digest.update(native.read_bytes() if native is not None else b"no native build")
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def _locked(cache_dir: Path) -> Iterator[None]:
    """One build at a time per cache dir (two submits at once wait for the first)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _log(message: str) -> None:
    print(f"kafkalog: {message}", file=sys.stderr, flush=True)


def _build_venv(venv_dir: Path, pins: Sequence[str], native: Path | None) -> None:
    # No pip inside: this interpreter's pip installs into it (--python), keeping it smaller.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv_dir)], check=True)
    target = venv_dir / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(target), "install", "-q",
         "--no-warn-script-location", *pins],
        check=True,
    )  # fmt: skip
    if native is not None:
        site = subprocess.run(
            [str(target), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        package = Path(site) / "kafkalog_core"
        package.mkdir()
        shutil.copy2(native, package / native.name)


def _pack(venv_dir: Path, archive: Path) -> None:
    try:
        from venv_pack import pack
    except ImportError:
        raise SystemExit(
            "kafkalog: venv-pack2 is not installed (conf/venv.sh kafkalog_ensure_packer does it)"
        ) from None
    pack(
        prefix=str(venv_dir),
        output=str(archive),
        compress_level=1,  # built once per machine; fast beats small here
        verbose=False,
        filters=[("exclude", pattern) for pattern in EXCLUDES],
    )


def ensure_packed_env(cache_dir: Path = DEFAULT_CACHE_DIR) -> Path:
    """The archive for the current inputs, built if missing; older archives are removed."""
    pins = requirements()
    native = native_library()
    archive = cache_dir / f"{ARCHIVE_PREFIX}{env_key(pins, native)}.tar.gz"
    if archive.is_file():
        return archive
    with _locked(cache_dir):
        if archive.is_file():
            return archive
        _log(f"packing the executors' environment into {archive} (once per input change)...")
        with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".build-") as tmp:
            venv_dir = Path(tmp) / "env"
            _build_venv(venv_dir, pins, native)
            partial = Path(tmp) / archive.name
            _pack(venv_dir, partial)
            partial.chmod(0o644)
            os.replace(partial, archive)
        for old in cache_dir.glob(f"{ARCHIVE_PREFIX}*.tar.gz"):
            if old != archive:
                old.unlink()
    return archive


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jobs.spark.packed_env", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    args = parser.parse_args(argv)
    print(ensure_packed_env(args.cache_dir.absolute()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
