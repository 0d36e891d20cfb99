"""How a key or value is encoded or decoded: `format`, the schema's source, the registry, the
framing. One parser for both spellings: the ingest YAML's nested mapping
(`value: {format: avro, schema_registry: {url: ...}}`) and the data source's flat options
(`value.format`, `value.schema_registry.url`), so both refuse the same things with one
`ConfigError` line naming the setting.

Secrets never enter these settings: `basic_auth_env` and `ssl_key_password_env` name environment
variables, read only when the registry client is made (`RegistrySettings.client_config`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafkalog_core.errors import ConfigError

__all__ = [
    "FORMATS",
    "FRAMINGS",
    "SCHEMA_FORMATS",
    "SCHEMA_TYPES",
    "SUBJECT_NAME_STRATEGIES",
    "RegistrySettings",
    "SchemaSettings",
    "nest_options",
    "parse_schema_settings",
    "settings_from_options",
]

SCHEMA_FORMATS = ("avro", "protobuf", "json_schema")
FORMATS = (*SCHEMA_FORMATS, "json")
FRAMINGS = ("confluent", "none")
SUBJECT_NAME_STRATEGIES = ("topic", "record", "topic_record")
# the registry's name for each format's schemas (its `schemaType`)
SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}

_REGISTRY_KNOWN = (
    "url",
    "subject",
    "subject_name_strategy",
    "version",
    "auto_register",
    "basic_auth_env",
    "ssl_ca_location",
    "ssl_certificate_location",
    "ssl_key_location",
    "ssl_key_password_env",
    "timeout_s",
    "max_retries",
)
_KNOWN = (
    "format",
    "schema_file",
    "schema",
    "schema_registry",
    "schema_id",
    "framing",
    "record_name",
)


def _invalid(where: str, value: Any, why: str) -> ConfigError:
    return ConfigError(f"{where}={value!r} is invalid: {why}")


@dataclass(frozen=True)
class RegistrySettings:
    """Where the registry is and how to name and pick a schema in it."""

    url: str
    subject: str | None = None  # None: from the strategy
    subject_name_strategy: str = "topic"
    version: int | None = None  # None: the latest
    auto_register: bool = False
    basic_auth_env: str | None = None  # names an env var holding user:password
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password_env: str | None = None
    timeout_s: float = 30.0
    max_retries: int = 2

    def client_config(self) -> dict[str, Any]:
        """confluent-kafka's SchemaRegistryClient settings, secrets read from the environment now."""
        config: dict[str, Any] = {
            "url": self.url,
            "timeout": self.timeout_s,
            "max.retries": self.max_retries,
            "retries.wait.ms": 200,
            "retries.max.wait.ms": 2000,
        }
        if self.basic_auth_env:
            config["basic.auth.user.info"] = _secret(self.basic_auth_env, "basic_auth_env")
        for name in ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location"):
            value = getattr(self, name)
            if value:
                config[name.replace("_", ".")] = value
        if self.ssl_key_password_env:
            config["ssl.key.password"] = _secret(self.ssl_key_password_env, "ssl_key_password_env")
        return config


def _secret(env: str, setting: str) -> str:
    value = os.environ.get(env)
    if not value:
        raise ConfigError(f"schema_registry.{setting}: environment variable {env} is not set")
    if setting == "basic_auth_env" and ":" not in value:
        raise ConfigError(
            f"schema_registry.basic_auth_env: environment variable {env} must hold user:password"
        )
    return value


@dataclass(frozen=True)
class SchemaSettings:
    """A key's or value's format and where its schema comes from (`field`: key or value)."""

    field: str
    format: str
    schema_file: str | None = None
    schema_text: str | None = None  # the schema inline (the data source's `value.schema`)
    registry: RegistrySettings | None = None
    schema_id: int | None = None  # frame with this id, no registry
    framing: str = "none"
    record_name: str | None = None  # derived schemas: the (namespaced) record / message name

    @property
    def framed(self) -> bool:
        return self.framing == "confluent"

    @property
    def has_local_schema(self) -> bool:
        return self.schema_file is not None or self.schema_text is not None

    def local_schema_text(self) -> str | None:
        """The schema given inline or as a file (read now), None when it is derived or fetched."""
        if self.schema_text is not None:
            return self.schema_text
        if self.schema_file is None:
            return None
        try:
            with open(self.schema_file, encoding="utf-8") as f:
                return f.read()
        except OSError as e:
            raise ConfigError(
                f"{self.field}.schema_file={self.schema_file!r}: cannot read it ({e.strerror})"
            ) from None


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _invalid(where, value, "must be a non-empty string")
    return value.strip()


def _int(value: Any, where: str, minimum: int = 0) -> int:
    if isinstance(value, bool):
        raise _invalid(where, value, "must be an integer")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise _invalid(where, value, "must be an integer") from None
    if number < minimum:
        raise _invalid(where, value, f"must be at least {minimum}")
    return number


def _bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _invalid(where, value, "must be true or false")


