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
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.schemas.registry import RegisteredSchema, Registry, subject_name
from jobs.schemas.settings import SCHEMA_TYPES, SchemaSettings
from kafkalog_core.errors import ConfigError, SchemaError
from kafkalog_core.schema.decode import Decoding
from kafkalog_core.schema.encoding import Encoding

if TYPE_CHECKING:
    from jobs.schemas.store import StoredSchemas, WriterSchemaStore

__all__ = [
    "parse_schema_text",
    "record_name_of",
    "record_writer_schemas",
    "resolved_encodings",
    "resolve_decoding",
    "resolve_encoding",
    "forget_resolved_encodings",
    "resolve_encoding_once",
    "spark_arrow_type",
]


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
    from kafkalog_core.schema.avro_schema import parse_avro_schema

    try:
        return parse_avro_schema(text)
    except SchemaError as e:
        raise SchemaError(f"{where}: {e}") from None


def _label(settings: SchemaSettings, where: str) -> str:
    """How messages name a local schema: the file (and its path) or the inline schema."""
    if settings.schema_file:
        return f"{where}.schema_file={settings.schema_file!r}"
    return f"{where}.schema"


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


def _from_store(settings: SchemaSettings, stored: StoredSchemas, where: str) -> Decoding:
    """The schemas the output's runs recorded (jobs/schemas/store.py): every id a writer used,
    read with the latest."""
    if stored.format != settings.format:
        raise ConfigError(
            f"{where}.format={settings.format}, but the runs that wrote subject "
            f"{stored.subject!r} recorded {stored.format} schemas"
        )
    if not settings.framed:
        raise ConfigError(
            f"{where}.framing=none: the recorded schemas of subject {stored.subject!r} are found "
            f"by the id in each value's framing; drop {where}.framing or give {where}.schema"
        )
    writers = {
        schema_id: parse_schema_text(
            settings.format, text, f"{where}: recorded schema {schema_id} of {stored.subject!r}"
        )
        for schema_id, text in stored.texts.items()
    }
    return Decoding(settings.field, settings.format, True, writers[stored.latest], writers)


