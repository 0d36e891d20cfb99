"""Kafka's four compression codecs, each with the exact framing Kafka writes (§1.6).

A v2 batch replaces its records area (bytes 61..end) by ONE compressed stream. What makes this
module more than "call the library" is the framing around the codec's blocks:

- gzip:   one RFC-1952 member, header exactly as `java.util.zip.GZIPOutputStream` writes it
          (`1f 8b 08 00`, mtime 0, XFL 0, OS 255 = "unknown", what JDK 16+ writes; older JDKs wrote
          0, and no reader looks at it). Reading accepts concatenated members.
- snappy: xerial snappy-java's *stream* framing (16-byte header, then big-endian length-prefixed
          raw snappy blocks of <= 32 KiB input each), NOT the official snappy framing format.
          Reading also accepts a bare raw snappy block, as xerial/librdkafka/kafkajs do.
- lz4:    the LZ4 frame format restricted the way Kafka's `Lz4BlockOutputStream` writes it: fixed
          descriptor `04 22 4D 18 60 40 82`, independent 64 KiB blocks, no checksums, no content
          size, end mark 0. Reading follows `Lz4BlockInputStream`'s rules, including its refusal of
          a wrong header checksum (HC) except for magic v0, whose writer hashed the wrong bytes.
- zstd:   plain zstd frames from a streaming compressor: no content size, no checksum, no
          dictionary. Reading streams (no content size to size a buffer from) across frames.

Levels use Kafka's settings and semantics (`compression.{gzip,lz4,zstd}.level`); `None` means
Kafka's default. Snappy and "none" have no level: a level given for them is ignored.

Every failure to decompress is a `CorruptRecordError` naming the codec, never a raw zlib/lz4/zstd
exception, so callers can add the batch position and print one line.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import cramjam
import lz4.block
import zstandard

from kafkalog_core.errors import ConfigError, CorruptRecordError
from kafkalog_core.record.batch import Compression

try:  # the C xxh32 is only an accelerator for the rare frames that carry block checksums
    import xxhash as _xxhash
except ImportError:  # pragma: no cover - exercised only without the optional package
    _xxhash = None

__all__ = [
    "GZIP_DEFAULT_LEVEL",
    "GZIP_MAX_LEVEL",
    "GZIP_MIN_LEVEL",
    "LZ4_DEFAULT_LEVEL",
    "LZ4_FRAME_DESCRIPTOR",
    "LZ4_FRAME_END_MARK",
    "LZ4_MAX_LEVEL",
    "LZ4_MIN_LEVEL",
    "SNAPPY_BLOCK_SIZE",
    "SNAPPY_XERIAL_HEADER",
    "compress_many",
    "ZSTD_DEFAULT_LEVEL",
    "ZSTD_MAX_LEVEL",
    "ZSTD_MIN_LEVEL",
    "FusedCodec",
    "compress",
    "decompress",
    "decompress_lz4_legacy_v0",
    "default_level",
    "fused_codec",
    "lz4_header_checksum",
    "validate_level",
    "xxh32",
]

Buffer = bytes | bytearray | memoryview

# --- levels (Kafka's GzipCompression / Lz4Compression / ZstdCompression) ------------------------
GZIP_MIN_LEVEL: Final = 1
GZIP_MAX_LEVEL: Final = 9
GZIP_DEFAULT_LEVEL: Final = -1  # java.util.zip.Deflater.DEFAULT_COMPRESSION, i.e. zlib level 6
LZ4_MIN_LEVEL: Final = 1
LZ4_MAX_LEVEL: Final = 17
LZ4_DEFAULT_LEVEL: Final = 9  # exactly 9 selects lz4's *fast* compressor (Kafka quirk)
ZSTD_MIN_LEVEL: Final = -131072  # ZSTD_minCLevel()
ZSTD_MAX_LEVEL: Final = 22
ZSTD_DEFAULT_LEVEL: Final = 3

_LZ4_HC_LIB_MAX_LEVEL: Final = 12  # LZ4HC_CLEVEL_MAX: the C library clamps higher levels to this

# --- gzip ---------------------------------------------------------------------------------------
GZIP_MAGIC: Final = b"\x1f\x8b"
GZIP_OS_UNKNOWN: Final = 255
# ID1 ID2 CM=deflate FLG=0, MTIME=0, XFL=0, OS=255: byte for byte what GZIPOutputStream writes.
GZIP_HEADER: Final = GZIP_MAGIC + bytes([8, 0, 0, 0, 0, 0, 0, GZIP_OS_UNKNOWN])
_GZIP_TRAILER = struct.Struct("<II")  # CRC-32 of the input, input size mod 2^32

# --- snappy (xerial SnappyOutputStream / SnappyCodec) ---------------------------------------------
SNAPPY_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
SNAPPY_XERIAL_VERSION: Final = 1
SNAPPY_XERIAL_MIN_COMPATIBLE_VERSION: Final = 1
SNAPPY_XERIAL_HEADER: Final = SNAPPY_XERIAL_MAGIC + struct.pack(
    ">ii", SNAPPY_XERIAL_VERSION, SNAPPY_XERIAL_MIN_COMPATIBLE_VERSION
)
SNAPPY_BLOCK_SIZE: Final = 32 * 1024  # xerial's default block size (input bytes per chunk)
_INT32_BE = struct.Struct(">i")

# --- lz4 (Kafka's Lz4BlockOutputStream) -----------------------------------------------------------
LZ4_FRAME_MAGIC: Final = 0x184D2204
_LZ4_MAGIC_BYTES: Final = struct.pack("<I", LZ4_FRAME_MAGIC)
_LZ4_FLG_VERSION_SHIFT: Final = 6
_LZ4_FLG_BLOCK_INDEPENDENCE: Final = 0x20
_LZ4_FLG_BLOCK_CHECKSUM: Final = 0x10
_LZ4_FLG_CONTENT_SIZE: Final = 0x08
_LZ4_FLG_CONTENT_CHECKSUM: Final = 0x04
_LZ4_FLG_RESERVED: Final = 0x03  # Kafka treats the dictionary-id bit as reserved too
_LZ4_BD_BLOCK_SIZE_SHIFT: Final = 4
_LZ4_BD_RESERVED: Final = 0x8F
_LZ4_BLOCK_SIZE_CODE_64KB: Final = 4
_LZ4_BLOCK_UNCOMPRESSED: Final = 0x80000000
_LZ4_KAFKA_FLG: Final = (1 << _LZ4_FLG_VERSION_SHIFT) | _LZ4_FLG_BLOCK_INDEPENDENCE  # 0x60
_LZ4_KAFKA_BD: Final = _LZ4_BLOCK_SIZE_CODE_64KB << _LZ4_BD_BLOCK_SIZE_SHIFT  # 0x40
LZ4_BLOCK_SIZE: Final = 1 << (8 + 2 * _LZ4_BLOCK_SIZE_CODE_64KB)  # 65536
LZ4_FRAME_END_MARK: Final = b"\x00\x00\x00\x00"
_UINT32_LE = struct.Struct("<I")


# --- xxh32, needed for the lz4 frame's header checksum ----------------------------------------------
_P1: Final = 2654435761
_P2: Final = 2246822519
_P3: Final = 3266489917
_P4: Final = 668265263
_P5: Final = 374761393
_M32: Final = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _xxh32_round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M32, 13) * _P1) & _M32


def _xxh32_python(data: bytes, seed: int = 0) -> int:
    """Pure-Python XXH32: the descriptor checksum is over 2..10 bytes, so speed is irrelevant."""
    n = len(data)
    i = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while i + 16 <= n:
            a, b, c, d = struct.unpack_from("<4I", data, i)
            v1, v2, v3, v4 = (
                _xxh32_round(v1, a),
                _xxh32_round(v2, b),
                _xxh32_round(v3, c),
                _xxh32_round(v4, d),
            )
            i += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        (lane,) = _UINT32_LE.unpack_from(data, i)
        h = (_rotl((h + lane * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (_rotl((h + data[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


def xxh32(data: Buffer, seed: int = 0) -> int:
    """XXH32 as an unsigned int; uses the C `xxhash` package when installed."""
    if _xxhash is not None:
        return _xxhash.xxh32_intdigest(bytes(data), seed)
    return _xxh32_python(bytes(data), seed)


def lz4_header_checksum(descriptor: Buffer) -> int:
    """The frame descriptor's HC byte: second byte of xxh32 over FLG..(content size) (§1.6)."""
    return (xxh32(descriptor) >> 8) & 0xFF


