"""`.kafka_cleanshutdown`: the marker of a log dir's clean shutdown (§6, §9)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from kafkalog_core.log.checkpoints.checkpoint_file import atomic_write
from kafkalog_core.log.names import CLEAN_SHUTDOWN_FILE


class CleanShutdownFile:
    """`<logDir>/.kafka_cleanshutdown`: its existence means the last shutdown was clean.

    3.7+ writes `{"version":0,"brokerEpoch":N}`; <= 3.6 wrote an empty file. `read()` returns
    the broker epoch or -1 when there is none (missing, empty or unparsable file), like Kafka.
    """

    VERSION = 0

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        self.path = Path(log_dir) / CLEAN_SHUTDOWN_FILE

    @property
    def exists(self) -> bool:
        return self.path.exists()

    def write(self, broker_epoch: int = -1, *, sync: bool = True) -> None:
        content = json.dumps(
            {"version": self.VERSION, "brokerEpoch": int(broker_epoch)}, separators=(",", ":")
        )
        atomic_write(self.path, content.encode("utf-8"), sync=sync)

    def write_empty(self, *, sync: bool = True) -> None:
        """The <= 3.6 form of the marker."""
        atomic_write(self.path, b"", sync=sync)

    def read(self) -> int:
        try:
            content = json.loads(self.path.read_bytes().decode("utf-8"))
            epoch = content["brokerEpoch"]
            return int(epoch) if isinstance(epoch, int) else -1
        except (OSError, ValueError, KeyError, TypeError):
            return -1

    def delete(self) -> bool:
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True
