"""`kafkalog place`: put ingested partitions into a stopped KRaft broker's log dir(s).

    kafkalog place OUTPUT LOG_DIR [LOG_DIR ...] --topic orders            # dry run: the plan
    kafkalog place OUTPUT LOG_DIR [LOG_DIR ...] --topic orders --apply    # do it

The broker's own `__cluster_metadata-0` says what the cluster expects (`read_cluster_metadata`
with partitions): the topic's id, its partition count, each partition's replicas and the log
dir assigned to each, and its dynamic configs. Everything is checked before anything is
written, under the broker's own lock (`.lock`, the fcntl lock Kafka's FileLock takes), so a
running broker is refused and a broker started meanwhile cannot load a half-placed dir.
The output root is read under its run lock, shared as the read-only jobs share it, so no
ingest or maintenance run changes it while it is copied. Refused, each with one line and nothing
changed:
- an output root a run that writes holds (its run lock), or one a killed run left half-done: an
  interrupted publish (its journal; the next ingest run settles it) or an open compaction round
  of a placed partition (its journal; a rerun of compact settles it);
- a log dir a broker holds (it is running), one without `meta.properties`, one of another
  cluster (`cluster.id`);
- a topic the metadata does not hold, or a `--topic-id` / ingest `topic_id` that is not its id;
- a partition count other than the cluster's; settings (`--topic-config`) other than the
  cluster's;
- a partition with a replica on a broker whose log dir is not placed in the same run: that
  empty replica could lead, and the loaded one, as its follower, would truncate to it (the
  data is gone). Create the topic with one replica, place it, start, then reassign;
- a broker partition dir that holds records (unless they are exactly this placement's).

Per partition and replica (`apply_plan`): the output's files are copied into the broker's log
dir as `<topic>-<p>.kafkalog-staged-delete` (each file through `.tmp`, fsynced, then the dir),
with `partition.metadata` holding the cluster's topic id; the broker's empty dir for the
partition, if any, and the staged dir swap names in one step (renameat2 RENAME_EXCHANGE; where
the file system cannot, the empty dir is renamed to `<topic>-<p>.kafkalog-replaced-delete`
first), the log dir is fsynced and the broker's old dir removed. Then the root's
replication-offset, recovery-point and log-start-offset checkpoints take kafkalog's entries for
the placed partitions (an entry kafkalog's root lacks is dropped: a stale log start above the
log end would delete the placed segments), each written atomically. A kill leaves every
partition either the broker's or fully placed: a leftover `-delete` dir is one a broker that
starts first deletes itself, and a rerun copies again, recognizes what it placed by its
segments' names and sizes, and finishes the checkpoints. Finally `check-logdir` runs on every
log dir written.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TextIO

from kafkalog_core.config import LogConfig, dynamic_broker_defaults
from kafkalog_core.errors import ConfigError, KafkaLogError, LogDirError
from kafkalog_core.log.checkpoints import (
    LeaderEpochCheckpointFile,
    MetaProperties,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    TopicPartition,
    atomic_write,
    fsync_dir,
    topic_id_for_name,
    topic_id_to_str,
)
from kafkalog_core.log.cluster_metadata import (
    CLUSTER_METADATA_DIR,
    ClusterMetadata,
    PartitionState,
    read_cluster_metadata,
)
from kafkalog_core.log.names import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOCK_FILE,
    LOG_FILE_SUFFIX,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    META_PROPERTIES_FILE,
    PARTITION_METADATA_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    delete_dir_name,
    live_partition_dirs,
    partition_dir_name,
)
from kafkalog_core.log.segment.scan import DEFAULT_INDEX_INTERVAL_BYTES
from kafkalog_core.root.meta_area import compact_journal_path, publish_journal_path
from kafkalog_core.root.run_lock import ReadLock
from kafkalog_core.tools.check_logdir import run_check_logdir

# the root checkpoints whose entries for the placed partitions become kafkalog's (docs/broker.md)
MERGED_CHECKPOINTS: Final = (
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
)
STAGED: Final = "kafkalog-staged"  # `<topic>-<p>.kafkalog-staged-delete`: the copy being made
REPLACED: Final = "kafkalog-replaced"  # the broker's empty dir, on its way out
_AT_FDCWD: Final = -100
_RENAME_EXCHANGE: Final = 2
# settings shown for a topic when no --topic-config names what the ingest used
SHOWN_SETTINGS: Final = ("cleanup.policy", "retention.ms", "retention.bytes")


@dataclass(frozen=True)
class BrokerDir:
    """One log dir of a broker, as its meta.properties describes it."""

    path: Path
    node_id: int
    cluster_id: str
    directory_id: uuid.UUID | None


@dataclass(frozen=True)
class Move:
    """One replica of one partition: the output's dir copied to a broker's log dir."""

    topic: str
    partition: int
    source: Path
    target: BrokerDir
    topic_id: uuid.UUID
    replaces: bool  # the broker holds an empty dir for the partition
    placed: bool  # a run already placed it (its segments are the output's)

    @property
    def name(self) -> str:
        return partition_dir_name(self.topic, self.partition)

    @property
    def dest(self) -> Path:
        return self.target.path / self.name

    @property
    def staged(self) -> Path:
        return self.target.path / delete_dir_name(self.topic, self.partition, STAGED)

    @property
    def replaced(self) -> Path:
        return self.target.path / delete_dir_name(self.topic, self.partition, REPLACED)


@dataclass
class PlacePlan:
    """What `apply_plan` does: the moves, then per log dir the checkpoint files it writes."""

    output_root: Path
    metadata_from: str
    moves: list[Move] = field(default_factory=list)
    # log dir -> checkpoint file name -> its whole new contents (files that change only)
    checkpoints: dict[Path, dict[str, dict[TopicPartition, int]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # the cluster's index.interval.bytes for the placed topics: what check-logdir compares with
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES

    def lines(self) -> list[str]:
        out = [f"cluster metadata: {self.metadata_from}", *self.notes]
        for move in self.moves:
            if move.placed:
                out.append(f"{move.dest}: already placed")
                continue
            logs = sorted(p for p in move.source.iterdir() if p.name.endswith(LOG_FILE_SUFFIX))
            size = sum(p.stat().st_size for p in logs)
            what = "replaces the broker's empty dir" if move.replaces else "new dir"
            out.append(
                f"{move.dest}: from {move.source} ({len(logs)} segments, {size} bytes; {what}; "
                f"topic id {topic_id_to_str(move.topic_id)})"
            )
        for log_dir, files in self.checkpoints.items():
            for name, contents in files.items():
                placed = {_tp(m) for m in self.moves if m.target.path == log_dir}
                mine = ", ".join(
                    f"{t}-{p}={contents.get((t, p), 'dropped')}" for t, p in sorted(placed)
                )
                out.append(f"{log_dir / name}: {mine}")
        return out


def _tp(move: Move) -> TopicPartition:
    return (move.topic, move.partition)


# ---- the broker's lock ---------------------------------------------------------------------------
@contextlib.contextmanager
def broker_locks(log_dirs: Sequence[Path], *, create: bool) -> Iterator[None]:
    """Hold every log dir's `.lock` as a broker does (an fcntl lock, which is what Java's
    FileChannel.tryLock takes on Linux): a running broker holds it, so taking it fails; and a
    broker started while this holds it refuses to start. Without `create`, a dir with no
    `.lock` yet is only checked, not written."""
    fds: list[int] = []
    try:
        for log_dir in log_dirs:
            path = log_dir / LOCK_FILE
            if not log_dir.is_dir() or (not create and not path.exists()):
                continue  # a missing log dir is refused by the plan
            fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
            fds.append(fd)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise LogDirError(
                    f"{path} is locked: a broker is running on {log_dir}; stop it "
                    "(kafka-server-stop.sh) and wait until its process is gone"
                ) from None
        yield
    finally:
        for fd in fds:
            os.close(fd)  # closing drops the lock


# ---- the plan ------------------------------------------------------------------------------------
def _broker_dir(path: Path) -> BrokerDir:
    if not path.is_dir():
        raise LogDirError(f"broker log dir {path} does not exist")
    meta_file = path / META_PROPERTIES_FILE
    if not meta_file.is_file():
        raise LogDirError(
            f"{path} has no {META_PROPERTIES_FILE}: not a formatted broker log dir "
            "(kafka-storage.sh format, then start the broker once)"
        )
    meta = MetaProperties.read(meta_file)
    if meta.version != 1 or meta.cluster_id is None or meta.node_id is None:
        raise LogDirError(f"{meta_file} is not a KRaft broker's (version 1, cluster.id, node.id)")
    return BrokerDir(path, meta.node_id, meta.cluster_id, meta.directory_id)


def _effective_settings(
    metadata: ClusterMetadata, topic: str, nodes: Sequence[int]
) -> tuple[dict[str, str], dict[str, str]]:
    """The cluster's settings for `topic` (topic configs over the brokers' dynamic defaults)
    and where each came from. A broker's static server.properties is not in the metadata."""
    settings: dict[str, str] = {}
    sources: dict[str, str] = {}
    layers = [("every broker's dynamic default", metadata.broker_configs.get("", {}))]
    layers += [
        (f"broker {n}'s dynamic default", metadata.broker_configs.get(str(n), {})) for n in nodes
    ]
    for source, configs in layers:
        for name, value in dynamic_broker_defaults(configs).items():
            settings[name], sources[name] = value, source
    for name, value in (metadata.settings_of(topic) or {}).items():
        settings[name], sources[name] = value, "the topic's config"
    return settings, sources