LZ4_FRAME_DESCRIPTOR: Final = (
    _LZ4_MAGIC_BYTES
    + bytes([_LZ4_KAFKA_FLG, _LZ4_KAFKA_BD])
    + bytes([lz4_header_checksum(bytes([_LZ4_KAFKA_FLG, _LZ4_KAFKA_BD]))])
)
assert bytes.fromhex("04224d18604082") == LZ4_FRAME_DESCRIPTOR


# --- levels -------------------------------------------------------------------------------------
def default_level(codec: Compression) -> int | None:
    """Kafka's default `compression.<codec>.level`; None for codecs without levels."""
    if codec is Compression.GZIP:
        return GZIP_DEFAULT_LEVEL
    if codec is Compression.LZ4:
        return LZ4_DEFAULT_LEVEL
    if codec is Compression.ZSTD:
        return ZSTD_DEFAULT_LEVEL
    return None


def validate_level(codec: Compression, level: int | None) -> int | None:
    """Resolve `None` to Kafka's default and refuse what Kafka's config validators refuse.

    Returns the effective level (None for snappy/none, which have no level and ignore one).
    """
    codec = Compression(codec)
    if level is None or codec in (Compression.NONE, Compression.SNAPPY):
        return default_level(codec)
    if isinstance(level, bool) or not isinstance(level, int):
        raise ConfigError(
            f"compression.{codec.kafka_name}.level={level!r} is invalid: must be an int"
        )
    if codec is Compression.GZIP:
        if level != GZIP_DEFAULT_LEVEL and not GZIP_MIN_LEVEL <= level <= GZIP_MAX_LEVEL:
            raise ConfigError(f"compression.gzip.level={level} is invalid: must be -1 or in [1, 9]")
    elif codec is Compression.LZ4:
        if not LZ4_MIN_LEVEL <= level <= LZ4_MAX_LEVEL:
            raise ConfigError(f"compression.lz4.level={level} is invalid: must be in [1, 17]")
    elif codec is Compression.ZSTD and not ZSTD_MIN_LEVEL <= level <= ZSTD_MAX_LEVEL:
        raise ConfigError(f"compression.zstd.level={level} is invalid: must be in [-131072, 22]")
    return level