def resolve_decoding(
    settings: SchemaSettings,
    topic: str | None,
    where: str,
    store: WriterSchemaStore | None = None,
) -> Decoding:
    """The reader schema and the writer schemas by id for reading one column (driver only).
    Without a local schema or a registry, the schemas the output's runs recorded in `store`."""
    text = settings.local_schema_text()
    label = _label(settings, where)
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
            subject = None if topic is None else f"{topic}-{settings.field}"
            stored = None if store is None or subject is None else store.load(subject)
            if stored is not None:
                return _from_store(settings, stored, where)
            kept = (
                ""
                if store is None or subject is None
                else f" (no run kept a writer schema of subject {subject!r} in {store.directory})"
            )
            raise ConfigError(
                f"{where}.format={settings.format} needs a reader schema: set {where}.schema, "
                f"{where}.schema_file or {where}.schema_registry.url{kept}"
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


def _derived(settings: SchemaSettings, arrow_type: pa.DataType, where: str) -> Any:
    """The schema the column types give (Spark's to_avro naming for Avro)."""
    full = settings.record_name or "topLevelRecord"
    namespace, _, name = full.rpartition(".")
    try:
        if settings.format == "avro":
            from kafkalog_core.schema.avro_schema import avro_schema_for

            return avro_schema_for(arrow_type, name, namespace)
        if settings.format == "protobuf":
            from kafkalog_core.schema.protobuf import parse_proto, proto_for

            return parse_proto(proto_for(arrow_type, name, namespace))
        from kafkalog_core.schema.json_schema import json_schema_for

        return json_schema_for(arrow_type, full)
    except SchemaError as e:
        raise SchemaError(f"{where}: {e}") from None


def _schema_text(fmt: str, schema: Any) -> str:
    """A parsed schema as the text a registry holds."""
    if fmt == "protobuf":
        return str(schema.text)
    return json.dumps(schema, separators=(",", ":"))


def _fits(fmt: str, schema: Any, arrow_type: pa.DataType, where: str) -> None:
    """The columns against the schema, once: SchemaError names the field and the types."""
    try:
        if fmt == "avro":
            from kafkalog_core.schema.avro_bind import check_avro_schema

            check_avro_schema(schema, arrow_type)
        elif fmt == "protobuf":
            from kafkalog_core.schema.protobuf import check_protobuf_schema

            check_protobuf_schema(schema, arrow_type, where)
    except SchemaError as e:
        message = str(e)
        raise SchemaError(message if message.startswith(where) else f"{where}: {message}") from None


def resolve_encoding(
    settings: SchemaSettings, topic: str | None, arrow_type: pa.DataType, where: str
) -> Encoding:
    """The schema and framing id a column is written with (driver only, once per run)."""
    if settings.format == "json":
        return Encoding(
            settings.field, "json", None, settings.schema_id if settings.framed else None
        )
    text = settings.local_schema_text()
    label = _label(settings, where)
    local = (
        None
        if text is None
        else parse_schema_text(settings.format, text, label, settings.record_name)
    )
    schema_id = settings.schema_id
    if settings.registry is None:
        schema = local if local is not None else _derived(settings, arrow_type, where)
    else:
        registry = Registry(settings.registry)
        try:
            candidate = local
            if candidate is None and settings.registry.auto_register:
                candidate = _derived(settings, arrow_type, where)
            subject = _subject(settings, topic, candidate, where)
            schema_type = SCHEMA_TYPES[settings.format]
            if settings.registry.auto_register:
                found = registry.register(
                    subject, _schema_text(settings.format, candidate), schema_type
                )
                schema = candidate
            elif local is not None:
                found = registry.lookup(subject, _schema_text(settings.format, local), schema_type)
                schema = local
            else:
                found = registry.version(subject, settings.registry.version)
                _checked_type(found, settings, where)
                schema = parse_schema_text(
                    settings.format,
                    found.schema,
                    f"{where}: subject {subject!r} version {found.version}",
                    settings.record_name,
                )
        finally:
            registry.close()
        schema_id = found.schema_id
    _fits(settings.format, schema, arrow_type, where if schema is not local else label)
    return Encoding(settings.field, settings.format, schema, schema_id if settings.framed else None)


# (settings, topic, column type, setting) -> the run's encoding: a run resolves its key and
# value in several plans (the Spark path, the arrow task reader, the range mode's sample), and
# the registry is asked once
_RESOLVED: dict[tuple[SchemaSettings, str | None, str, str], Encoding] = {}


def resolve_encoding_once(
    settings: SchemaSettings, topic: str | None, arrow_type: pa.DataType, where: str
) -> Encoding:
    """`resolve_encoding`, remembered for the driver process's later plans of the run."""
    key = (settings, topic, str(arrow_type), where)
    if key not in _RESOLVED:
        _RESOLVED[key] = resolve_encoding(settings, topic, arrow_type, where)
    return _RESOLVED[key]


def resolved_encodings() -> list[tuple[str | None, Encoding]]:
    """(topic, encoding) of every key and value this run resolved so far (driver process)."""
    return [(topic, encoding) for (_, topic, _, _), encoding in _RESOLVED.items()]


def record_writer_schemas(
    store: WriterSchemaStore, encodings: Iterable[tuple[str | None, Encoding]]
) -> None:
    """Keep the schema of every framed key or value with the output, under its topic's subject,
    before the run publishes (a refusal there leaves the output as it was)."""
    for topic, encoding in encodings:
        if topic is None or encoding.schema_id is None or encoding.schema is None:
            continue
        store.record(
            f"{topic}-{encoding.field}",
            encoding.format,
            encoding.schema_id,
            _schema_text(encoding.format, encoding.schema),
        )


def forget_resolved_encodings() -> None:
    """Start a run: its key and value schemas are resolved anew (a registry's latest version
    may have moved since the last run of this process)."""
    _RESOLVED.clear()


def spark_arrow_type(arrow_type: pa.DataType, where: str) -> tuple[Any, pa.DataType]:
    """(Spark's type for a decoded column, the Arrow type Spark expects for it)."""
    from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type

    try:
        spark_type = from_arrow_type(arrow_type)
    except (TypeError, ValueError) as e:  # e.g. a decimal wider than Spark's 38 digits
        raise SchemaError(f"{where}: decoded type {arrow_type} has no Spark type ({e})") from None
    return spark_type, to_arrow_type(spark_type, timezone="UTC")