def _check_settings(
    topic: str,
    expected: Mapping[str, str] | None,
    metadata: ClusterMetadata,
    nodes: Sequence[int],
    notes: list[str],
) -> dict[str, object]:
    """The cluster's settings of `topic` (LogConfig.to_dict); refused when `expected` differs."""
    cluster, sources = _effective_settings(metadata, topic, nodes)
    known = set(LogConfig.names())
    try:
        theirs = LogConfig.from_dict({k: v for k, v in cluster.items() if k in known}).to_dict()
        ours = LogConfig.from_dict(expected or {}).to_dict()
    except ConfigError as error:
        raise ConfigError(f"topic {topic}: {error}") from None
    if expected is None:
        shown = ", ".join(
            f"{n}={theirs[n]} ({sources.get(n, 'Kafka default or server.properties')})"
            for n in SHOWN_SETTINGS
        )
        notes.append(f"{topic}: the cluster's {shown}")
        return theirs
    differ = [
        f"{n}={ours[n]} here, {theirs[n]} in the cluster "
        f"({sources.get(n, 'Kafka default; server.properties may set it')})"
        for n in sorted(expected)
        if n in ours and ours[n] != theirs[n]
    ]
    if differ:
        raise LogDirError(
            f"topic {topic}'s settings differ from the cluster's: {'; '.join(differ)} "
            "(kafka-configs.sh --alter --entity-type topics --entity-name "
            f"{topic} --add-config ... sets the cluster's)"
        )
    return theirs


