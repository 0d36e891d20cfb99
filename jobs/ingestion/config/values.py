"""How the ingest config reads a value and refuses a bad one: one `ConfigError` line naming
the setting (shared by `config`, `config_topics` and `config_mapping`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kafkalog_core.errors import ConfigError

__all__ = ["as_mapping", "invalid", "non_empty_text", "only_known"]


def invalid(setting: str, value: Any, why: str) -> ConfigError:
    """The one-line refusal of a setting's value: `setting=value is invalid: why`."""
    return ConfigError(f"{setting}={value!r} is invalid: {why}")


def as_mapping(raw: Any, where: str) -> Mapping[str, Any]:
    """A YAML mapping (None: empty), else refused."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise invalid(where, raw, "must be a mapping")
    return raw


def only_known(raw: Mapping[str, Any], known: Sequence[str], where: str) -> None:
    """Refuse a setting this section does not have (a typo must not be ignored)."""
    unknown = sorted(str(k) for k in set(raw) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {unknown}; known: {sorted(known)}")


def non_empty_text(value: Any, where: str) -> str:
    """A non-empty string setting, else refused."""
    if not isinstance(value, str) or not value.strip():
        raise invalid(where, value, "must be a non-empty string")
    return value
