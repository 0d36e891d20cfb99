"""Protobuf values: a message from Arrow columns, a `.proto` parsed by protoc, records encoded
and decoded with the `protobuf` runtime.

Why these pieces. A registry holds a Protobuf schema as `.proto` text; the runtime needs
descriptors. protoc (the copy bundled with grpcio-tools, run as a child process so its message
comes back as text) turns the text into a FileDescriptorSet once, on the driver; the tasks get
those bytes and build the message class from them, each schema in a descriptor pool of its own
(two versions of one schema define the same names). Encoding is one runtime call per record
(the general path: Protobuf's varint-tagged layout has no columnar shortcut here); columns are
brought into the runtime's Python types by Arrow first (decimals -> text, dates -> days).

Derived schemas (no `.proto` given) follow the Arrow types: proto3, a field per column in
column order numbered from 1, nullable scalars `optional` (so null and zero differ), structs
nested messages, lists `repeated`, maps `map<>`, timestamps `google.protobuf.Timestamp`,
dates `int32` days since 1970-01-01, decimals `string` (exact text).
"""

from __future__ import annotations

import functools
import importlib.resources
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kafkalog_core.errors import SchemaError

__all__ = [
    "ProtobufSchema",
    "check_protobuf_schema",
    "parse_proto",
    "proto_for",
]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TIMESTAMP = "google.protobuf.Timestamp"
_SCALARS: dict[pa.DataType, str] = {
    pa.bool_(): "bool",
    pa.int8(): "int32",
    pa.int16(): "int32",
    pa.int32(): "int32",
    pa.int64(): "int64",
    pa.uint8(): "uint32",
    pa.uint16(): "uint32",
    pa.uint32(): "uint32",
    pa.uint64(): "uint64",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.string(): "string",
    pa.large_string(): "string",
    pa.binary(): "bytes",
    pa.large_binary(): "bytes",
    pa.date32(): "int32",
}
_MAP_KEYS = {"int32", "int64", "uint32", "uint64", "bool", "string"}


# --- derived schemas --------------------------------------------------------------------------


def _proto_type(arrow: pa.DataType, where: str, nested: list[str]) -> str:
    """The proto type of one Arrow type; nested messages are appended to `nested`."""
    if arrow in _SCALARS:
        return _SCALARS[arrow]
    if pa.types.is_decimal(arrow):
        return "string"
    if pa.types.is_timestamp(arrow):
        return _TIMESTAMP
    if pa.types.is_struct(arrow):
        name = f"{_camel(where.rsplit('.', 1)[-1])}Message"
        nested.append(_message_text(name, arrow, where))
        return name
    raise SchemaError(f"{where}: Arrow type {arrow} has no Protobuf form here")


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Field"


def _message_text(name: str, struct: pa.StructType, where: str) -> str:
    nested: list[str] = []
    lines = [f"message {name} {{"]
    for number, arrow_field in enumerate(struct, 1):
        field_name = arrow_field.name
        here = f"{where}.{field_name}"
        if not _IDENTIFIER.fullmatch(field_name):
            raise SchemaError(f"{here}: {field_name!r} is not a Protobuf field name")
        arrow = arrow_field.type
        if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
            item = arrow.value_type
            if pa.types.is_list(item) or pa.types.is_large_list(item) or pa.types.is_map(item):
                raise SchemaError(f"{here}: a list of {item} has no Protobuf form (no nesting)")
            lines.append(f"  repeated {_proto_type(item, here, nested)} {field_name} = {number};")
        elif pa.types.is_map(arrow):
            key = _proto_type(arrow.key_type, here, nested)
            if key not in _MAP_KEYS:
                raise SchemaError(
                    f"{here}: map keys of type {arrow.key_type} have no Protobuf form"
                )
            value = arrow.item_type
            if pa.types.is_list(value) or pa.types.is_map(value):
                raise SchemaError(f"{here}: map values of type {value} have no Protobuf form")
            lines.append(
                f"  map<{key}, {_proto_type(value, here, nested)}> {field_name} = {number};"
            )
        else:
            proto = _proto_type(arrow, here, nested)
            optional = "optional " if arrow_field.nullable and proto in _SCALARS.values() else ""
            lines.append(f"  {optional}{proto} {field_name} = {number};")
    body = "\n".join("  " + line for text in nested for line in text.splitlines())
    return "\n".join([lines[0], *([body] if body else []), *lines[1:], "}"])