def _holds_records(pdir: Path) -> bool:
    return any(p.name.endswith(LOG_FILE_SUFFIX) and p.stat().st_size > 0 for p in pdir.iterdir())


def _segment_sizes(pdir: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in pdir.iterdir() if p.name.endswith(LOG_FILE_SUFFIX)}


def _target_of(
    topic: str, partition: int, node: int, dirs: list[BrokerDir], state: PartitionState
) -> BrokerDir:
    """The log dir of `node` that hosts the partition: the one holding its dir already, else
    the one the controller assigned, else the node's only one."""
    name = partition_dir_name(topic, partition)
    holding = [d for d in dirs if (d.path / name).exists()]
    if len(holding) > 1:
        listed = ", ".join(str(d.path) for d in holding)
        raise LogDirError(f"{name} exists in several log dirs of broker {node}: {listed}")
    if holding:
        return holding[0]
    assigned = state.directory_of(node)
    matching = [d for d in dirs if assigned is not None and d.directory_id == assigned]
    if len(matching) == 1:
        return matching[0]
    if len(dirs) == 1:
        return dirs[0]
    listed = ", ".join(str(d.path) for d in dirs)
    raise LogDirError(f"cannot tell which log dir of broker {node} hosts {name}: {listed}")


def _topic_id(
    topic: str, metadata: ClusterMetadata, given: uuid.UUID | None, metadata_from: str
) -> uuid.UUID:
    where = (
        f"kafka-topics.sh --bootstrap-server HOST:9092 --describe --topic {topic} prints its "
        "TopicId"
    )
    cluster_id = metadata.topics.get(topic)
    if given is not None and given != cluster_id:
        owner = [name for name, tid in metadata.topics.items() if tid == given]
        what = f"topic {owner[0]}'s id" if owner else "not in the cluster's metadata"
        raise LogDirError(
            f"topic id {topic_id_to_str(given)} given for {topic} is {what} ({metadata_from}); "
            f"{where}"
        )
    if cluster_id is None:
        raise LogDirError(
            f"topic {topic} is not in the cluster's metadata ({metadata_from}): create it "
            f"first (kafka-topics.sh --create); {where}"
        )
    return cluster_id