def _only_known(raw: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    unknown = sorted(str(k) for k in set(raw) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {unknown}; known: {sorted(known)}")


def _registry(raw: Any, where: str) -> RegistrySettings:
    if not isinstance(raw, Mapping):
        raise _invalid(where, raw, "must be a mapping with at least url")
    _only_known(raw, _REGISTRY_KNOWN, where)
    if raw.get("url") is None:
        raise ConfigError(f"{where}.url is required")
    url = _text(raw["url"], f"{where}.url")
    if not url.startswith(("http://", "https://", "mock://")):
        raise _invalid(f"{where}.url", url, "must start with http:// or https://")
    strategy = str(raw.get("subject_name_strategy", "topic")).strip().lower()
    if strategy not in SUBJECT_NAME_STRATEGIES:
        raise _invalid(
            f"{where}.subject_name_strategy",
            strategy,
            f"must be one of {list(SUBJECT_NAME_STRATEGIES)}",
        )
    version = raw.get("version", "latest")
    optional = {
        name: _text(raw[name], f"{where}.{name}")
        for name in (
            "subject",
            "basic_auth_env",
            "ssl_ca_location",
            "ssl_certificate_location",
            "ssl_key_location",
            "ssl_key_password_env",
        )
        if raw.get(name) is not None
    }
    timeout = raw.get("timeout_s", 30.0)
    try:
        timeout = float(timeout)
    except (TypeError, ValueError):
        raise _invalid(f"{where}.timeout_s", timeout, "must be a number of seconds") from None
    if timeout <= 0:
        raise _invalid(f"{where}.timeout_s", timeout, "must be positive")
    return RegistrySettings(
        url=url,
        subject_name_strategy=strategy,
        version=None
        if str(version).strip().lower() == "latest"
        else _int(version, f"{where}.version", 1),
        auto_register=_bool(raw.get("auto_register", False), f"{where}.auto_register"),
        timeout_s=timeout,
        max_retries=_int(raw.get("max_retries", 2), f"{where}.max_retries"),
        **optional,
    )


def parse_schema_settings(
    raw: Mapping[str, Any], field: str, where: str, *, reading: bool = False
) -> SchemaSettings:
    """A key's or value's schema settings from their nested form (YAML, or `nest_options`).
    `reading`: framed records may be read with a reader schema and no id (any id decodes)."""
    _only_known(raw, _KNOWN, where)
    fmt = str(raw.get("format", "")).strip().lower()
    if fmt not in FORMATS:
        raise _invalid(f"{where}.format", raw.get("format"), f"must be one of {list(FORMATS)}")
    schema_file = (
        None
        if raw.get("schema_file") is None
        else _text(raw["schema_file"], f"{where}.schema_file")
    )
    schema_text = None if raw.get("schema") is None else _text(raw["schema"], f"{where}.schema")
    if schema_file is not None and schema_text is not None:
        raise ConfigError(f"{where}: set at most one of schema_file and schema")
    registry = None
    if raw.get("schema_registry") is not None:
        registry = _registry(raw["schema_registry"], f"{where}.schema_registry")
    schema_id = None
    if raw.get("schema_id") is not None:
        schema_id = _int(raw["schema_id"], f"{where}.schema_id")
        if schema_id >= 2**31:
            raise _invalid(f"{where}.schema_id", raw["schema_id"], "must fit 4 bytes (< 2**31)")
    record_name = (
        None
        if raw.get("record_name") is None
        else _text(raw["record_name"], f"{where}.record_name")
    )
    if fmt == "json" and registry is not None:
        raise ConfigError(f"{where}.schema_registry: format json has no schema (use json_schema)")
    if registry is not None and schema_id is not None:
        raise ConfigError(f"{where}: set at most one of schema_registry and schema_id")
    # A registry or an id frames what is written; a read of a schema format expects the framing
    # every Confluent serializer writes (framing=none reads plain payloads)
    framed_by_default = registry is not None or schema_id is not None
    default_framing = (
        "confluent" if framed_by_default or (reading and fmt in SCHEMA_FORMATS) else "none"
    )
    framing = str(raw.get("framing", default_framing)).strip().lower()
    if framing not in FRAMINGS:
        raise _invalid(f"{where}.framing", raw.get("framing"), f"must be one of {list(FRAMINGS)}")
    if framing == "confluent" and registry is None and schema_id is None and not reading:
        raise ConfigError(
            f"{where}.framing=confluent needs a schema id to frame with: set {where}.schema_id "
            f"or {where}.schema_registry"
        )
    if registry is not None and registry.auto_register and registry.version is not None:
        raise ConfigError(
            f"{where}.schema_registry: auto_register registers a schema; it takes no version"
        )
    return SchemaSettings(
        field=field,
        format=fmt,
        schema_file=schema_file,
        schema_text=schema_text,
        registry=registry,
        schema_id=schema_id,
        framing=framing,
        record_name=record_name,
    )


def nest_options(options: Mapping[str, str], prefix: str) -> dict[str, Any]:
    """`value.schema_registry.url=...` style options -> the nested form `parse_schema_settings`
    reads (`{"schema_registry": {"url": ...}}`); names are taken without regard to case."""
    nested: dict[str, Any] = {}
    start = f"{prefix}."
    for name, value in options.items():
        lower = name.lower()
        if not lower.startswith(start):
            continue
        rest = lower[len(start) :]
        if rest.startswith("schema_registry."):
            nested.setdefault("schema_registry", {})[rest[len("schema_registry.") :]] = value
        else:
            nested[rest] = value
    return nested


def settings_from_options(
    options: Mapping[str, str], *, reading: bool = False
) -> tuple[SchemaSettings, ...]:
    """The key's and value's settings from a data source's `key.` / `value.` options (only the
    fields whose options are given; each needs its `format`)."""
    out = []
    for field_name in ("key", "value"):
        nested = nest_options(options, field_name)
        if not nested:
            continue
        if "format" not in nested:
            raise ConfigError(
                f"options {sorted(f'{field_name}.{k}' for k in nested)} need {field_name}.format "
                f"(one of {list(FORMATS)})"
            )
        out.append(parse_schema_settings(nested, field_name, field_name, reading=reading))
    return tuple(out)
