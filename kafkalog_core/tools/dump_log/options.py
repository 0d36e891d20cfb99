"""`DumpOptions`: the options of `kafka-dump-log.sh` that kafkalog supports, plus `--json`."""

from __future__ import annotations

from dataclasses import dataclass

from kafkalog_core.record.batch import INT32_MAX

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024


@dataclass(frozen=True)
class DumpOptions:
    """The options of `kafka-dump-log.sh` that kafkalog supports, plus `json`.

    `json`: one JSON object per line instead of Kafka's text. Record keys and values (only with
    `print_data_log`, as in the text form) are emitted as `"key"`/`"value"` plus
    `"key_encoding"`/`"value_encoding"`: `"utf-8"` with the decoded string when the bytes are
    valid UTF-8, else `"base64"` with the base64 text; both `null` for a null key/value.
    """

    print_data_log: bool = False
    deep_iteration: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_bytes: int = INT32_MAX
    skip_record_metadata: bool = False
    json: bool = False

    @property
    def is_deep_iteration(self) -> bool:
        """--print-data-log implies --deep-iteration (as in Kafka)."""
        return self.deep_iteration or self.print_data_log