def _source_partitions(output_root: Path, topic: str) -> dict[int, Path]:
    return {p: path for t, p, path in live_partition_dirs(output_root) if t == topic}


def plan_place(
    output_root: str | os.PathLike[str],
    log_dirs: Sequence[str | os.PathLike[str]],
    topics: Sequence[str],
    *,
    topic_ids: Mapping[str, uuid.UUID] | None = None,
    topic_configs: Mapping[str, Mapping[str, str]] | None = None,
    metadata_dir: str | os.PathLike[str] | None = None,
) -> PlacePlan:
    """Check everything and say what placing `topics` of `output_root` into the broker log
    dirs would do; read-only. `topic_configs`: per topic, the settings the ingest used (Kafka
    names), compared with the cluster's."""
    root = Path(output_root)
    if not root.is_dir():
        raise LogDirError(f"output root {root} does not exist")
    journal = publish_journal_path(root)
    if journal.exists():
        raise LogDirError(
            f"{root}: a killed run left its publish half-done ({journal}); the next ingest run "
            "settles it: run one, then place"
        )
    brokers = [_broker_dir(Path(d)) for d in dict.fromkeys(Path(d) for d in log_dirs)]
    if not brokers:
        raise LogDirError("no broker log dir given")
    if any(b.path.resolve() == root.resolve() for b in brokers):
        raise LogDirError(f"{root} is both the output root and a broker log dir")
    sources = [Path(metadata_dir)] if metadata_dir is not None else [b.path for b in brokers]
    holder = next((d for d in sources if (d / CLUSTER_METADATA_DIR).is_dir()), None)
    if holder is None:
        listed = ", ".join(str(d) for d in sources)
        raise LogDirError(
            f"no {CLUSTER_METADATA_DIR} in {listed}: pass --metadata-dir, the broker's "
            "metadata.log.dir (a KRaft broker's metadata log says the topic's id and replicas)"
        )
    clusters = {b.cluster_id: b.path for b in brokers}
    if holder not in [b.path for b in brokers]:
        clusters.setdefault(_broker_dir(holder).cluster_id, holder)
    if len(clusters) > 1:
        listed = ", ".join(f"{p} is cluster {c}" for c, p in clusters.items())
        raise LogDirError(
            f"the log dirs belong to different clusters ({META_PROPERTIES_FILE}): {listed}"
        )
    metadata = read_cluster_metadata(holder, partitions=True)
    assert metadata is not None
    metadata_from = f"{holder / CLUSTER_METADATA_DIR}, {metadata.read_from}"
    plan = PlacePlan(root, metadata_from)
    nodes: dict[int, list[BrokerDir]] = {}
    for broker in brokers:
        nodes.setdefault(broker.node_id, []).append(broker)
    for topic in dict.fromkeys(topics):
        topic_id = _topic_id(topic, metadata, (topic_ids or {}).get(topic), metadata_from)
        cluster_partitions = metadata.partitions_of(topic) or {}
        ours = _source_partitions(root, topic)
        for partition in sorted(ours):
            open_round = compact_journal_path(root, partition_dir_name(topic, partition))
            if open_round.exists():
                raise LogDirError(
                    f"{ours[partition]}: a killed compact run left a cleaning round open "
                    f"({open_round}); compact run again settles it: run it, then place"
                )
        if not ours:
            raise LogDirError(f"the output root {root} has no partition of topic {topic}")
        if sorted(ours) != list(range(len(cluster_partitions))):
            raise LogDirError(
                f"topic {topic} has {len(cluster_partitions)} partitions in the cluster, the "
                f"output root {len(ours)} ({', '.join(map(str, sorted(ours)))}): ingest with "
                f"topics.{topic}.partitions={len(cluster_partitions)} (keys are placed by "
                "the partition count)"
            )
        expected = (topic_configs or {}).get(topic)
        settings = _check_settings(topic, expected, metadata, sorted(nodes), plan.notes)
        plan.index_interval_bytes = int(settings["index.interval.bytes"])  # type: ignore[call-overload]
        for partition, source in sorted(ours.items()):
            plan.moves += _moves(topic, partition, source, topic_id, cluster_partitions, nodes)
            if _holds_records(source) and not _leader_epochs(source):
                plan.notes.append(
                    f"{source}: written without a leader epoch (its batches carry -1, its "
                    f"{LEADER_EPOCH_CHECKPOINT_FILE} no entry): the broker serves it, but a "
                    "follower added later fails on it and never joins the ISR (docs/broker.md, "
                    'Leader epochs); the ingest and format("kafkalog") write epoch 0'
                )
    _plan_checkpoints(plan)
    return plan