# --- public entry points ------------------------------------------------------------------------
def compress(codec: Compression, data: Buffer, level: int | None = None) -> bytes:
    """Compress a records area into the exact stream Kafka's producer/broker would frame."""
    view = memoryview(data).cast("B")
    return compress_many(codec, view, [(0, len(view))], level)[0]


def compress_many(
    codec: Compression,
    data: memoryview,
    regions: Iterable[tuple[int, int]],
    level: int | None = None,
) -> list[bytes]:
    """`compress` of each `data[start:end]`, in order: the encoder's batches of one append.

    One loop per codec with the level checked and the compressor built once, because per
    16 KiB batch the Python around a codec call (validation, a fresh zstd context, joining the
    frame) cost as much as the codec itself.
    """
    codec = Compression(codec)
    level = validate_level(codec, level)
    view = memoryview(data).cast("B")
    if codec is Compression.NONE:
        return [bytes(view[a:b]) for a, b in regions]
    if codec is Compression.GZIP:
        return [b"".join(_gzip_compress(view[a:b], level)) for a, b in regions]  # type: ignore[arg-type]
    if codec is Compression.SNAPPY:
        return [b"".join(_snappy_compress(view[a:b])) for a, b in regions]
    if codec is Compression.LZ4:
        return _lz4_compress_many(view, regions, level)  # type: ignore[arg-type]
    compressor = _zstd_compressor(level)  # type: ignore[arg-type]
    return [compressor.compress(view[a:b]) for a, b in regions]


def decompress(codec: Compression, data: Buffer, *, magic: int = 2) -> bytes:
    """Decompress one compressed records stream; `magic` only matters for lz4 (v0 HC quirk)."""
    codec = Compression(codec)
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        return _gzip_decompress(data)
    if codec is Compression.SNAPPY:
        return _snappy_decompress(data)
    if codec is Compression.LZ4:
        return _lz4_decompress(data, verify_header_checksum=magic != 0)
    return _zstd_decompress(data)


