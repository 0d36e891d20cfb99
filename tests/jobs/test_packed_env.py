"""The executors' packed environment: what its cache key covers, and the cache itself.

Building a real archive is what tests/cluster does (once per run); here the build steps are
replaced to test the cache around them.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from jobs.spark import packed_env
from jobs.spark.packed_env import ARCHIVE_PREFIX, ensure_packed_env, env_key, requirements


def test_requirements_pin_what_this_interpreter_has():
    pins = requirements(("numpy", "pyarrow"))
    assert pins == [
        f"numpy=={importlib.metadata.version('numpy')}",
        f"pyarrow=={importlib.metadata.version('pyarrow')}",
    ]
    with pytest.raises(SystemExit, match="no-such-package-xyz is not installed"):
        requirements(("no-such-package-xyz",))


def test_the_key_follows_pins_and_the_c_build(tmp_path: Path):
    so = tmp_path / "_native.so"
    so.write_bytes(b"build 1")
    key = env_key(["numpy==2.0.0"], so)
    assert key == env_key(["numpy==2.0.0"], so)
    assert key != env_key(["numpy==2.0.1"], so)
    assert key != env_key(["numpy==2.0.0"], None)
    so.write_bytes(b"build 2")
    assert key != env_key(["numpy==2.0.0"], so)


def test_a_cached_archive_is_reused_and_a_new_one_replaces_the_old(tmp_path, monkeypatch):
    builds: list[Path] = []

    def fake_build(venv_dir: Path, pins, native) -> None:
        venv_dir.mkdir()
        builds.append(venv_dir)

    def fake_pack(venv_dir: Path, archive: Path) -> None:
        archive.write_bytes(b"archive")

    monkeypatch.setattr(packed_env, "_build_venv", fake_build)
    monkeypatch.setattr(packed_env, "_pack", fake_pack)
    first = ensure_packed_env(tmp_path)
    assert first.name.startswith(ARCHIVE_PREFIX) and first.read_bytes() == b"archive"
    assert ensure_packed_env(tmp_path) == first and len(builds) == 1  # cached
    stale = tmp_path / f"{ARCHIVE_PREFIX}0000000000000000.tar.gz"
    stale.write_bytes(b"old")
    first.unlink()  # as if the inputs changed: a new archive, and the older ones go
    again = ensure_packed_env(tmp_path)
    assert len(builds) == 2 and again.is_file() and not stale.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [again.name]