def proto_for(arrow_type: pa.DataType, message: str = "topLevelRecord", package: str = "") -> str:
    """A proto3 file with one message (nested messages inside it) for a struct type."""
    if not pa.types.is_struct(arrow_type):
        raise SchemaError(
            f"a Protobuf value is a message: expected a struct of columns, got {arrow_type}"
        )
    if not _IDENTIFIER.fullmatch(message):
        raise SchemaError(f"{message!r} is not a Protobuf message name")
    text = _message_text(message, arrow_type, message)
    header = ['syntax = "proto3";']
    if package:
        header.append(f"package {package};")
    if _TIMESTAMP in text:
        header.append('import "google/protobuf/timestamp.proto";')
    return "\n".join(header) + "\n\n" + text + "\n"


# --- parsing ----------------------------------------------------------------------------------


def _serialized_file(text: str) -> tuple[bytes, str] | None:
    """A schema given as a base64 FileDescriptorProto (the form confluent-kafka's
    ProtobufSerializer registers, and a registry may hand back) as a FileDescriptorSet with the
    well-known types it imports, and its file name; None for .proto text."""
    import base64
    import binascii

    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message import DecodeError

    stripped = text.strip()
    if not stripped or any(c.isspace() for c in stripped) or "{" in stripped:
        return None
    try:
        file = descriptor_pb2.FileDescriptorProto.FromString(
            base64.b64decode(stripped, validate=True)
        )
    except (binascii.Error, ValueError, DecodeError):
        return None
    if not file.name or not file.message_type:
        return None
    files = descriptor_pb2.FileDescriptorSet()
    for dependency in file.dependency:
        try:
            known = descriptor_pool.Default().FindFileByName(dependency)
        except KeyError:
            raise SchemaError(
                f"the serialized schema {file.name} imports {dependency}, which is not a "
                "well-known type: give the schema as .proto text"
            ) from None
        known.CopyToProto(files.file.add())
    files.file.add().CopyFrom(file)
    return files.SerializeToString(), file.name


def _protoc(text: str, file_name: str) -> bytes:
    """protoc's FileDescriptorSet (with imports) for one .proto text; SchemaError with protoc's
    first message line when it does not parse."""
    include = str(importlib.resources.files("grpc_tools") / "_proto")  # the well-known types
    with tempfile.TemporaryDirectory(prefix="kafkalog-proto-") as tmp:
        source = Path(tmp) / file_name
        source.write_text(text, encoding="utf-8")
        out = Path(tmp) / "descriptor.pb"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"--proto_path={tmp}",
                f"--proto_path={include}",
                "--include_imports",
                f"--descriptor_set_out={out}",
                file_name,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 or not out.exists():
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            # protoc's own lines name the file; a logging library's notice may come first
            at = re.compile(rf"{re.escape(file_name)}:\d+:\d+: ")
            named = [line for line in lines if at.match(line)] or lines
            why = named[0] if named else f"protoc exited with {done.returncode}"
            why = why.replace(f"{tmp}/", "")
            raise SchemaError(f".proto does not parse: {why}")
        return out.read_bytes()


def parse_proto(
    text: str, message: str | None = None, file_name: str = "schema.proto"
) -> ProtobufSchema:
    """A .proto text as a ProtobufSchema of `message` (its full or short name; default: the
    file's first message, the registry serializers' default)."""
    serialized = _serialized_file(text)
    if serialized is not None:  # what confluent-kafka's ProtobufSerializer registers
        descriptor_set, file_name = serialized
    else:
        descriptor_set = _protoc(text, file_name)
    pool = _pool(descriptor_set)
    file = pool.FindFileByName(file_name)
    names = _message_names(file)
    if not names:
        raise SchemaError(f".proto {file_name} defines no message")
    if message is None:
        chosen = names[0]
    else:
        matches = [n for n in names if n == message or n.rsplit(".", 1)[-1] == message]
        if not matches:
            raise SchemaError(f".proto {file_name} has no message {message!r} (it has {names})")
        chosen = matches[0]
    return ProtobufSchema(
        text=text, descriptor_set=descriptor_set, file_name=file_name, message=chosen
    )


def _message_names(file: Any) -> list[str]:
    """Every message of a file, top level first, then nested ones, by full name."""
    out: list[str] = []

    def walk(descriptors: Sequence[Any]) -> None:
        for d in descriptors:
            if not d.GetOptions().map_entry:
                out.append(d.full_name)
        for d in descriptors:
            walk(list(d.nested_types))

    walk(list(file.message_types_by_name.values()))
    return out


