"""What a KRaft broker's own metadata log says about its topics: their ids and their settings.

A log dir copied from a KRaft broker (or a combined broker and controller) holds
`__cluster_metadata-0/`: segments of ordinary v2 record batches (`<offset>.log`) and snapshots
(`<end offset>-<epoch>.checkpoint`, the whole metadata state before the end offset, as batches
too). This module replays them as a broker does when it starts: the newest snapshot, then the
log's records from the snapshot's end offset on; with no snapshot, the log alone. Control
batches (leader changes, snapshot header and footer, KRaft voters) are skipped. Records inside
a metadata transaction (KIP-868) count once its End record is read, and not at all when it is
aborted or never ends. Records are taken up to the log's end: a copied dir holds no high
watermark for the metadata log.

Only what maintenance and `kafkalog place` need is kept (records in
`kafkalog_core.record.metadata`): the live topics (TopicRecord, minus RemoveTopicRecord, which
also deletes the topic's configs and partitions) and the dynamic configs of topics and brokers
(ConfigRecord; a null value deletes a setting). Those records are few next to the
PartitionRecords, so they are picked out by their api key in one vectorized pass over the
values before any is parsed. With `partitions=True` the partitions' replicas, ISR and leader
are kept too (PartitionRecord, then each PartitionChangeRecord applied to it).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from kafkalog_core.errors import KafkaLogError, MetadataRecordError
from kafkalog_core.log.mapped import mapped_file
from kafkalog_core.log.names import CLUSTER_METADATA_TOPIC, offset_from_file_name, segment_log_files
from kafkalog_core.record.decoder import decode_records
from kafkalog_core.record.metadata import (
    CONFIG_RESOURCE_BROKER,
    CONFIG_RESOURCE_TOPIC,
    FRAME_VERSION,
    LEADER_UNCHANGED,
    PARTITION_API_KEYS,
    READ_API_KEYS,
    ConfigRecord,
    MetadataApiKey,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    TransactionRecord,
    metadata_api_key,
    parse_metadata_record,
)

CLUSTER_METADATA_DIR: Final = f"{CLUSTER_METADATA_TOPIC}-0"
SNAPSHOT_SUFFIX: Final = ".checkpoint"  # `.checkpoint.part` / `.checkpoint.deleted` are not read


@dataclass(frozen=True)
class PartitionState:
    """A partition's replica assignment and leadership, as the controller last wrote them."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int  # -1: none (e.g. its only replica's broker is stopped)
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    directories: tuple[uuid.UUID, ...] = ()  # the log dir id of each replica, when assigned

    def directory_of(self, node: int) -> uuid.UUID | None:
        """The log dir id the controller assigned to `node`'s replica, if it did."""
        if node in self.replicas and len(self.directories) == len(self.replicas):
            return self.directories[self.replicas.index(node)]
        return None


@dataclass
class ClusterMetadata:
    """The topics and dynamic configs a metadata log holds, and what was read to know them."""

    topics: dict[str, uuid.UUID] = field(default_factory=dict)  # live topic name -> topic id
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # "" = the cluster-wide default, else a node id: the brokers' dynamic configs (log.*)
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # topic id -> partition -> state; filled only when read with partitions=True
    partitions: dict[uuid.UUID, dict[int, PartitionState]] = field(default_factory=dict)
    read_from: str = ""  # e.g. "snapshot 00000000000000000400-0000000002.checkpoint and the log"

    def replay(self, record: MetadataRecord) -> None:
        """Apply one record, as the broker's metadata image does."""
        if isinstance(record, TopicRecord):
            self.topics[record.name] = record.topic_id
        elif isinstance(record, RemoveTopicRecord):
            self.partitions.pop(record.topic_id, None)
            for name, topic_id in list(self.topics.items()):
                if topic_id == record.topic_id:
                    del self.topics[name]
                    self.topic_configs.pop(name, None)
        elif isinstance(record, PartitionRecord):
            self.partitions.setdefault(record.topic_id, {})[record.partition] = PartitionState(
                record.replicas,
                record.isr,
                record.leader,
                record.adding_replicas,
                record.removing_replicas,
                record.directories,
            )
        elif isinstance(record, PartitionChangeRecord):
            self._change(record)
        elif isinstance(record, ConfigRecord):
            if record.resource_type == CONFIG_RESOURCE_TOPIC:
                self._set(self.topic_configs, record)
            elif record.resource_type == CONFIG_RESOURCE_BROKER:
                self._set(self.broker_configs, record)

    def _change(self, record: PartitionChangeRecord) -> None:
        """PartitionRegistration.merge: the fields the record carries replace the old ones."""
        state = self.partitions.get(record.topic_id, {}).get(record.partition)
        if state is None:
            return  # a change of a partition this replay never saw created
        changes: dict[str, object] = {}
        for name in ("isr", "replicas", "adding_replicas", "removing_replicas", "directories"):
            value = getattr(record, name)
            if value is not None:
                changes[name] = value
        if record.replicas is not None and record.directories is None:
            changes["directories"] = ()  # new replicas, no directory known for them
        if record.leader != LEADER_UNCHANGED:
            changes["leader"] = record.leader
        self.partitions[record.topic_id][record.partition] = replace(state, **changes)

    def partitions_of(self, topic: str) -> dict[int, PartitionState] | None:
        """A live topic's partitions (read with partitions=True); None when there is no such
        topic."""
        if topic not in self.topics:
            return None
        return dict(self.partitions.get(self.topics[topic], {}))

    @staticmethod
    def _set(configs: dict[str, dict[str, str]], record: ConfigRecord) -> None:
        settings = configs.setdefault(record.resource_name, {})
        if record.value is None:
            settings.pop(record.name, None)
        else:
            settings[record.name] = record.value
        if not settings:
            del configs[record.resource_name]

    def settings_of(self, topic: str) -> dict[str, str] | None:
        """A live topic's dynamic settings (Kafka names); None when the metadata has no such topic."""
        if topic not in self.topics:
            return None
        return dict(self.topic_configs.get(topic, {}))