def _leader_epochs(pdir: Path) -> bool:
    """The partition dir's leader-epoch-checkpoint has an entry (what a writer given a leader
    epoch leaves; batches written without one carry -1 and leave none)."""
    checkpoint = LeaderEpochCheckpointFile(pdir / LEADER_EPOCH_CHECKPOINT_FILE)
    return checkpoint.exists() and bool(checkpoint.read())


def _moves(
    topic: str,
    partition: int,
    source: Path,
    topic_id: uuid.UUID,
    cluster_partitions: Mapping[int, PartitionState],
    nodes: Mapping[int, list[BrokerDir]],
) -> list[Move]:
    name = partition_dir_name(topic, partition)
    metadata_file = PartitionMetadataFile(source / PARTITION_METADATA_FILE)
    if metadata_file.exists():
        ingested = metadata_file.read()
        if ingested not in (topic_id, topic_id_for_name(topic)):
            raise LogDirError(
                f"{source / PARTITION_METADATA_FILE} holds topic id {topic_id_to_str(ingested)} "
                f"(the ingest's topics.{topic}.topic_id), the cluster's topic {topic} has "
                f"{topic_id_to_str(topic_id)}"
            )
    state = cluster_partitions[partition]
    replicas = list(dict.fromkeys([*state.replicas, *state.adding_replicas]))
    if not set(replicas) & set(nodes):
        given = ", ".join(f"{b.path} is broker {n}" for n, bs in nodes.items() for b in bs)
        raise LogDirError(
            f"{name}'s replicas are on broker(s) {replicas}, none of the log dirs given ({given})"
        )
    elsewhere = [n for n in replicas if n not in nodes]
    if elsewhere:
        raise LogDirError(
            f"{name} has replicas on brokers {replicas}, and the log dirs of broker(s) "
            f"{elsewhere} are not placed: an empty replica there could lead, and the loaded "
            "one, following it, truncates to its empty log (the data is lost). Create the "
            "topic with one replica (--replica-assignment), place it, start the broker, then "
            "add replicas with kafka-reassign-partitions.sh"
        )
    moves = []
    source_sizes = _segment_sizes(source)
    for node in replicas:
        target = _target_of(topic, partition, node, nodes[node], state)
        dest = target.path / name
        placed = replaces = False
        if dest.is_dir():
            if _segment_sizes(dest) == source_sizes and _placed_id(dest) == topic_id:
                placed = True
            elif _holds_records(dest):
                raise LogDirError(
                    f"{dest} already holds records: kafkalog places into a new, empty topic "
                    "only (the offsets would collide)"
                )
            else:
                replaces = True
        moves.append(Move(topic, partition, source, target, topic_id, replaces, placed))
    return moves


def _placed_id(pdir: Path) -> uuid.UUID | None:
    metadata_file = PartitionMetadataFile(pdir / PARTITION_METADATA_FILE)
    try:
        return metadata_file.read() if metadata_file.exists() else None
    except KafkaLogError:
        return None


def _plan_checkpoints(plan: PlacePlan) -> None:
    """Each log dir's merged checkpoint files: the broker's entries, but the placed
    partitions', which are kafkalog's (or none)."""
    for log_dir in dict.fromkeys(m.target.path for m in plan.moves):
        placed = {_tp(m) for m in plan.moves if m.target.path == log_dir}
        for name in MERGED_CHECKPOINTS:
            ours = OffsetCheckpointFile(plan.output_root / name).read()
            target = OffsetCheckpointFile(log_dir / name)
            theirs = target.read()
            merged = {tp: o for tp, o in theirs.items() if tp not in placed}
            merged.update({tp: ours[tp] for tp in placed if tp in ours})
            merged = dict(sorted(merged.items()))
            if merged != theirs or (merged and not target.exists()):
                plan.checkpoints.setdefault(log_dir, {})[name] = merged


# ---- applying it ---------------------------------------------------------------------------------
def _copy_file(source: Path, dest: Path, owner: tuple[int, int] | None) -> None:
    """`dest` through `dest.tmp`, fsynced, renamed: never a torn file under a final name."""
    tmp = dest.with_name(dest.name + ".tmp")
    with open(source, "rb") as src, open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
        dst.flush()
        os.fsync(dst.fileno())
    if owner is not None:
        os.chown(tmp, *owner)
    os.replace(tmp, dest)


