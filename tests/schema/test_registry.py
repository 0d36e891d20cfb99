"""The registry client (confluent-kafka's) against the stand-in registry: lookups, versions,
registration, a compatibility refusal, basic auth from an env var, unreachable registries, all
as one RegistryError line. The stand-in is a local HTTP server that stands in for a registry."""

from __future__ import annotations

import json
import socket

import pytest

from jobs.schemas.registry import Registry, subject_name
from jobs.schemas.settings import RegistrySettings
from kafkalog_core.errors import ConfigError, RegistryError
from tests.schema.orders import AVRO_V1, AVRO_V2, text
from tests.schema.standin_registry import StandInRegistry

V1, V2 = text(AVRO_V1), text(AVRO_V2)
# drops nothing but adds a field without a default: cannot read v2's data
BREAKING = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}],
    }
)


def test_register_lookup_versions_and_ids(registry: StandInRegistry) -> None:
    client = Registry(RegistrySettings(url=registry.url))
    first = client.register("orders-value", V1, "AVRO")
    second = client.register("orders-value", V2, "AVRO")
    assert second.schema_id != first.schema_id
    assert client.register("orders-value", V1, "AVRO").schema_id == first.schema_id
    latest = client.version("orders-value", None)
    assert (latest.schema_id, latest.version, latest.schema) == (second.schema_id, 2, V2)
    assert client.version("orders-value", 1).schema == V1
    assert [v.schema_id for v in client.versions("orders-value")] == [
        first.schema_id,
        second.schema_id,
    ]
    assert client.schema(first.schema_id).schema == V1
    assert client.lookup("orders-value", V2, "AVRO").version == 2
    # one schema under two subjects has one id, as in a registry
    assert client.register("other-value", V1, "AVRO").schema_id == first.schema_id


def test_incompatible_registration_is_one_line_naming_subject_and_reason(
    registry: StandInRegistry,
) -> None:
    client = Registry(RegistrySettings(url=registry.url))
    client.register("orders-value", V2, "AVRO")
    with pytest.raises(RegistryError) as refused:
        client.register("orders-value", BREAKING, "AVRO")
    message = str(refused.value)
    assert "\n" not in message
    assert "subject 'orders-value' refused the schema as incompatible" in message
    assert "amount" in message  # the reason: the new field without a default


def test_unknown_subject_version_and_id(registry: StandInRegistry) -> None:
    client = Registry(RegistrySettings(url=registry.url))
    with pytest.raises(RegistryError, match=r"subject 'nope-value' version latest: .*40401"):
        client.version("nope-value", None)
    client.register("orders-value", V1, "AVRO")
    with pytest.raises(RegistryError, match=r"version 7: .*40402"):
        client.version("orders-value", 7)
    with pytest.raises(RegistryError, match=r"schema id 99: .*40403"):
        client.schema(99)
    with pytest.raises(RegistryError, match="does not hold the given schema"):
        client.lookup("orders-value", V2, "AVRO")


def test_unreachable_registry_names_the_url() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    client = Registry(RegistrySettings(url=url, max_retries=0))
    with pytest.raises(RegistryError, match=rf"schema registry {url} cannot be reached"):
        client.version("orders-value", None)


def test_basic_auth_from_the_named_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    with StandInRegistry(auth=("reader", "s3cret")) as server:
        settings = RegistrySettings(url=server.url, basic_auth_env="KAFKALOG_TEST_REGISTRY_AUTH")
        monkeypatch.delenv("KAFKALOG_TEST_REGISTRY_AUTH", raising=False)
        with pytest.raises(ConfigError, match="KAFKALOG_TEST_REGISTRY_AUTH is not set"):
            Registry(settings)
        monkeypatch.setenv("KAFKALOG_TEST_REGISTRY_AUTH", "reader:wrong")
        with pytest.raises(RegistryError, match="HTTP 401") as refused:
            Registry(settings).register("orders-value", V1, "AVRO")
        assert "wrong" not in str(refused.value)
        monkeypatch.setenv("KAFKALOG_TEST_REGISTRY_AUTH", "reader:s3cret")
        assert Registry(settings).register("orders-value", V1, "AVRO").schema_id == 1
        assert "s3cret" not in repr(settings)


def test_subject_name_strategies() -> None:
    assert subject_name("topic", "orders", "value", None, "value") == "orders-value"
    assert subject_name("topic", "orders", "key", "shop.Order", "key") == "orders-key"
    assert subject_name("record", None, "value", "shop.Order", "value") == "shop.Order"
    assert subject_name("topic_record", "orders", "value", "shop.Order", "v") == "orders-shop.Order"
    with pytest.raises(ConfigError, match="needs the topic"):
        subject_name("topic", None, "value", None, "value")
    with pytest.raises(ConfigError, match="needs the record name"):
        subject_name("record", "orders", "value", None, "value")


def test_mock_registry_of_confluent_kafka_speaks_the_same_client() -> None:
    """confluent-kafka's in-process mock:// registry, in this unit test only."""
    client = Registry(RegistrySettings(url="mock://kafkalog-unit"))
    schema_id = client.register("orders-value", V1, "AVRO").schema_id
    assert client.version("orders-value", None).schema_id == schema_id


def test_tls_settings_reach_the_client_and_secrets_stay_in_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KAFKALOG_TEST_KEY_PASSWORD", "k3y")
    monkeypatch.setenv("KAFKALOG_TEST_REGISTRY_AUTH", "u:p4ss")
    settings = RegistrySettings(
        url="https://registry:8081",
        ssl_ca_location="/etc/ssl/ca.pem",
        ssl_certificate_location="/etc/ssl/client.pem",
        ssl_key_location="/etc/ssl/client.key",
        ssl_key_password_env="KAFKALOG_TEST_KEY_PASSWORD",
        basic_auth_env="KAFKALOG_TEST_REGISTRY_AUTH",
    )
    config = settings.client_config()
    assert config["ssl.ca.location"] == "/etc/ssl/ca.pem"
    assert config["ssl.certificate.location"] == "/etc/ssl/client.pem"
    assert config["ssl.key.location"] == "/etc/ssl/client.key"
    assert config["ssl.key.password"] == "k3y" and config["basic.auth.user.info"] == "u:p4ss"
    assert "k3y" not in repr(settings) and "p4ss" not in repr(settings)
    monkeypatch.setenv("KAFKALOG_TEST_REGISTRY_AUTH", "no-colon")
    with pytest.raises(ConfigError, match="must hold user:password"):
        settings.client_config()
