"""A stand-in for a Confluent Schema Registry, for tests: a small HTTP server on 127.0.0.1.

It is not a registry. It speaks the documented REST subset that kafkalog's client calls
(confluent-kafka's `SchemaRegistryClient`):

    POST /subjects/{subject}/versions          register (the same schema twice: the same id)
    GET  /subjects/{subject}/versions          version numbers
    GET  /subjects/{subject}/versions/{v}      a version, or `latest`
    POST /subjects/{subject}                   look a schema up under a subject
    GET  /schemas/ids/{id}                     a schema by id
    POST /compatibility/subjects/{subject}/versions/{v}

with the registry's error bodies (`{"error_code": 40401, "message": ...}`), optional HTTP
basic auth, and BACKWARD compatibility for Avro only, judged by the Apache `avro` package's
reader/writer checker: a new version must read data written with the latest one. Protobuf and
JSON schemas are accepted as they come. Ids are global, as a registry's: one schema text under
several subjects has one id.
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlparse

__all__ = ["StandInRegistry"]


@dataclass
class _State:
    schemas: list[tuple[str, str]] = field(default_factory=list)  # id - 1 -> (type, text)
    subjects: dict[str, list[int]] = field(default_factory=dict)  # subject -> ids by version
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path) seen


def _avro_incompatibility(new: str, old: str) -> str | None:
    """Why `new` cannot read data written with `old` (Avro's BACKWARD rule), or None."""
    import avro.compatibility
    import avro.schema

    reader, writer = avro.schema.parse(new), avro.schema.parse(old)
    result = avro.compatibility.ReaderWriterCompatibilityChecker().get_compatibility(reader, writer)
    if result.compatibility is avro.compatibility.SchemaCompatibilityType.compatible:
        return None
    return (
        f"{sorted(str(i.name) for i in result.incompatibilities)} at "
        f"{sorted(result.locations)}: {sorted(result.messages)}"
    )


def _same(schema_type: str, a: str, b: str) -> bool:
    if schema_type == "PROTOBUF":
        return a == b
    try:
        return json.loads(a) == json.loads(b)
    except json.JSONDecodeError:
        return a == b


class StandInRegistry:
    """Start with `with StandInRegistry() as registry:`; `registry.url` is its address."""

    def __init__(self, auth: tuple[str, str] | None = None) -> None:
        self.state = _State()
        self._lock = threading.Lock()
        self._auth = (
            None if auth is None else "Basic " + base64.b64encode(":".join(auth).encode()).decode()
        )
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> StandInRegistry:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    # the registry's operations ------------------------------------------------------------

    def register(self, subject: str, schema: str, schema_type: str = "AVRO") -> int:
        """Register directly (test setup); the HTTP path calls the same."""
        status, body = self._register(subject, {"schema": schema, "schemaType": schema_type})
        if status != 200:
            raise ValueError(body["message"])
        return int(body["id"])

    def _id_of(self, schema_type: str, schema: str) -> int | None:
        """The id of this schema; Avro and JSON schemas compare as parsed JSON (a registry
        compares canonical forms: whitespace and key order do not make a new schema)."""
        for number, (known_type, known) in enumerate(self.state.schemas, 1):
            if known_type == schema_type and _same(schema_type, known, schema):
                return number
        return None

    def _register(self, subject: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        schema_type = body.get("schemaType", "AVRO")
        schema = body.get("schema")
        if not isinstance(schema, str):
            return 422, {"error_code": 42201, "message": "Invalid schema: no schema"}
        if schema_type == "AVRO":
            import avro.errors
            import avro.schema

            try:
                avro.schema.parse(schema)
            except (avro.errors.AvroException, json.JSONDecodeError) as e:
                return 422, {"error_code": 42201, "message": f"Invalid schema {e}"}
        with self._lock:
            versions = self.state.subjects.get(subject, [])
            existing = self._id_of(schema_type, schema)
            if existing is not None and existing in versions:
                return 200, {"id": existing}
            if versions:
                why = self._incompatibility(schema_type, schema, versions[-1])
                if why is not None:
                    return 409, {
                        "error_code": 409,
                        "message": "Schema being registered is incompatible with an earlier "
                        f'schema for subject "{subject}", details: {why}',
                    }
            if existing is None:
                self.state.schemas.append((schema_type, schema))
                existing = len(self.state.schemas)
            self.state.subjects.setdefault(subject, []).append(existing)
            return 200, {"id": existing}

    def _incompatibility(self, schema_type: str, schema: str, latest_id: int) -> str | None:
        old_type, old = self.state.schemas[latest_id - 1]
        if old_type != schema_type:
            return f"schema type {schema_type} after {old_type}"
        if schema_type != "AVRO":
            return None
        return _avro_incompatibility(schema, old)

    def _version_body(self, subject: str, version: int) -> dict[str, Any]:
        schema_id = self.state.subjects[subject][version - 1]
        schema_type, schema = self.state.schemas[schema_id - 1]
        body = {"subject": subject, "version": version, "id": schema_id, "schema": schema}
        if schema_type != "AVRO":  # the registry leaves the default type out
            body["schemaType"] = schema_type
        return body

    def _version_number(self, subject: str, text: str) -> int | None:
        versions = self.state.subjects[subject]
        if text in ("latest", "-1"):
            return len(versions)
        try:
            number = int(text)
        except ValueError:
            return None
        return number if 1 <= number <= len(versions) else None

    def handle(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        """One request -> (status, JSON body)."""
        self.state.requests.append((method, path))
        parts = [unquote(p) for p in path.strip("/").split("/")]
        not_found = 404, {"error_code": 404, "message": "HTTP 404 Not Found"}
        if parts[:2] == ["schemas", "ids"] and len(parts) == 3 and method == "GET":
            try:
                number = int(parts[2])
            except ValueError:
                return not_found
            if not 1 <= number <= len(self.state.schemas):
                return 404, {"error_code": 40403, "message": f"Schema {number} not found"}
            schema_type, schema = self.state.schemas[number - 1]
            out = {"schema": schema}
            if schema_type != "AVRO":
                out["schemaType"] = schema_type
            return 200, out
        compatibility = parts[:2] == ["compatibility", "subjects"]
        if compatibility:
            parts = parts[1:]
        if not parts or parts[0] != "subjects" or len(parts) < 2:
            return not_found
        subject = parts[1]
        if method == "POST" and parts[2:] == ["versions"] and not compatibility:
            return self._register(subject, body or {})
        if subject not in self.state.subjects:
            return 404, {"error_code": 40401, "message": f"Subject '{subject}' not found."}
        if method == "POST" and len(parts) == 2:  # lookup
            body = body or {}
            schema_id = self._id_of(body.get("schemaType", "AVRO"), str(body.get("schema")))
            versions = self.state.subjects[subject]
            if schema_id is None or schema_id not in versions:
                return 404, {"error_code": 40403, "message": "Schema not found"}
            return 200, self._version_body(subject, versions.index(schema_id) + 1)
        if len(parts) == 3 and parts[2] == "versions" and method == "GET":
            return 200, list(range(1, len(self.state.subjects[subject]) + 1))
        if len(parts) == 4 and parts[2] == "versions":
            version = self._version_number(subject, parts[3])
            if version is None:
                return 404, {"error_code": 40402, "message": f"Version {parts[3]} not found."}
            if method == "GET" and not compatibility:
                return 200, self._version_body(subject, version)
            if method == "POST" and compatibility:
                body = body or {}
                why = self._incompatibility(
                    body.get("schemaType", "AVRO"),
                    str(body.get("schema")),
                    self.state.subjects[subject][version - 1],
                )
                out: dict[str, Any] = {"is_compatible": why is None}
                if why is not None:
                    out["messages"] = [why]
                return 200, out
        return not_found

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, method: str) -> None:
                if (
                    registry._auth is not None
                    and self.headers.get("Authorization") != registry._auth
                ):
                    self._send(401, {"error_code": 401, "message": "Unauthorized"})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                status, out = registry.handle(method, urlparse(self.path).path, body)
                self._send(status, out)

            def _send(self, status: int, out: Any) -> None:
                data = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 (http.server's names)
                self._answer("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._answer("POST")

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        return Handler