def _remove_dir(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)
        fsync_dir(path.parent)


def _stage(move: Move) -> None:
    """The output's partition dir copied to the staged name, with the cluster's topic id."""
    _remove_dir(move.staged)  # a killed run's copy
    stat = move.target.path.stat()
    owner = (stat.st_uid, stat.st_gid) if os.geteuid() == 0 else None  # the broker's user
    move.staged.mkdir()
    for item in sorted(move.source.iterdir()):
        if item.is_file() and item.name != PARTITION_METADATA_FILE:
            _copy_file(item, move.staged / item.name, owner)
    metadata_path = move.staged / PARTITION_METADATA_FILE
    atomic_write(metadata_path, PartitionMetadataFile.to_bytes(move.topic_id))
    if owner is not None:
        os.chown(metadata_path, *owner)
        os.chown(move.staged, *owner)
    fsync_dir(move.staged)
    fsync_dir(move.target.path)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where the C library
    or the file system cannot."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(a))


def apply_plan(plan: PlacePlan) -> None:
    """Place every move, then write the checkpoint files; the caller holds the brokers' locks."""
    for move in plan.moves:
        if not move.placed:
            _stage(move)
            if not move.dest.exists():
                os.rename(move.staged, move.dest)
            elif not _exchange(move.staged, move.dest):  # the broker's empty dir goes
                _remove_dir(move.replaced)  # (a gap without the dir, where no swap exists)
                os.rename(move.dest, move.replaced)
                os.rename(move.staged, move.dest)
            fsync_dir(move.target.path)
        _remove_dir(move.replaced)
        _remove_dir(move.staged)
    for log_dir, files in plan.checkpoints.items():
        for name, contents in files.items():
            OffsetCheckpointFile(log_dir / name).write(contents)


def place(
    output_root: str | os.PathLike[str],
    log_dirs: Sequence[str | os.PathLike[str]],
    topics: Sequence[str],
    *,
    apply: bool = False,
    topic_ids: Mapping[str, uuid.UUID] | None = None,
    topic_configs: Mapping[str, Mapping[str, str]] | None = None,
    metadata_dir: str | os.PathLike[str] | None = None,
) -> PlacePlan:
    """Plan (and with `apply`, carry out) the placement under the output root's run lock
    (shared) and the brokers' locks."""
    dirs = [Path(d) for d in log_dirs]
    locked = dirs if metadata_dir is None else [*dirs, Path(metadata_dir)]
    root_lock = ReadLock(Path(output_root).absolute(), f"place-{os.getpid()}")
    # a root that does not exist is plan_place's to refuse by name (the lock would create its
    # meta area)
    held = root_lock if root_lock.output_root.is_dir() else contextlib.nullcontext()
    with held, broker_locks(locked, create=apply):
        plan = plan_place(
            output_root,
            dirs,
            topics,
            topic_ids=topic_ids,
            topic_configs=topic_configs,
            metadata_dir=metadata_dir,
        )
        if root_lock.unlocked_because:
            plan.notes.append(
                f"read without the output root's run lock: {root_lock.unlocked_because}"
            )
        if apply:
            apply_plan(plan)
    return plan


def run_place(
    output_root: str,
    log_dirs: Sequence[str],
    topics: Sequence[str],
    out: TextIO,
    *,
    apply: bool = False,
    topic_ids: Mapping[str, uuid.UUID] | None = None,
    topic_configs: Mapping[str, Mapping[str, str]] | None = None,
    metadata_dir: str | None = None,
) -> int:
    """The CLI's view: the plan's lines, then (applied) check-logdir of every log dir written;
    1 when check-logdir refuses one."""
    plan = place(
        output_root,
        log_dirs,
        topics,
        apply=apply,
        topic_ids=topic_ids,
        topic_configs=topic_configs,
        metadata_dir=metadata_dir,
    )
    for line in plan.lines():
        out.write(line + "\n")
    todo = sum(not m.placed for m in plan.moves)
    if not apply:
        out.write(f"dry run: nothing changed; --apply places {todo} partition dir(s)\n")
        return 0
    out.write(f"placed {todo} partition dir(s), {len(plan.moves) - todo} already placed\n")
    status = 0
    for log_dir in dict.fromkeys(m.target.path for m in plan.moves):
        check = run_check_logdir(str(log_dir), out, index_interval_bytes=plan.index_interval_bytes)
        status = max(status, check)
    return status
