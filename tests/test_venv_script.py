"""conf/venv.sh installs quietly: a successful pip says nothing, a failed one shows all it said."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# A stand-in for the venv's python: `-m pip ...` prints what setuptools prints on a good build
# of the extension, then exits with the status the test asks for.
FAKE_PYTHON = """#!/bin/sh
echo "BuildBackendWarning: [tool.setuptools.ext-modules] is still *experimental*" >&2
echo "Editable installation." >&2
echo "ERROR: the build said why" >&2
exit "$FAKE_STATUS"
"""


def _quiet_pip(tmp_path: Path, status: int) -> subprocess.CompletedProcess[str]:
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return subprocess.run(
        ["bash", "-c", f'. "{ROOT}/conf/venv.sh" && kafkalog_quiet_pip "{python}" install x'],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "FAKE_STATUS": str(status), "TMPDIR": str(tmp_path)},
        check=False,
    )


def test_a_successful_install_prints_nothing(tmp_path: Path) -> None:
    done = _quiet_pip(tmp_path, 0)
    assert done.returncode == 0
    assert (done.stdout, done.stderr) == ("", "")
    assert list(tmp_path.glob("kafkalog-pip.*")) == []  # its log is removed


def test_a_failed_install_shows_everything_pip_said(tmp_path: Path) -> None:
    done = _quiet_pip(tmp_path, 3)
    assert done.returncode == 3
    assert "ERROR: the build said why" in done.stderr
    assert "failed (exit 3)" in done.stderr
    assert list(tmp_path.glob("kafkalog-pip.*")) == []
