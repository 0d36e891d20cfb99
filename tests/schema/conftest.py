"""The stand-in registry (tests/schema/standin_registry.py): a local HTTP server on 127.0.0.1
that stands in for a Schema Registry, one per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.schema.standin_registry import StandInRegistry


@pytest.fixture
def registry() -> Iterator[StandInRegistry]:
    with StandInRegistry() as server:
        yield server
