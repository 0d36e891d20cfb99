"""Topic ids: Kafka's Uuid strings, usable ids, name-derived ids (§9).

`topic_id_to_str` / `topic_id_from_str` are Kafka's Uuid.toString / fromString (base64url, 22
characters); `topic_id_for_name` gives the fixed, name-derived id two runs of the same input
share. `partition.metadata` (partition_metadata.py) and `meta.properties`' directory.id store
ids in this form.
"""

from __future__ import annotations

import base64
import re
import uuid

ZERO_UUID = uuid.UUID(int=0)
METADATA_TOPIC_ID = uuid.UUID(int=1)
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")


def topic_id_to_str(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: the 16 bytes in base64url without padding (22 chars)."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def topic_id_from_str(text: str) -> uuid.UUID:
    """Kafka's Uuid.fromString; ValueError unless it decodes to exactly 16 bytes."""
    if len(text) > 24:
        raise ValueError(
            f"Input string with prefix `{text[:24]}` is too long to be decoded as a base64 UUID"
        )
    if not _BASE64URL.fullmatch(text):
        raise ValueError(f"Input string `{text}` is not base64url")
    try:
        raw = base64.urlsafe_b64decode(text.rstrip("=") + "=" * (-len(text.rstrip("=")) % 4))
    except ValueError:
        raise ValueError(f"Input string `{text}` is not valid base64url") from None
    if len(raw) != 16:
        raise ValueError(
            f"Input string `{text}` decoded as {len(raw)} bytes, which is not equal to the "
            f"expected 16 bytes of a base64-encoded UUID"
        )
    return uuid.UUID(bytes=raw)


def new_topic_id() -> uuid.UUID:
    """A random topic id Kafka would accept: not zero, not the metadata topic id, no leading '-'."""
    while True:
        candidate = uuid.uuid4()
        if is_usable_topic_id(candidate):
            return candidate


# The fixed namespace of name-based topic ids: uuid5(NAMESPACE_URL, "kafkalog:topic-id").
# Never change it: every log dir written without an explicit topic id depends on it.
TOPIC_ID_NAMESPACE = uuid.UUID("a0e7f2de-f507-501a-90c6-bab9890cc26e")


def is_usable_topic_id(topic_id: uuid.UUID) -> bool:
    """Kafka accepts it: not zero, not the metadata topic's id, no leading '-' in its string."""
    return topic_id not in (ZERO_UUID, METADATA_TOPIC_ID) and not topic_id_to_str(
        topic_id
    ).startswith("-")


def topic_id_for_name(topic: str) -> uuid.UUID:
    """The deterministic topic id of a topic name: uuid5(TOPIC_ID_NAMESPACE, topic).

    Why: two runs of the same input must give byte-identical partition.metadata. In the
    unlikely case the id is not usable (see `is_usable_topic_id`), `topic + "\\0" + k` is hashed
    for k = 1, 2, ... until it is.
    """
    candidate = uuid.uuid5(TOPIC_ID_NAMESPACE, topic)
    k = 0
    while not is_usable_topic_id(candidate):
        k += 1
        candidate = uuid.uuid5(TOPIC_ID_NAMESPACE, f"{topic}\0{k}")
    return candidate