def decompress_lz4_legacy_v0(data: Buffer) -> bytes:
    """lz4 for a magic-v0 wrapper: Kafka 0.8-0.9 hashed the magic bytes into HC, so skip HC."""
    return _lz4_decompress(data, verify_header_checksum=False)


# --- gzip ---------------------------------------------------------------------------------------
def _gzip_compress(data: Buffer, level: int) -> list[Buffer]:
    # A raw deflate stream wrapped by hand, so the header is GZIPOutputStream's, not zlib's
    # (zlib would write XFL by level and OS=3).
    deflater = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = [deflater.compress(data), deflater.flush()]
    trailer = _GZIP_TRAILER.pack(zlib.crc32(data), len(data) & _M32)
    return [GZIP_HEADER, *body, trailer]


def _gzip_decompress(data: Buffer) -> bytes:
    raw = bytes(data)
    if not raw:
        raise CorruptRecordError("gzip: empty compressed stream (no gzip member)")
    out: list[bytes] = []
    remaining = raw
    first = True
    # GZIPInputStream: the first member must be valid; after each member, more bytes starting
    # with a gzip header are another member, anything else is ignored.
    while remaining and (first or remaining[:2] == GZIP_MAGIC):
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out.append(inflater.decompress(remaining))
        except zlib.error as e:
            raise CorruptRecordError(f"gzip: corrupt compressed stream ({e})") from None
        if not inflater.eof:
            raise CorruptRecordError("gzip: truncated compressed stream (unexpected end of input)")
        remaining = inflater.unused_data
        first = False
    return b"".join(out)


# --- snappy -------------------------------------------------------------------------------------
def _snappy_compress(data: Buffer) -> list[Buffer]:
    view = memoryview(data).cast("B")
    parts: list[Buffer] = [SNAPPY_XERIAL_HEADER]
    for start in range(0, len(view), SNAPPY_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start : start + SNAPPY_BLOCK_SIZE])
        parts.append(_INT32_BE.pack(len(block)))
        parts.append(block)  # a cramjam Buffer: no copy into bytes
    return parts


def _snappy_raw(block: Buffer, where: str) -> bytes:
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except Exception as e:  # cramjam raises its own DecompressionError
        raise CorruptRecordError(f"snappy: corrupt raw snappy block {where} ({e})") from None


