"""The writer schemas of a log dir's runs, kept with the output: every schema a run framed its
keys or values with, by subject and schema id, so the topic reads back without a registry.

An ingest or a `format("kafkalog")` write with `schema_id` and no registry derives its schema
from the columns (or reads a local file) and frames each value with the id; the schema itself
would otherwise live nowhere. Each run records it here before it publishes:

    <meta area>/schemas/<subject>/<schema id>.<avsc|proto|json>   the schema's text
    <meta area>/schemas/<subject>/latest                           the id the last run wrote

The subject is TopicNameStrategy's `<topic>-<key|value>`, the one a read of the topic asks
for. A read with a format and no schema finds every id its values' five-byte headers may name
here, and reads with the latest (a registry URL, when given, wins). An id holds one schema for
good: a run that frames with a recorded id but another schema is refused, because the records
already written under that id would no longer decode.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from kafkalog_core.errors import SchemaError
from kafkalog_core.log.checkpoints.checkpoint_file import atomic_write
from kafkalog_core.root.meta_area import meta_root

__all__ = ["SCHEMAS_DIR", "StoredSchemas", "WriterSchemaStore"]

SCHEMAS_DIR = "schemas"
_EXTENSIONS = {"avro": "avsc", "protobuf": "proto", "json_schema": "json"}
_LATEST = "latest"


@dataclass(frozen=True)
class StoredSchemas:
    """One subject's recorded schemas: format, schema text by id, and the id written last."""

    subject: str
    format: str
    texts: dict[int, str]
    latest: int


def _same(fmt: str, a: str, b: str) -> bool:
    if fmt == "protobuf":
        return a.strip() == b.strip()
    try:
        return json.loads(a) == json.loads(b)
    except json.JSONDecodeError:
        return a == b


class WriterSchemaStore:
    """The schemas directory of one output root's meta area."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    @classmethod
    def of_output(cls, output_root: str | os.PathLike[str]) -> WriterSchemaStore:
        """The store of an output root (a log dir), in its meta area."""
        return cls(meta_root(output_root) / SCHEMAS_DIR)

    def _subject_dir(self, subject: str) -> Path:
        if not subject or "/" in subject or subject in (".", ".."):
            raise SchemaError(f"subject {subject!r} cannot name a directory of {self.directory}")
        return self.directory / subject

    def record(self, subject: str, fmt: str, schema_id: int, text: str) -> None:
        """Keep `text` as `subject`'s schema `schema_id` and make it the latest; refused when
        the id already holds another schema (or the subject another format)."""
        folder = self._subject_dir(subject)
        stored = self.load(subject)
        if stored is not None and stored.format != fmt:
            raise SchemaError(
                f"{subject}: the output's values are {stored.format} ({folder}); this run "
                f"writes {fmt}"
            )
        if stored is not None and schema_id in stored.texts:
            if not _same(fmt, stored.texts[schema_id], text):
                raise SchemaError(
                    f"{subject}: schema id {schema_id} already names another schema "
                    f"({folder / f'{schema_id}.{_EXTENSIONS[fmt]}'}), which the records written "
                    "with it need; frame this schema with a new schema_id"
                )
        else:
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write(folder / f"{schema_id}.{_EXTENSIONS[fmt]}", text.encode())
        if stored is None or stored.latest != schema_id:
            atomic_write(folder / _LATEST, f"{schema_id}\n".encode())

    def load(self, subject: str) -> StoredSchemas | None:
        """The subject's recorded schemas, or None when no run recorded one."""
        folder = self._subject_dir(subject)
        texts: dict[int, str] = {}
        formats = set()
        for fmt, ext in _EXTENSIONS.items():
            for file in folder.glob(f"*.{ext}"):
                if file.stem.isdigit():
                    texts[int(file.stem)] = file.read_text(encoding="utf-8")
                    formats.add(fmt)
        if not texts:
            return None
        if len(formats) > 1:
            raise SchemaError(f"{folder}: holds schemas of {sorted(formats)}; one format only")
        try:
            latest = int((folder / _LATEST).read_text().strip())
        except (OSError, ValueError):
            latest = max(texts)
        return StoredSchemas(
            subject, formats.pop(), texts, latest if latest in texts else max(texts)
        )