@functools.lru_cache(maxsize=64)
def _pool(descriptor_set: bytes) -> Any:
    """A descriptor pool of its own for each schema (versions of one schema share names)."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set)
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return pool


@functools.lru_cache(maxsize=256)
def _message_class(descriptor_set: bytes, message: str) -> Any:
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(_pool(descriptor_set).FindMessageTypeByName(message))


# --- the schema -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProtobufSchema:
    """A message type: its .proto text (what a registry holds), protoc's descriptors of it (what
    the runtime needs, shipped to tasks as bytes) and the message's full name."""

    text: str
    descriptor_set: bytes
    file_name: str
    message: str

    @property
    def descriptor(self) -> Any:
        return _pool(self.descriptor_set).FindMessageTypeByName(self.message)

    @property
    def message_indexes(self) -> tuple[int, ...]:
        """Where the message is in its file, as the registry framing's message indexes: the
        top-level message's position, then the nested positions down to it."""
        path: list[int] = []
        d = self.descriptor
        while d.containing_type is not None:
            parent = d.containing_type
            path.append([n.full_name for n in parent.nested_types].index(d.full_name))
            d = parent
        path.append(list(d.file.message_types_by_name).index(d.name))
        return tuple(reversed(path))

    def message_at(self, indexes: Sequence[int]) -> str:
        """The full name of the message at registry-framing indexes (empty: the first)."""
        file = self.descriptor.file
        d = None
        try:
            children = list(file.message_types_by_name.values())
            for i in indexes or (0,):
                d = children[i]
                children = list(d.nested_types)
        except IndexError:
            raise SchemaError(
                f"message indexes {list(indexes)} name no message of {self.file_name}"
            ) from None
        assert d is not None
        return d.full_name

    def with_message(self, message: str) -> ProtobufSchema:
        return ProtobufSchema(self.text, self.descriptor_set, self.file_name, message)

    def arrow_type(self) -> pa.DataType:
        """The Arrow struct a decoded record becomes (Spark's from_protobuf types, unsigned
        64-bit as decimal(20, 0), enums as their names, Timestamp as a timestamp)."""
        return _arrow_type(self.descriptor, ())

    def encode(self, values: pa.Array, *, where: str = "value") -> pa.BinaryArray:
        """Each struct of `values` as one serialized message (null rows stay null); a row the
        runtime refuses is a SchemaError naming the row and the field."""
        encoded, misfits = self.encode_rows(values, where=where)
        if misfits:
            row, why = misfits[0]
            raise SchemaError(f"{where}: row {row} does not fit message {self.message}: {why}")
        return encoded

    def encode_rows(
        self, values: pa.Array, *, where: str = "value"
    ) -> tuple[pa.BinaryArray, list[tuple[int, str]]]:
        """`encode` that sets aside the rows the runtime refuses instead of stopping: (the
        messages, those rows null; each such row and why, naming the field)."""
        check_protobuf_schema(self, values.type, where)
        cls = _message_class(self.descriptor_set, self.message)
        rows = _runtime_values(values).to_pylist()
        out: list[bytes | None] = []
        misfits: list[tuple[int, str]] = []
        for index, row in enumerate(rows):
            if row is None:
                out.append(None)
                continue
            try:
                out.append(cls(**row).SerializeToString())
            except (TypeError, ValueError) as e:
                out.append(None)
                misfits.append((index, f"field {_refused_field(cls, row)}: {e}"))
        return pa.array(out, pa.binary()), misfits

    def decoder(self) -> Callable[[bytes], dict[str, Any]]:
        """One record's bytes -> the Python values of `arrow_type()` (ValueError, TypeError or
        the runtime's DecodeError when the bytes are not this message)."""
        cls = _message_class(self.descriptor_set, self.message)
        convert = _converter(self.descriptor)

        def decode(payload: bytes) -> dict[str, Any]:
            return convert(cls.FromString(payload))

        return decode


def _refused_field(cls: Any, row: dict[str, Any], path: str = "") -> str:
    """Where in a refused row the runtime refuses a value: the first field it refuses alone,
    inside nested messages, with a list item's index (asked only of refused rows)."""
    for name, value in row.items():
        here = f"{path}.{name}" if path else name
        try:
            cls(**{name: value})
            continue
        except (TypeError, ValueError):
            pass
        field = cls.DESCRIPTOR.fields_by_name[name]
        if isinstance(value, dict) and field.message_type is not None:
            return _refused_field(type(getattr(cls(), name)), value, here)
        if isinstance(value, list) and _is_repeated(field) and not _is_map(field):
            for i, item in enumerate(value):
                try:
                    cls(**{name: [item]})
                except (TypeError, ValueError):
                    return f"{here}[{i}]"
        return here
    return path or "(the message)"


# --- Arrow <-> the runtime's values ------------------------------------------------------------