def _snappy_decompress(data: Buffer) -> bytes:
    raw = bytes(data)
    header_size = len(SNAPPY_XERIAL_HEADER)
    if raw[: len(SNAPPY_XERIAL_MAGIC)] != SNAPPY_XERIAL_MAGIC:
        # Not xerial framing: librdkafka/kafkajs-style single raw snappy block.
        if not raw:
            return b""
        return _snappy_raw(raw, "(unframed stream)")
    out: list[bytes] = []
    pos = 0
    end = len(raw)
    while pos < end:
        if raw[pos : pos + len(SNAPPY_XERIAL_MAGIC)] == SNAPPY_XERIAL_MAGIC:
            # A (possibly concatenated) xerial stream header.
            # The version fields are not checked: there is only one xerial block format, and
            # some writers (redpanda) encode them little-endian (kafka-python issue #2414).
            if pos + header_size > end:
                raise CorruptRecordError(f"snappy: truncated xerial header at byte {pos}")
            pos += header_size
            continue
        if pos + 4 > end:
            raise CorruptRecordError(f"snappy: truncated chunk length at byte {pos}")
        (length,) = _INT32_BE.unpack_from(raw, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CorruptRecordError(
                f"snappy: chunk at byte {pos - 4} declares {length} bytes, {end - pos} remain"
            )
        out.append(_snappy_raw(raw[pos : pos + length], f"at byte {pos}"))
        pos += length
    return b"".join(out)


# --- lz4 ----------------------------------------------------------------------------------------
def _lz4_block_compressor(level: int) -> Callable[[Buffer], Buffer]:
    """One lz4 block (no size prefix) at a Kafka level: exactly 9 is lz4's fast compressor (lz4-
    java's), any other level HC at min(level, the library's max), as Lz4BlockOutputStream."""
    if level == LZ4_DEFAULT_LEVEL:
        return partial(cramjam.lz4.compress_block, store_size=False)
    # cramjam's block compressor has no HC mode (it ignores `mode`), python-lz4's has
    return partial(
        lz4.block.compress,
        store_size=False,
        mode="high_compression",
        compression=min(level, _LZ4_HC_LIB_MAX_LEVEL),
    )


def _lz4_block_compress_into(level: int) -> Callable[[memoryview, memoryview], int]:
    """`_lz4_block_compressor(level)` writing into a caller's buffer, for the fused encoder."""
    if level == LZ4_DEFAULT_LEVEL:
        return partial(cramjam.lz4.compress_block_into, store_size=False)
    return partial(_compress_then_copy, _lz4_block_compressor(level))


def _compress_then_copy(compress_block: Callable[[Buffer], Buffer], src: Any, dst: Any) -> int:
    block = compress_block(src)
    dst[: len(block)] = block
    return len(block)


def _lz4_compress_many(
    view: memoryview, regions: Iterable[tuple[int, int]], level: int
) -> list[bytes]:
    """Kafka's lz4 frame (KafkaLZ4BlockOutputStream) of each region: descriptor, 64 KiB blocks
    (stored raw when they do not shrink), end mark."""
    compress_block = _lz4_block_compressor(level)
    pack, raw_flag = _UINT32_LE.pack, _LZ4_BLOCK_UNCOMPRESSED
    out = []
    for a, b in regions:
        parts: list[Buffer] = [LZ4_FRAME_DESCRIPTOR]
        for start in range(a, b, LZ4_BLOCK_SIZE):
            chunk = view[start : min(b, start + LZ4_BLOCK_SIZE)]
            block = compress_block(chunk)
            if len(block) >= len(chunk):  # Lz4BlockOutputStream stores incompressible blocks raw
                parts += (pack(len(chunk) | raw_flag), chunk)
            else:
                parts += (pack(len(block)), block)
        parts.append(LZ4_FRAME_END_MARK)
        out.append(b"".join(parts))
    return out


def _lz4_decompress(data: Buffer, *, verify_header_checksum: bool) -> bytes:
    raw = bytes(data)
    end = len(raw)
    if end < 7:
        raise CorruptRecordError(f"lz4: stream ended prematurely ({end} bytes, no frame header)")
    (magic,) = _UINT32_LE.unpack_from(raw, 0)
    if magic != LZ4_FRAME_MAGIC:
        raise CorruptRecordError(f"lz4: invalid frame magic 0x{magic:08x}")
    flg, bd = raw[4], raw[5]
    version = flg >> _LZ4_FLG_VERSION_SHIFT
    if version != 1:
        raise CorruptRecordError(f"lz4: frame version {version} unsupported")
    if flg & _LZ4_FLG_RESERVED or bd & _LZ4_BD_RESERVED:
        raise CorruptRecordError("lz4: reserved bits set in the frame descriptor")
    if not flg & _LZ4_FLG_BLOCK_INDEPENDENCE:
        raise CorruptRecordError("lz4: dependent block stream is unsupported")
    size_code = bd >> _LZ4_BD_BLOCK_SIZE_SHIFT
    if not 4 <= size_code <= 7:
        raise CorruptRecordError(f"lz4: block size code {size_code} unsupported (must be 4..7)")
    max_block = 1 << (8 + 2 * size_code)
    pos = 6
    if flg & _LZ4_FLG_CONTENT_SIZE:
        pos += 8  # present, but Kafka skips it
    if pos >= end:
        raise CorruptRecordError("lz4: stream ended prematurely inside the frame descriptor")
    if verify_header_checksum and raw[pos] != lz4_header_checksum(raw[4:pos]):
        raise CorruptRecordError("lz4: Stream frame descriptor corrupted (header checksum)")
    pos += 1
    block_checksum = bool(flg & _LZ4_FLG_BLOCK_CHECKSUM)
    out: list[bytes] = []
    while True:
        if pos + 4 > end:
            raise CorruptRecordError(f"lz4: stream ended prematurely at byte {pos} (no end mark)")
        (word,) = _UINT32_LE.unpack_from(raw, pos)
        pos += 4
        if word == 0:
            break  # end mark; a content checksum may follow and is never verified (Kafka)
        stored = bool(word & _LZ4_BLOCK_UNCOMPRESSED)
        size = word & ~_LZ4_BLOCK_UNCOMPRESSED
        if size > max_block:
            raise CorruptRecordError(f"lz4: Block size {size} exceeded max: {max_block}")
        if pos + size + (4 if block_checksum else 0) > end:
            raise CorruptRecordError(f"lz4: stream ended prematurely in the block at byte {pos}")
        block = raw[pos : pos + size]
        pos += size
        if block_checksum:
            (expected,) = _UINT32_LE.unpack_from(raw, pos)
            pos += 4
            if xxh32(block) != expected:
                raise CorruptRecordError(f"lz4: block checksum mismatch at byte {pos - size - 8}")
        if stored:
            out.append(block)
            continue
        try:
            out.append(lz4.block.decompress(block, uncompressed_size=max_block))
        except Exception as e:  # lz4.block.LZ4BlockError
            raise CorruptRecordError(f"lz4: corrupt block at byte {pos - size - 4} ({e})") from None
    return b"".join(out)


# --- fused encode (kafkalog_core._native.write_compressed_batches) ------------------------------
FRAMING_LZ4: Final = 1  # the C writer's framing kinds (_native_compressed.c)
FRAMING_SNAPPY: Final = 2


@dataclass(frozen=True)
class FusedCodec:
    """A codec whose library compresses into the caller's buffer, with its framing, for the C
    writer that compresses each batch's records straight behind its header."""

    framing: tuple[int, bytes, bytes]  # (kind, bytes before the blocks, bytes after them)
    block_size: int  # input bytes per block
    compress_into: Callable[[memoryview, memoryview], int]  # (src, dst) -> bytes written
    block_slack: int  # a block's worst case: n + n // block_divisor + block_slack
    block_divisor: int

    def bound(self, region_sizes: Any) -> Any:
        """The most bytes each region's framed stream can take (numpy int64 in and out)."""
        blocks = -(-region_sizes // self.block_size)
        fixed = len(self.framing[1]) + len(self.framing[2])
        slack = 4 + self.block_slack  # the length word and the codec's own worst case
        return region_sizes + region_sizes // self.block_divisor + blocks * slack + fixed


def fused_codec(codec: Compression, level: int | None = None) -> FusedCodec | None:
    """The fused encoder's parameters for lz4 and snappy; None for the other codecs."""
    codec = Compression(codec)
    if codec is Compression.LZ4:
        level = validate_level(codec, level)
        # LZ4_compressBound: n + n / 255 + 16
        return FusedCodec(
            (FRAMING_LZ4, LZ4_FRAME_DESCRIPTOR, LZ4_FRAME_END_MARK),
            LZ4_BLOCK_SIZE,
            _lz4_block_compress_into(level),  # type: ignore[arg-type]
            16,
            255,
        )
    if codec is Compression.SNAPPY:
        # snappy::MaxCompressedLength: 32 + n + n / 6
        return FusedCodec(
            (FRAMING_SNAPPY, SNAPPY_XERIAL_HEADER, b""),
            SNAPPY_BLOCK_SIZE,
            cramjam.snappy.compress_raw_into,
            32,
            6,
        )
    return None


# --- zstd ---------------------------------------------------------------------------------------
_per_thread = threading.local()


def _zstd_compressor(level: int) -> zstandard.ZstdCompressor:
    """One compression context per level and thread (a ZstdCompressor serves one call at a
    time; building one per batch cost more than compressing a 16 KiB batch)."""
    contexts = getattr(_per_thread, "zstd", None)
    if contexts is None:
        contexts = _per_thread.zstd = {}
    context = contexts.get(level)
    if context is None:
        # zstd-jni streams, so its frame never carries the content size; match that
        context = contexts[level] = zstandard.ZstdCompressor(
            level=level, write_content_size=False, write_checksum=False, write_dict_id=False
        )
    return context


def _zstd_decompress(data: Buffer) -> bytes:
    remaining = bytes(data)
    if not remaining:
        raise CorruptRecordError("zstd: empty compressed stream (no zstd frame)")
    decompressor = zstandard.ZstdDecompressor()
    out: list[bytes] = []
    while remaining:
        dobj = decompressor.decompressobj()
        try:
            out.append(dobj.decompress(remaining))
        except zstandard.ZstdError as e:
            raise CorruptRecordError(f"zstd: corrupt compressed stream ({e})") from None
        if not dobj.eof:
            raise CorruptRecordError("zstd: truncated compressed stream (frame not finished)")
        remaining = dobj.unused_data
    return b"".join(out)
