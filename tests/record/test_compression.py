"""Compression codecs: round trips, Kafka's exact framing bytes, real fixtures, corrupt input.

Independent oracles: the `xxhash` package (lz4 HC), Python's `gzip` module, `lz4.frame`,
`zstandard`'s frame parameters and kafka-python's `kafka.codec` decoders.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import struct
import types
import zlib
from pathlib import Path

import cramjam
import lz4.block
import lz4.frame
import pytest
import xxhash
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog_core.errors import ConfigError, CorruptRecordError
from kafkalog_core.record import compression as comp
from kafkalog_core.record.batch import RECORDS_OFFSET, Compression, iter_batch_headers
from kafkalog_core.record.compression import (
    LZ4_FRAME_DESCRIPTOR,
    LZ4_FRAME_END_MARK,
    SNAPPY_XERIAL_HEADER,
    compress,
    decompress,
    decompress_lz4_legacy_v0,
    default_level,
    lz4_header_checksum,
    validate_level,
    xxh32,
)

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
REAL_CODECS = CODECS[1:]
LEVELS = {
    Compression.NONE: [None],
    Compression.GZIP: [None, -1, 1, 6, 9],
    Compression.SNAPPY: [None],
    Compression.LZ4: [None, 1, 2, 3, 9, 12, 17],
    Compression.ZSTD: [None, -131072, -5, 0, 1, 3, 19, 22],
}
_RNG_DATA = os.urandom(200_000)
DATA = {
    "empty": b"",
    "one": b"x",
    "small": b"key-value " * 7,
    "32k": bytes(range(256)) * 128,  # exactly one snappy block
    "32k+1": bytes(range(256)) * 128 + b"!",
    "64k": b"abcdefgh" * 8192,  # exactly one lz4 block
    "64k+1": b"abcdefgh" * 8192 + b"!",
    "large": b"".join(f"record-{i:08d}|".encode() for i in range(20_000)),  # ~340 KB
    "random": _RNG_DATA,
    "random_small": _RNG_DATA[:1000],
}


def _levels_cases():
    for codec in CODECS:
        for level in LEVELS[codec]:
            yield pytest.param(codec, level, id=f"{codec.kafka_name}-{level}")


# ---------------------------------------------------------------------------------------------
# round trips
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("codec", "level"), list(_levels_cases()))
@pytest.mark.parametrize("name", list(DATA))
def test_round_trip(codec: Compression, level: int | None, name: str) -> None:
    data = DATA[name]
    out = compress(codec, data, level)
    assert isinstance(out, bytes)
    assert decompress(codec, out) == data


@pytest.mark.parametrize("codec", CODECS)
def test_accepts_memoryview_and_bytearray(codec: Compression) -> None:
    data = DATA["large"]
    by_bytes = compress(codec, data)
    assert compress(codec, memoryview(data)) == by_bytes
    assert compress(codec, bytearray(data)) == by_bytes
    assert decompress(codec, memoryview(by_bytes)) == data
    assert decompress(codec, bytearray(by_bytes)) == data


@pytest.mark.parametrize("codec", REAL_CODECS)
def test_none_level_equals_kafka_default(codec: Compression) -> None:
    data = DATA["large"]
    assert compress(codec, data, None) == compress(codec, data, default_level(codec))


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=3000), codec=st.sampled_from(CODECS))
def test_round_trip_hypothesis(data: bytes, codec: Compression) -> None:
    assert decompress(codec, compress(codec, data)) == data


# ---------------------------------------------------------------------------------------------
# levels
# ---------------------------------------------------------------------------------------------
def test_default_levels() -> None:
    assert default_level(Compression.GZIP) == -1
    assert default_level(Compression.LZ4) == 9
    assert default_level(Compression.ZSTD) == 3
    assert default_level(Compression.SNAPPY) is None
    assert default_level(Compression.NONE) is None


@pytest.mark.parametrize(
    ("codec", "valid", "invalid"),
    [
        (Compression.GZIP, [-1, 1, 5, 9], [-2, 0, 10, 100]),
        (Compression.LZ4, [1, 9, 17], [0, -1, 18]),
        (Compression.ZSTD, [-131072, -1, 0, 3, 22], [-131073, 23]),
    ],
)
def test_validate_level_ranges(codec: Compression, valid: list[int], invalid: list[int]) -> None:
    for level in valid:
        assert validate_level(codec, level) == level
    for level in invalid:
        with pytest.raises(ConfigError, match=rf"compression\.{codec.kafka_name}\.level={level} "):
            validate_level(codec, level)
        with pytest.raises(ConfigError):
            compress(codec, b"abc", level)


def test_validate_level_resolves_none_and_ignores_level_for_levelless_codecs() -> None:
    assert validate_level(Compression.LZ4, None) == 9
    assert validate_level(Compression.SNAPPY, 42) is None
    assert validate_level(Compression.NONE, 42) is None
    with pytest.raises(ConfigError):
        validate_level(Compression.GZIP, True)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        validate_level(Compression.ZSTD, 3.0)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# gzip framing
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("level", LEVELS[Compression.GZIP])
def test_gzip_header_is_java_gzipoutputstream(level: int | None) -> None:
    data = DATA["large"]
    out = compress(Compression.GZIP, data, level)
    # ID1 ID2 CM FLG | MTIME=0 | XFL=0 | OS=255 (JDK 16+; no reader checks it)
    assert out[:10] == bytes.fromhex("1f8b08000000000000ff")
    assert out[:4] == b"\x1f\x8b\x08\x00"
    assert out[4:8] == b"\x00\x00\x00\x00"
    assert out[8] == 0 and out[9] == 255
    crc, isize = struct.unpack("<II", out[-8:])
    assert crc == zlib.crc32(data) and isize == len(data)
    assert gzip.decompress(out) == data  # the stdlib agrees it is one valid member


def test_gzip_level_changes_output_and_default_is_6() -> None:
    data = DATA["large"]
    assert compress(Compression.GZIP, data, -1) == compress(Compression.GZIP, data, 6)
    assert len(compress(Compression.GZIP, data, 1)) > len(compress(Compression.GZIP, data, 9))


def test_gzip_reads_concatenated_members_and_ignores_trailing_garbage() -> None:
    a, b = b"first member;", b"second member"
    two = gzip.compress(a) + gzip.compress(b)
    assert decompress(Compression.GZIP, two) == a + b
    assert decompress(Compression.GZIP, compress(Compression.GZIP, a) + b"\x00junk") == a


# ---------------------------------------------------------------------------------------------
# snappy framing
# ---------------------------------------------------------------------------------------------
def _xerial_chunks(stream: bytes) -> list[bytes]:
    assert stream[:16] == SNAPPY_XERIAL_HEADER
    chunks, pos = [], 16
    while pos < len(stream):
        (n,) = struct.unpack_from(">i", stream, pos)
        chunks.append(stream[pos + 4 : pos + 4 + n])
        pos += 4 + n
    assert pos == len(stream)
    return chunks


def test_snappy_xerial_header_bytes() -> None:
    assert bytes.fromhex("82534e41505059000000000100000001") == SNAPPY_XERIAL_HEADER
    assert compress(Compression.SNAPPY, b"") == SNAPPY_XERIAL_HEADER


@pytest.mark.parametrize(
    ("name", "block_inputs"),
    [
        ("one", [1]),
        ("32k", [32768]),
        ("32k+1", [32768, 1]),
        ("random", [32768] * 6 + [200_000 - 6 * 32768]),
    ],
)
def test_snappy_chunks_hold_at_most_32k_of_input(name: str, block_inputs: list[int]) -> None:
    chunks = _xerial_chunks(compress(Compression.SNAPPY, DATA[name]))
    sizes = [len(cramjam.snappy.decompress_raw(c)) for c in chunks]
    assert sizes == block_inputs
    assert b"".join(bytes(cramjam.snappy.decompress_raw(c)) for c in chunks) == DATA[name]


def test_snappy_reads_unframed_raw_block() -> None:
    data = DATA["large"]
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Compression.SNAPPY, raw) == data


def test_snappy_reads_concatenated_xerial_streams_and_le_version_fields() -> None:
    a, b = DATA["small"], DATA["32k+1"]
    assert (
        decompress(
            Compression.SNAPPY, compress(Compression.SNAPPY, a) + compress(Compression.SNAPPY, b)
        )
        == a + b
    )
    # redpanda wrote version/compat little-endian; readers ignore those fields.
    odd = bytearray(compress(Compression.SNAPPY, a))
    odd[8:16] = struct.pack("<ii", 1, 1)
    assert decompress(Compression.SNAPPY, bytes(odd)) == a


# ---------------------------------------------------------------------------------------------
# lz4 framing
# ---------------------------------------------------------------------------------------------
def _lz4_blocks(frame: bytes) -> list[tuple[bool, bytes]]:
    assert frame[:7] == LZ4_FRAME_DESCRIPTOR
    blocks, pos = [], 7
    while True:
        (word,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if word == 0:
            break
        size = word & 0x7FFFFFFF
        blocks.append((bool(word & 0x80000000), frame[pos : pos + size]))
        pos += size
    assert pos == len(frame), "nothing may follow the end mark (no content checksum)"
    return blocks


def test_lz4_descriptor_matches_kafka_and_xxhash() -> None:
    """§13 case 8: magic, FLG version 1, block size code 4..7, HC == (xxh32(FLG..BD) >> 8) & 0xFF."""
    assert bytes.fromhex("04224d18604082") == LZ4_FRAME_DESCRIPTOR
    out = compress(Compression.LZ4, DATA["large"])
    assert out[:4] == b"\x04\x22\x4d\x18"
    flg, bd, hc = out[4], out[5], out[6]
    assert flg >> 6 == 1
    assert 4 <= (bd >> 4) & 0x7 <= 7
    assert hc == (xxhash.xxh32(out[4:6], seed=0).intdigest() >> 8) & 0xFF
    assert out.endswith(LZ4_FRAME_END_MARK)


def test_lz4_empty_frame_is_descriptor_plus_end_mark() -> None:
    assert compress(Compression.LZ4, b"") == bytes.fromhex("04224d1860408200000000")


@pytest.mark.parametrize("level", LEVELS[Compression.LZ4])
def test_lz4_blocks_are_independent_64k(level: int | None) -> None:
    data = DATA["large"]
    blocks = _lz4_blocks(compress(Compression.LZ4, data, level))
    assert len(blocks) == -(-len(data) // 65536)
    out = b""
    for i, (stored, body) in enumerate(blocks):
        expect = data[i * 65536 : (i + 1) * 65536]
        # independence: every block decompresses alone
        piece = body if stored else lz4.block.decompress(body, uncompressed_size=len(expect))
        assert piece == expect
        out += piece
    assert out == data


def test_lz4_incompressible_blocks_are_stored_raw() -> None:
    blocks = _lz4_blocks(compress(Compression.LZ4, DATA["random"]))
    assert [stored for stored, _ in blocks] == [True] * 4
    assert b"".join(body for _, body in blocks) == DATA["random"]


def test_lz4_level_9_is_fast_compressor_other_levels_hc() -> None:
    data = DATA["64k"] + DATA["large"][:65536]
    fast = [
        bytes(cramjam.lz4.compress_block(data[i : i + 65536], store_size=False)) for i in (0, 65536)
    ]
    assert [b for _, b in _lz4_blocks(compress(Compression.LZ4, data, 9))] == fast
    for level, lib_level in ((1, 1), (3, 3), (12, 12), (17, 12)):
        hc = [
            lz4.block.compress(
                data[i : i + 65536],
                store_size=False,
                mode="high_compression",
                compression=lib_level,
            )
            for i in (0, 65536)
        ]
        assert [b for _, b in _lz4_blocks(compress(Compression.LZ4, data, level))] == hc


@pytest.mark.parametrize(
    "block_size",
    [
        lz4.frame.BLOCKSIZE_MAX64KB,
        lz4.frame.BLOCKSIZE_MAX256KB,
        lz4.frame.BLOCKSIZE_MAX1MB,
        lz4.frame.BLOCKSIZE_MAX4MB,
    ],
)
@pytest.mark.parametrize("store_size", [False, True])
@pytest.mark.parametrize("checksums", [False, True])
def test_lz4_reads_other_writers_frames(block_size: int, store_size: bool, checksums: bool) -> None:
    """Block-size codes 4..7, a content-size field and block/content checksums are accepted."""
    data = DATA["large"] * 4
    frame = lz4.frame.compress(
        data,
        block_size=block_size,
        block_linked=False,
        store_size=store_size,
        content_checksum=checksums,
        block_checksum=checksums,
    )
    assert decompress(Compression.LZ4, frame) == data


def test_lz4_content_checksum_is_never_verified() -> None:
    data = DATA["small"]
    frame = bytearray(lz4.frame.compress(data, content_checksum=True, store_size=False))
    frame[-1] ^= 0xFF
    assert decompress(Compression.LZ4, bytes(frame)) == data


def test_lz4_block_checksum_is_verified() -> None:
    data = DATA["large"]
    frame = bytearray(
        lz4.frame.compress(data, block_checksum=True, store_size=False, block_linked=False)
    )
    # the first block's checksum sits right after its body
    (word,) = struct.unpack_from("<I", frame, 7)
    frame[7 + 4 + (word & 0x7FFFFFFF)] ^= 0x01
    with pytest.raises(CorruptRecordError, match="block checksum"):
        decompress(Compression.LZ4, bytes(frame))


def test_lz4_v0_header_checksum_quirk() -> None:
    """Kafka's magic-v0 writer hashed the 4 magic bytes too: HC 0x1A for Kafka's descriptor."""
    broken = LZ4_FRAME_DESCRIPTOR[:6] + bytes(
        [(xxhash.xxh32(LZ4_FRAME_DESCRIPTOR[:6]).intdigest() >> 8) & 0xFF]
    )
    assert broken[6] == 0x1A
    frame = broken + compress(Compression.LZ4, DATA["large"])[7:]
    with pytest.raises(CorruptRecordError, match="Stream frame descriptor corrupted"):
        decompress(Compression.LZ4, frame)
    assert decompress_lz4_legacy_v0(frame) == DATA["large"]
    assert decompress(Compression.LZ4, frame, magic=0) == DATA["large"]
    with pytest.raises(CorruptRecordError, match="Stream frame descriptor corrupted"):
        decompress(Compression.LZ4, frame, magic=1)


def test_lz4_v0_reads_kafka_python_old_kafka_encoder() -> None:
    from kafka.codec import lz4_encode_old_kafka

    data = DATA["large"]
    assert decompress_lz4_legacy_v0(lz4_encode_old_kafka(data)) == data


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda f: b"\x05" + f[1:], "invalid frame magic"),
        (lambda f: f[:4] + bytes([0xA0]) + f[5:], "version 2"),  # FLG version 2
        (lambda f: f[:4] + bytes([0x40]) + f[5:], "descriptor corrupted|dependent"),
        (lambda f: f[:4] + bytes([0x61]) + f[5:], "reserved"),
        (lambda f: f[:5] + bytes([0x30]) + f[6:], "block size code 3"),
        (lambda f: f[:5] + bytes([0xC0]) + f[6:], "reserved"),
        (lambda f: f[:6] + bytes([f[6] ^ 1]) + f[7:], "Stream frame descriptor corrupted"),
        (lambda f: f[:-4], "ended prematurely"),
        (lambda f: f[:-100], "ended prematurely"),
        (lambda f: f[:5], "ended prematurely"),
        (
            lambda f: f[:7] + struct.pack("<I", 65537) + f[11:],
            "Block size 65537 exceeded max: 65536",
        ),
        (lambda f: f[:11] + b"\xff" * 40 + f[51:], "corrupt block"),
    ],
)
def test_lz4_corrupt_frames(mutate, message: str) -> None:
    frame = compress(Compression.LZ4, DATA["large"])
    with pytest.raises(CorruptRecordError, match=message):
        decompress(Compression.LZ4, mutate(frame))


def test_lz4_dependent_blocks_refused() -> None:
    flg, bd = 0x40, 0x40  # version 1, block independence 0
    frame = (
        b"\x04\x22\x4d\x18" + bytes([flg, bd, lz4_header_checksum(bytes([flg, bd]))]) + b"\x00" * 4
    )
    with pytest.raises(CorruptRecordError, match="[Dd]ependent block stream is unsupported"):
        decompress(Compression.LZ4, frame)


# ---------------------------------------------------------------------------------------------
# zstd framing
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("level", LEVELS[Compression.ZSTD])
@pytest.mark.parametrize("name", ["empty", "small", "large", "random"])
def test_zstd_frame_has_no_content_size(level: int | None, name: str) -> None:
    out = compress(Compression.ZSTD, DATA[name], level)
    assert out[:4] == bytes.fromhex("28b52ffd")
    fhd = out[4]
    assert fhd >> 6 == 0, "Frame_Content_Size_flag must be 0"
    assert not fhd & 0x20, "Single_Segment_flag would imply a 1-byte content size"
    assert not fhd & 0x04, "no content checksum"
    assert fhd & 0x03 == 0, "no dictionary id"
    params = zstandard.get_frame_parameters(out)
    assert params.content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert params.dict_id == 0 and not params.has_checksum


def test_zstd_reads_concatenated_frames() -> None:
    a, b = DATA["small"], DATA["large"]
    both = compress(Compression.ZSTD, a) + zstandard.ZstdCompressor().compress(b)
    assert decompress(Compression.ZSTD, both) == a + b


def test_zstd_level_matters() -> None:
    data = DATA["large"]
    assert len(compress(Compression.ZSTD, data, 19)) < len(
        compress(Compression.ZSTD, data, -131072)
    )


# ---------------------------------------------------------------------------------------------
# corrupt input, all codecs
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", REAL_CODECS)
def test_truncated_stream_is_corrupt_record_error(codec: Compression) -> None:
    out = compress(codec, DATA["large"])
    for cut in (len(out) // 2, len(out) - 1):
        with pytest.raises(CorruptRecordError, match=codec.kafka_name):
            decompress(codec, out[:cut])


@pytest.mark.parametrize("codec", REAL_CODECS)
def test_garbage_is_corrupt_record_error(codec: Compression) -> None:
    with pytest.raises(CorruptRecordError, match=codec.kafka_name):
        decompress(codec, b"\xff\xfe definitely not a compressed stream \x00\x01\x02" * 3)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_empty_input_is_corrupt_record_error(codec: Compression) -> None:
    with pytest.raises(CorruptRecordError, match=codec.kafka_name):
        decompress(codec, b"")


@pytest.mark.parametrize("codec", REAL_CODECS)
def test_flipped_body_bytes_never_escape_as_library_errors(codec: Compression) -> None:
    out = bytearray(compress(codec, DATA["large"]))
    for at in range(20, len(out), max(1, len(out) // 25)):
        bad = bytearray(out)
        bad[at] ^= 0xA5
        with contextlib.suppress(CorruptRecordError):  # any other exception fails the test
            decompress(codec, bytes(bad))


def test_snappy_corrupt_chunk_length() -> None:
    out = bytearray(compress(Compression.SNAPPY, DATA["large"]))
    out[16:20] = struct.pack(">i", 10_000_000)
    with pytest.raises(CorruptRecordError, match="snappy: chunk at byte 16"):
        decompress(Compression.SNAPPY, bytes(out))


def test_gzip_bad_crc() -> None:
    out = bytearray(compress(Compression.GZIP, DATA["small"]))
    out[-8] ^= 1
    with pytest.raises(CorruptRecordError, match="gzip"):
        decompress(Compression.GZIP, bytes(out))


# ---------------------------------------------------------------------------------------------
# xxh32 (own implementation used when the xxhash package is absent)
# ---------------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=100), seed=st.integers(0, 2**32 - 1))
def test_pure_python_xxh32_matches_xxhash(data: bytes, seed: int) -> None:
    assert comp._xxh32_python(data, seed) == xxhash.xxh32_intdigest(data, seed)
    assert xxh32(data, seed) == xxhash.xxh32_intdigest(data, seed)


# ---------------------------------------------------------------------------------------------
# real fixtures
# ---------------------------------------------------------------------------------------------
def _compressed_payloads(path: Path) -> list[tuple[Compression, bytes]]:
    buf = path.read_bytes()
    out = []
    for h in iter_batch_headers(buf):
        if h.magic == 2 and h.compression is not Compression.NONE:
            out.append((h.compression, buf[h.position + RECORDS_OFFSET : h.position + h.size]))
    return out


def test_tansu_fixtures_all_codecs_decode_to_same_records(fixtures_dir: Path) -> None:
    decoded = {}
    for name in ("gzip", "zstd", "lz4", "snappy"):
        [(codec, payload)] = _compressed_payloads(
            fixtures_dir / "batches" / f"tansu_decode_{name}.batch0.bin"
        )
        assert codec.kafka_name == name
        decoded[name] = decompress(codec, payload)
    assert len(set(decoded.values())) == 1
    assert len(decoded["gzip"]) == 454


@pytest.mark.parametrize(
    "name",
    [
        "tansu_batch_of_100.batch0.bin",  # xerial-framed snappy (Java client)
        "tansu_batch_of_1_000.batch0.bin",
        "tansu_produce_request_v10_002.batch0.bin",
        "kafkajs_fetch_v4_snappy.batch0.bin",  # raw snappy block, no xerial header
        "kafkajs_fetch_v4_gzip.batch0.bin",
        "kafkajs_recordbatch_gzip_logappendtime.bin",
        "kafkago_v2c_v2c.batch0.bin",
        "seg_spooldir_confluent_command_lz4.bin",
        "seg_spooldir_kstream_changelog_lz4.bin",
    ],
)
def test_fixture_payloads_decompress_like_kafka_python(
    fixtures_dir: Path, name: str, monkeypatch
) -> None:
    _patch_kafka_python_snappy(monkeypatch)
    payloads = _compressed_payloads(fixtures_dir / "batches" / name)
    assert payloads
    for codec, payload in payloads:
        ours = decompress(codec, payload)
        assert ours == _kafka_python_decode(codec, payload)
        # records area re-compressed by us decodes the same way
        assert decompress(codec, compress(codec, ours)) == ours


def test_fixture_log_dir_lz4_segments(fixtures_dir: Path) -> None:
    count = 0
    for log in sorted((fixtures_dir / "logdirs").rglob("*.log")):
        for codec, payload in _compressed_payloads(log):
            assert decompress(codec, payload) == lz4.frame.decompress(payload)
            count += 1
    assert count > 50


# ---------------------------------------------------------------------------------------------
# kafka-python 3.0.12 decodes what we write
# ---------------------------------------------------------------------------------------------
def _patch_kafka_python_snappy(monkeypatch) -> None:
    """kafka-python wants python-snappy for blocks; lend it cramjam's raw decoder.

    Its xerial chunk walking, the part under test, stays kafka-python's own code.
    """
    import kafka.codec

    if not kafka.codec.has_snappy():
        shim = types.SimpleNamespace(
            decompress=lambda b: bytes(cramjam.snappy.decompress_raw(bytes(b))),
            compress=lambda b: bytes(cramjam.snappy.compress_raw(bytes(b))),
        )
        monkeypatch.setattr(kafka.codec, "snappy", shim)


def _kafka_python_decode(codec: Compression, payload: bytes) -> bytes:
    import kafka.codec as kc

    return {
        Compression.GZIP: kc.gzip_decode,
        Compression.SNAPPY: kc.snappy_decode,
        Compression.LZ4: kc.lz4_decode,
        Compression.ZSTD: kc.zstd_decode,
    }[codec](payload)


@pytest.mark.parametrize(
    ("codec", "level"), [c for c in _levels_cases() if c.values[0] is not Compression.NONE]
)
@pytest.mark.parametrize("name", ["one", "small", "32k+1", "large", "random"])
def test_kafka_python_decodes_our_output(
    codec: Compression, level: int | None, name: str, monkeypatch
) -> None:
    _patch_kafka_python_snappy(monkeypatch)
    data = DATA[name]
    assert _kafka_python_decode(codec, compress(codec, data, level)) == data


def test_kafka_python_gzip_decoder_reads_stream_via_gzipfile() -> None:
    # GzipFile is what Java-compatible readers look like in Python: header fields must be sane.
    out = compress(Compression.GZIP, DATA["small"])
    with gzip.GzipFile(fileobj=io.BytesIO(out)) as f:
        assert f.read() == DATA["small"]
        assert f.mtime == 0