def _runtime_values(array: pa.Array) -> pa.Array:
    """The Arrow values in the forms the runtime takes, converted by Arrow and numpy (not per
    value in Python): decimals as text, dates as days, timestamps as Timestamp's
    {seconds, nanos} (a tz-aware datetime per value would cost more than the encode)."""
    t = array.type
    if not _needs_runtime_form(t):
        return array
    if pa.types.is_decimal(t):
        return array.cast(pa.string())
    if pa.types.is_date32(t):
        return array.cast(pa.int32())
    if pa.types.is_timestamp(t):
        per_second = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[t.unit]
        ticks = np.asarray(array.cast(pa.int64()).fill_null(0))
        seconds = np.floor_divide(ticks, per_second)
        nanos = (ticks - seconds * per_second) * (10**9 // per_second)
        return pa.StructArray.from_arrays(
            [pa.array(seconds), pa.array(nanos.astype(np.int32))],
            names=["seconds", "nanos"],
            mask=array.is_null(),
        )
    if pa.types.is_struct(t):
        return pa.StructArray.from_arrays(
            [_runtime_values(child) for child in array.flatten()],
            names=[f.name for f in t],
            mask=array.is_null(),
        )
    if pa.types.is_map(t):
        return pa.MapArray.from_arrays(
            array.offsets, array.keys, _runtime_values(array.items), mask=array.is_null()
        )
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return type(array).from_arrays(
            array.offsets, _runtime_values(array.values), mask=array.is_null()
        )
    return array


def _needs_runtime_form(t: pa.DataType) -> bool:
    if pa.types.is_decimal(t) or pa.types.is_date32(t) or pa.types.is_timestamp(t):
        return True
    if pa.types.is_struct(t):
        return any(_needs_runtime_form(f.type) for f in t)
    if pa.types.is_map(t):
        return _needs_runtime_form(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _needs_runtime_form(t.value_type)
    return False


def _is_map(field: Any) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _is_repeated(field: Any) -> bool:
    return bool(field.is_repeated) if hasattr(field, "is_repeated") else field.label == 3


def _scalar_arrow(field: Any) -> pa.DataType:
    from google.protobuf.descriptor import FieldDescriptor as F

    by_type = {
        F.TYPE_INT32: pa.int32(),
        F.TYPE_SINT32: pa.int32(),
        F.TYPE_SFIXED32: pa.int32(),
        F.TYPE_INT64: pa.int64(),
        F.TYPE_SINT64: pa.int64(),
        F.TYPE_SFIXED64: pa.int64(),
        F.TYPE_UINT32: pa.int64(),
        F.TYPE_FIXED32: pa.int64(),
        F.TYPE_UINT64: pa.decimal128(20, 0),
        F.TYPE_FIXED64: pa.decimal128(20, 0),
        F.TYPE_BOOL: pa.bool_(),
        F.TYPE_FLOAT: pa.float32(),
        F.TYPE_DOUBLE: pa.float64(),
        F.TYPE_STRING: pa.string(),
        F.TYPE_BYTES: pa.binary(),
        F.TYPE_ENUM: pa.string(),
    }
    return by_type[field.type]


def _value_arrow(field: Any, seen: tuple[str, ...]) -> pa.DataType:
    if field.message_type is None:
        return _scalar_arrow(field)
    if field.message_type.full_name == _TIMESTAMP:
        return pa.timestamp("us", tz="UTC")
    return _arrow_type(field.message_type, seen)


def _arrow_type(descriptor: Any, seen: tuple[str, ...]) -> pa.StructType:
    if descriptor.full_name in seen:
        raise SchemaError(
            f"message {descriptor.full_name} contains itself: a recursive message has no "
            "column type"
        )
    seen = (*seen, descriptor.full_name)
    fields = []
    for f in descriptor.fields:
        if _is_map(f):
            key, value = (
                f.message_type.fields_by_name["key"],
                f.message_type.fields_by_name["value"],
            )
            arrow = pa.map_(_scalar_arrow(key), _value_arrow(value, seen))
        elif _is_repeated(f):
            arrow = pa.list_(_value_arrow(f, seen))
        else:
            arrow = _value_arrow(f, seen)
        fields.append(pa.field(f.name, arrow))
    return pa.struct(fields)


def _converter(descriptor: Any) -> Callable[[Any], dict[str, Any]]:
    """A function from a message to the Python values of its Arrow struct, built once per
    message type (the per-record work is attribute reads)."""
    parts: list[tuple[str, Callable[[Any], Any]]] = []
    for f in descriptor.fields:
        parts.append((f.name, _field_reader(f)))

    def convert(message: Any) -> dict[str, Any]:
        return {name: read(message) for name, read in parts}

    return convert


def _single(field: Any) -> Callable[[Any], Any]:
    """Convert one value of a field (not its repeated/map container)."""
    if field.enum_type is not None:
        names = {v.number: v.name for v in field.enum_type.values}
        return lambda v: names.get(v, str(v))
    if field.message_type is None:
        return lambda v: v
    if field.message_type.full_name == _TIMESTAMP:
        return lambda v: v.seconds * 1_000_000 + v.nanos // 1000
    return _converter(field.message_type)


def _field_reader(field: Any) -> Callable[[Any], Any]:
    name = field.name
    one = _single(field)
    if _is_map(field):
        value = _single(field.message_type.fields_by_name["value"])
        return lambda m: [(k, value(v)) for k, v in getattr(m, name).items()]
    if _is_repeated(field):
        return lambda m: [one(v) for v in getattr(m, name)]
    if field.has_presence:
        return lambda m: one(getattr(m, name)) if m.HasField(name) else None
    return lambda m: one(getattr(m, name))


def check_protobuf_schema(schema: ProtobufSchema, arrow_type: pa.DataType, where: str) -> None:
    """Every column must be a field of the message with a type the runtime can take; fields the
    columns do not name keep their defaults. SchemaError names the first misfit."""
    if not pa.types.is_struct(arrow_type):
        raise SchemaError(
            f"{where}: a Protobuf value is a message: expected a struct, got {arrow_type}"
        )
    _check_message(schema.descriptor, arrow_type, where)


def _check_message(descriptor: Any, struct: pa.StructType, where: str) -> None:
    for arrow_field in struct:
        here = f"{where}.{arrow_field.name}"
        proto = descriptor.fields_by_name.get(arrow_field.name)
        if proto is None:
            raise SchemaError(
                f"{here}: message {descriptor.full_name} has no field {arrow_field.name!r}"
            )
        _check_field(proto, arrow_field.type, here)


def _check_field(proto: Any, arrow: pa.DataType, where: str) -> None:
    if _is_map(proto):
        if not pa.types.is_map(arrow):
            raise SchemaError(f"{where}: the message's field is a map, the column is {arrow}")
        entry = proto.message_type.fields_by_name
        _check_single(entry["key"], arrow.key_type, f"{where}.key")
        _check_single(entry["value"], arrow.item_type, f"{where}.value")
    elif _is_repeated(proto):
        if not (pa.types.is_list(arrow) or pa.types.is_large_list(arrow)):
            raise SchemaError(f"{where}: the message's field is repeated, the column is {arrow}")
        _check_single(proto, arrow.value_type, f"{where}[]")
    else:
        _check_single(proto, arrow, where)


def _check_single(proto: Any, arrow: pa.DataType, where: str) -> None:
    from google.protobuf.descriptor import FieldDescriptor as F

    if proto.message_type is not None:
        if proto.message_type.full_name == _TIMESTAMP:
            ok = pa.types.is_timestamp(arrow)
        else:
            ok = pa.types.is_struct(arrow)
            if ok:
                _check_message(proto.message_type, arrow, where)
    elif proto.type == F.TYPE_ENUM:
        ok = (
            pa.types.is_string(arrow)
            or pa.types.is_large_string(arrow)
            or pa.types.is_integer(arrow)
        )
    elif proto.type in (F.TYPE_STRING,):
        ok = (
            pa.types.is_string(arrow)
            or pa.types.is_large_string(arrow)
            or pa.types.is_decimal(arrow)
        )
    elif proto.type == F.TYPE_BYTES:
        ok = pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow)
    elif proto.type == F.TYPE_BOOL:
        ok = pa.types.is_boolean(arrow)
    elif proto.type in (F.TYPE_FLOAT, F.TYPE_DOUBLE):
        ok = pa.types.is_floating(arrow) or pa.types.is_integer(arrow)
    else:  # the integer kinds; the runtime refuses a value out of the field's range per row
        ok = pa.types.is_integer(arrow) or pa.types.is_date32(arrow)
    if not ok:
        raise SchemaError(
            f"{where}: the message's field {proto.name} is {_type_name(proto)}, the column is {arrow}"
        )


def _type_name(proto: Any) -> str:
    if proto.message_type is not None:
        return proto.message_type.full_name
    from google.protobuf.descriptor import FieldDescriptor as F

    names = {v: k[len("TYPE_") :].lower() for k, v in vars(F).items() if k.startswith("TYPE_")}
    return names.get(proto.type, str(proto.type))
