"""The Schema Registry, reached from the driver only: confluent-kafka's `SchemaRegistryClient`
(basic auth, TLS, its caches) behind the few calls a run needs, each failure one
`RegistryError` line naming the registry, the subject or id, and the reason.

A run asks the registry once, on the driver; the tasks get the schemas and ids it answered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.schemas.settings import RegistrySettings
from kafkalog_core.errors import ConfigError, RegistryError

__all__ = ["Registry", "RegisteredSchema", "subject_name"]

# the registry's error codes that have a meaning for a run (its REST API's documented codes)
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
INCOMPATIBLE = 409


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry holds it: its text, type (AVRO, PROTOBUF, JSON) and id."""

    schema_id: int
    schema: str
    schema_type: str
    subject: str | None = None
    version: int | None = None


def subject_name(
    strategy: str, topic: str | None, field: str, record: str | None, where: str
) -> str:
    """The subject of a key or value under Confluent's naming strategies: TopicNameStrategy
    `<topic>-<key|value>`, RecordNameStrategy `<record>`, TopicRecordNameStrategy
    `<topic>-<record>` (record: the schema's fully qualified record or message name)."""
    if strategy in ("topic", "topic_record") and not topic:
        raise ConfigError(
            f"{where}.schema_registry: subject_name_strategy {strategy} needs the topic: give "
            "one topic, or set schema_registry.subject"
        )
    if strategy in ("record", "topic_record") and not record:
        raise ConfigError(
            f"{where}.schema_registry: subject_name_strategy {strategy} needs the record name: "
            "set record_name or schema_registry.subject"
        )
    if strategy == "topic":
        return f"{topic}-{field}"
    if strategy == "record":
        return str(record)
    return f"{topic}-{record}"


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What the client raises when no HTTP answer came (its httpx flavour), plus OS errors
    (TLS files, sockets)."""
    try:
        import httpx2 as httpx  # the client prefers httpx's successor, as here
    except ImportError:  # pragma: no cover - depends on the installed client
        import httpx  # type: ignore[no-redef]
    return (httpx.HTTPError, OSError)


class Registry:
    """One registry client for a run (the driver's), with confluent-kafka's caching."""

    def __init__(self, settings: RegistrySettings) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.settings = settings
        self.url = settings.url
        try:
            self._client = SchemaRegistryClient.new_client(settings.client_config())
        except ValueError as e:
            raise RegistryError(f"schema registry {self.url}: {e}") from None

    def _call(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        from confluent_kafka.schema_registry import SchemaRegistryError

        try:
            return call(*args, **kwargs)
        except SchemaRegistryError as e:
            raise RegistryError(
                f"schema registry {self.url}: {what}: {e.error_message} "
                f"(HTTP {e.http_status_code}, error {e.error_code})"
            ) from None
        except _transport_errors() as e:
            raise RegistryError(
                f"schema registry {self.url} cannot be reached: {what}: {e}"
            ) from None

    def version(self, subject: str, version: int | None) -> RegisteredSchema:
        """A subject's version (None: the latest); unknown subject or version: RegistryError."""
        label = "latest" if version is None else version
        found = self._call(
            f"subject {subject!r} version {label}",
            self._client.get_version,
            subject,
            "latest" if version is None else version,
        )
        return _registered(found, subject)

    def versions(self, subject: str) -> list[RegisteredSchema]:
        """Every version of a subject, oldest first: the writer schemas a read may meet."""
        numbers = self._call(f"subject {subject!r}", self._client.get_versions, subject)
        return [self.version(subject, int(n)) for n in numbers]

    def schema(self, schema_id: int) -> RegisteredSchema:
        found = self._call(f"schema id {schema_id}", self._client.get_schema, schema_id)
        return RegisteredSchema(
            schema_id, found.schema_str, found.schema_type or "AVRO", None, None
        )

    def lookup(self, subject: str, schema: str, schema_type: str) -> RegisteredSchema:
        """The id and version under which `subject` holds exactly this schema."""
        from confluent_kafka.schema_registry import Schema

        found = self._call(
            f"subject {subject!r} does not hold the given schema (register it, or set "
            "schema_registry.auto_register: true)",
            self._client.lookup_schema,
            subject,
            Schema(schema, schema_type),
        )
        return _registered(found, subject, fallback=schema, fallback_type=schema_type)

    def register(self, subject: str, schema: str, schema_type: str) -> RegisteredSchema:
        """Register (or find) the schema under `subject`; a compatibility refusal is one line
        naming the subject and the registry's reason."""
        from confluent_kafka.schema_registry import Schema, SchemaRegistryError

        try:
            schema_id = self._client.register_schema(subject, Schema(schema, schema_type))
        except SchemaRegistryError as e:
            if e.http_status_code == INCOMPATIBLE:
                raise RegistryError(
                    f"schema registry {self.url}: subject {subject!r} refused the schema as "
                    f"incompatible: {e.error_message}"
                ) from None
            raise RegistryError(
                f"schema registry {self.url}: registering under subject {subject!r}: "
                f"{e.error_message} (HTTP {e.http_status_code}, error {e.error_code})"
            ) from None
        except _transport_errors() as e:
            raise RegistryError(
                f"schema registry {self.url} cannot be reached: registering under subject "
                f"{subject!r}: {e}"
            ) from None
        return RegisteredSchema(int(schema_id), schema, schema_type, subject, None)

    def close(self) -> None:
        self._client.close()


def _registered(
    found: Any, subject: str, fallback: str | None = None, fallback_type: str = "AVRO"
) -> RegisteredSchema:
    schema = found.schema
    text = schema.schema_str if schema is not None and schema.schema_str else fallback
    kind = (schema.schema_type if schema is not None else None) or fallback_type
    return RegisteredSchema(
        int(found.schema_id), str(text), kind, found.subject or subject, found.version
    )