def _snapshots(pdir: Path) -> list[Path]:
    """The complete snapshots, oldest first (end offset, then epoch, as in their names)."""
    found = []
    for path in pdir.iterdir():
        if path.name.endswith(SNAPSHOT_SUFFIX):
            try:
                end, epoch = path.name[: -len(SNAPSHOT_SUFFIX)].split("-")
                found.append(((int(end), int(epoch)), path))
            except ValueError:
                continue  # not a name Kafka writes
    return [path for _, path in sorted(found)]


def _values(path: Path, from_offset: int, api_keys: Collection[int]) -> list[bytes]:
    """The values of the records of `path` at or above `from_offset` whose api key is read here
    (control batches skipped), in offset order."""
    with mapped_file(path) as view:
        table = decode_records(view, verify=True)
    if from_offset > 0:
        table = table.filter(pc.greater_equal(table.column("offset"), from_offset))
    values = table.column("value")
    if len(values) == 0:
        return []
    frames = pc.binary_slice(values, 0, 1)
    bad = pc.fill_null(pc.not_equal(frames, pa.scalar(bytes([FRAME_VERSION]))), True)
    if pc.any(bad).as_py():  # one the vectorized key test cannot judge: say what is wrong
        metadata_api_key(values.filter(bad)[0].as_py() or b"")
        raise MetadataRecordError("a metadata record with a frame version this reader cannot read")
    # Every api key is below 128 so far, so its varint is the one byte after the frame version.
    keys = pc.binary_slice(values, 1, 2)
    wanted = pa.array([bytes([k]) for k in sorted(api_keys)], pa.binary())
    return values.filter(pc.is_in(keys, value_set=wanted)).to_pylist()


def read_cluster_metadata(
    log_dir: str | os.PathLike[str], *, partitions: bool = False
) -> ClusterMetadata | None:
    """The metadata of `log_dir/__cluster_metadata-0`; None when the dir has no such log.
    `partitions`: keep every partition's replicas and leader too (most of the log's records)."""
    pdir = Path(log_dir) / CLUSTER_METADATA_DIR
    if not pdir.is_dir():
        return None
    snapshots = _snapshots(pdir)
    metadata = ClusterMetadata()
    sources: list[tuple[Path, int]] = []
    start = 0
    if snapshots:
        start = int(snapshots[-1].name.split("-")[0])
        sources.append((snapshots[-1], 0))
    logs = segment_log_files(pdir)
    for i, path in enumerate(logs):
        after = offset_from_file_name(logs[i + 1].name) if i + 1 < len(logs) else None
        if after is None or after > start:  # a segment wholly below the snapshot is skipped
            sources.append((path, start))
    api_keys = READ_API_KEYS if partitions else READ_API_KEYS - PARTITION_API_KEYS
    pending: list[MetadataRecord] | None = None  # the records of an open metadata transaction
    for path, from_offset in sources:
        try:
            for value in _values(path, from_offset, api_keys):
                record = parse_metadata_record(value)
                if isinstance(record, TransactionRecord):
                    if record.api_key is MetadataApiKey.END_TRANSACTION:
                        for held in pending or ():
                            metadata.replay(held)
                    pending = [] if record.api_key is MetadataApiKey.BEGIN_TRANSACTION else None
                elif pending is not None and record is not None:
                    pending.append(record)
                elif record is not None:
                    metadata.replay(record)
        except KafkaLogError as error:
            raise MetadataRecordError(
                f"broker metadata {CLUSTER_METADATA_DIR}/{path.name}: {error}"
            ) from None
    metadata.read_from = (
        f"snapshot {snapshots[-1].name} and the log from offset {start}"
        if snapshots
        else "the log (no snapshot)"
    )
    return metadata
