"""What the driver resolves once per run and ships to the tasks: the schema and id a key or
value is written with (`resolve_encoding`) or the reader and writer schemas it is read with
(`resolve_decoding`). The registry is asked here and only here.

Writing: with `auto_register` the local or derived schema is registered (a compatibility
refusal is one line naming the subject and the reason); with a schema file the subject must
already hold it (its id is looked up); otherwise the subject's version (latest or a number) is
the schema, and it must fit the columns. Reading: the reader schema is the local one or the
subject's version, and every version of the subject is a writer schema a record's id may name.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from jobs.schemas.registry import RegisteredSchema, Registry, subject_name
from jobs.schemas.settings import SCHEMA_TYPES, SchemaSettings
from kafkalog_core.errors import ConfigError, SchemaError
from kafkalog_core.schema.decode import Decoding

__all__ = ["parse_schema_text", "record_name_of", "resolve_decoding"]


def parse_schema_text(fmt: str, text: str, where: str, message: str | None = None) -> Any:
    """A schema's text in its format's parsed form (Avro: its JSON form, checked by fastavro;
    Protobuf: a ProtobufSchema; JSON Schema: a dict); SchemaError naming `where` otherwise."""
    if fmt == "avro":
        return _parse_avro(text, where)
    if fmt == "protobuf":
        from kafkalog_core.schema.protobuf import parse_proto

        try:
            return parse_proto(text, message)
        except SchemaError as e:
            raise SchemaError(f"{where}: {e}") from None
    from kafkalog_core.schema.json_schema import parse_json_schema

    return parse_json_schema(text, where)


def _parse_avro(text: str, where: str) -> Any:
    import fastavro
    from fastavro.schema import SchemaParseException, UnknownType

    try:
        schema = json.loads(text)
    except json.JSONDecodeError as e:
        # a bare primitive name ("string") is an Avro schema too
        if text.strip() in ("null", "boolean", "int", "long", "float", "double", "bytes", "string"):
            return text.strip()
        raise SchemaError(f"{where}: not an Avro schema: not JSON ({e})") from None
    try:
        fastavro.parse_schema(schema, named_schemas={})
    except (SchemaParseException, UnknownType, ValueError, TypeError, KeyError) as e:
        raise SchemaError(f"{where}: not an Avro schema: {e}") from None
    return schema


def record_name_of(fmt: str, schema: Any) -> str | None:
    """The fully qualified record name the record-name strategies use: Avro's namespace.name,
    Protobuf's message, JSON Schema's title."""
    if fmt == "avro" and isinstance(schema, dict) and schema.get("name"):
        name = str(schema["name"])
        space = schema.get("namespace")
        return name if "." in name or not space else f"{space}.{name}"
    if fmt == "protobuf":
        return str(schema.message)
    if fmt == "json_schema" and isinstance(schema, dict) and schema.get("title"):
        return str(schema["title"])
    return None


def _subject(settings: SchemaSettings, topic: str | None, local: Any, where: str) -> str:
    registry = settings.registry
    assert registry is not None
    if registry.subject:
        return registry.subject
    record = settings.record_name or (
        None if local is None else record_name_of(settings.format, local)
    )
    return subject_name(registry.subject_name_strategy, topic, settings.field, record, where)


def _checked_type(found: RegisteredSchema, settings: SchemaSettings, where: str) -> None:
    want = SCHEMA_TYPES[settings.format]
    if found.schema_type != want:
        raise SchemaError(
            f"{where}: schema id {found.schema_id} of subject {found.subject!r} is "
            f"{found.schema_type}, not {want} (format {settings.format})"
        )


def resolve_decoding(settings: SchemaSettings, topic: str | None, where: str) -> Decoding:
    """The reader schema and the writer schemas by id for reading one column (driver only)."""
    text = settings.local_schema_text()
    label = f"{where}.schema_file" if settings.schema_file else f"{where}.schema"
    if settings.format == "json":
        if text is None:
            raise ConfigError(
                f"{where}.format=json is read with a JSON Schema: set {where}.schema or "
                f"{where}.schema_file"
            )
        return Decoding(
            settings.field, "json", False, parse_schema_text("json_schema", text, label)
        )
    local = (
        None
        if text is None
        else parse_schema_text(settings.format, text, label, settings.record_name)
    )
    if settings.registry is None:
        if local is None:
            raise ConfigError(
                f"{where}.format={settings.format} needs a reader schema: set {where}.schema, "
                f"{where}.schema_file or {where}.schema_registry.url"
            )
        writers = {} if settings.schema_id is None else {settings.schema_id: local}
        return Decoding(
            settings.field,
            settings.format,
            settings.framed,
            local,
            writers,
            any_id=settings.schema_id is None,
        )
    registry = Registry(settings.registry)
    try:
        subject = _subject(settings, topic, local, where)
        writers: dict[int, Any] = {}
        for found in registry.versions(subject):
            _checked_type(found, settings, where)
            writers[found.schema_id] = parse_schema_text(
                settings.format,
                found.schema,
                f"{where}: subject {subject!r} version {found.version}",
            )
        if local is None:
            chosen = registry.version(subject, settings.registry.version)
            reader = writers[chosen.schema_id]
            if settings.format == "protobuf" and settings.record_name:
                reader = parse_schema_text("protobuf", chosen.schema, where, settings.record_name)
        else:
            reader = local
    finally:
        registry.close()
    return Decoding(settings.field, settings.format, settings.framed, reader, writers)


def spark_arrow_type(arrow_type: pa.DataType, where: str) -> tuple[Any, pa.DataType]:
    """(Spark's type for a decoded column, the Arrow type Spark expects for it)."""
    from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type

    try:
        spark_type = from_arrow_type(arrow_type)
    except (TypeError, ValueError) as e:  # e.g. a decimal wider than Spark's 38 digits
        raise SchemaError(f"{where}: decoded type {arrow_type} has no Spark type ({e})") from None
    return spark_type, to_arrow_type(spark_type, timezone="UTC")
