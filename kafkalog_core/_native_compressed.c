/*
 * kafkalog_core._native, part two: compressed batches written in one pass (lz4, snappy).
 *
 * The general compressed path writes every records region into one large buffer, compresses
 * each region with one library call into a new bytes object, joins the codec's framing around
 * it and copies the result next to its header: the records go through RAM twice and the
 * compressed bytes are copied twice. Here each batch's records are written into a small
 * scratch buffer (still in cache when the codec reads them; it grows to the largest region) and the codec writes its blocks
 * straight into the output, behind the header and the framing words.
 *
 * The codec is a Python callable compress_into(src, dst) -> bytes written (cramjam's
 * *_into functions take exactly that), so the level and library choice stay in
 * kafkalog_core.record.compression, which also passes the framing's fixed bytes.
 */
#include "_native.h"

/* Framing kinds: the values of kafkalog_core.record.compression.FRAMING_LZ4 / FRAMING_SNAPPY. */
#define FRAMING_LZ4 1    /* Kafka's lz4 frame: uint32 LE block lengths, stored blocks flagged */
#define FRAMING_SNAPPY 2 /* xerial snappy stream: int32 BE block lengths */
/* compression._LZ4_BLOCK_UNCOMPRESSED: the length word's flag of a block stored raw */
#define LZ4_BLOCK_UNCOMPRESSED 0x80000000u

static void put_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* Whether anything still refers to a view's memory: the view itself, a buffer it exported or
 * a view derived from it (a slice shares its managed buffer). */
static int kept(PyObject *view) {
    PyMemoryViewObject *m = (PyMemoryViewObject *)view;
    return Py_REFCNT(view) > 1 || m->exports > 0 || m->mbuf->exports > 1;
}

/* compress_into(src, dst) over scratch[0, n) and out[0, room): the bytes written, or -1 with
 * the callable's exception (or a ValueError for an impossible count) set. */
static Py_ssize_t call_codec(PyObject *compress_into, uint8_t *src, Py_ssize_t n, uint8_t *dst,
                             Py_ssize_t room) {
    PyObject *src_view = PyMemoryView_FromMemory((char *)src, n, PyBUF_READ);
    if (src_view == NULL) return -1;
    PyObject *dst_view = PyMemoryView_FromMemory((char *)dst, room, PyBUF_WRITE);
    if (dst_view == NULL) {
        Py_DECREF(src_view);
        return -1;
    }
    PyObject *result = PyObject_CallFunctionObjArgs(compress_into, src_view, dst_view, NULL);
    Py_ssize_t written = -1;
    if (result != NULL) {
        written = PyLong_AsSsize_t(result);
        Py_DECREF(result);
        if ((written < 0 || written > room) && !PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError, "compress_into returned %zd for a %zd-byte buffer",
                         written, room);
            written = -1;
        }
    }
    /* The views point into memory this call owns (the scratch buffer is freed at the end): a
     * callable that kept one, or a slice or an export of one, is refused. */
    if (written >= 0 && (kept(src_view) || kept(dst_view))) {
        PyErr_SetString(PyExc_ValueError, "compress_into kept a view of the buffers it was given");
        written = -1;
    }
    Py_DECREF(src_view);
    Py_DECREF(dst_view);
    return written;
}

/* The framed compressed records of one region at p (room up to end): prefix, blocks, suffix.
 * Returns the end, or NULL with an exception set. */
static uint8_t *write_frame(uint8_t *p, uint8_t *end, uint8_t *region, Py_ssize_t region_len,
                            int framing, const Py_buffer *prefix, const Py_buffer *suffix,
                            Py_ssize_t block_size, PyObject *compress_into) {
    if (end - p < prefix->len) goto too_small;
    memcpy(p, prefix->buf, (size_t)prefix->len);
    p += prefix->len;
    for (Py_ssize_t at = 0; at < region_len; at += block_size) {
        Py_ssize_t n = region_len - at < block_size ? region_len - at : block_size;
        if (end - p < 4) goto too_small;
        Py_ssize_t written = call_codec(compress_into, region + at, n, p + 4, end - p - 4);
        if (written < 0) return NULL;
        if (framing == FRAMING_SNAPPY) {
            put_be32(p, (uint32_t)written);
        } else if (written < n) {
            put_le32(p, (uint32_t)written);
        } else { /* Lz4BlockOutputStream stores a block that does not shrink as it is */
            if (end - p - 4 < n) goto too_small;
            memcpy(p + 4, region + at, (size_t)n);
            put_le32(p, (uint32_t)n | LZ4_BLOCK_UNCOMPRESSED);
            written = n;
        }
        p += 4 + written;
    }
    if (end - p < suffix->len) goto too_small;
    memcpy(p, suffix->buf, (size_t)suffix->len);
    return p + suffix->len;
too_small:
    PyErr_SetString(PyExc_ValueError, "output buffer too small for the compressed batches");
    return NULL;
}

const char write_compressed_batches_doc[] =
    "write_compressed_batches(out, headers, starts, timestamps, key, value, headers_column,\n"
    "                         bodies, sizes_out, framing, block_size, compress_into) -> int\n"
    "\n"
    "Write every batch into `out` back to back: its 61-byte header (from `headers`), then its\n"
    "records compressed block by block (block_size input bytes each) by\n"
    "compress_into(src, dst) -> bytes written, inside the framing (kind, prefix, suffix):\n"
    "kind 1 = Kafka's lz4 frame (uint32 LE lengths; a block that does not shrink is stored\n"
    "raw, flagged 0x80000000), 2 = xerial snappy (int32 BE lengths). Fills each header's length\n"
    "and CRC-32C and stores the batch sizes in sizes_out (int64, one per batch); returns the\n"
    "bytes written. Columns, bodies (int32 or None) as for write_batches. ValueError when out\n"
    "is too small; the callable's exceptions propagate.";

PyObject *write_compressed_batches(PyObject *self, PyObject *args) {
    PyObject *out, *headers, *starts, *timestamps, *key, *value, *suffix, *bodies_obj, *sizes_obj;
    PyObject *compress_into;
    int framing;
    Py_buffer prefix, frame_end;
    Py_ssize_t block_size;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO(iy*y*)nO", &out, &headers, &starts, &timestamps,
                          &key, &value, &suffix, &bodies_obj, &sizes_obj, &framing, &prefix,
                          &frame_end, &block_size, &compress_into))
        return NULL;
    records_t r;
    Py_buffer starts_view, ts_view, out_view, header_view, sizes_view, bodies_view;
    int have_records = 0, have_bodies = 0, have_out = 0, have_headers = 0, have_sizes = 0;
    uint8_t *scratch = NULL;
    Py_ssize_t written = -1;
    if (framing != FRAMING_LZ4 && framing != FRAMING_SNAPPY) {
        PyErr_Format(PyExc_ValueError, "framing kind must be 1 (lz4) or 2 (snappy), not %d",
                     framing);
        goto done;
    }
    if (block_size < 1 || !PyCallable_Check(compress_into)) {
        PyErr_SetString(PyExc_ValueError, "block_size must be >= 1 and compress_into callable");
        goto done;
    }
    if (parse_records(starts, timestamps, key, value, suffix, &r, &starts_view, &ts_view) < 0)
        goto done;
    have_records = 1;
    const int32_t *bodies = NULL;
    if (get_bodies(bodies_obj, r.n, &bodies_view, &bodies) < 0) goto done;
    have_bodies = bodies != NULL;
    if (get_array(sizes_obj, &sizes_view, r.batches, 1, "sizes_out") < 0) goto done;
    have_sizes = 1;
    if (get_headers(headers, r.batches, &header_view) < 0) goto done;
    have_headers = 1;
    if (PyObject_GetBuffer(out, &out_view, PyBUF_WRITABLE) < 0) goto done;
    have_out = 1;
    uint8_t *base = (uint8_t *)out_view.buf, *p = base, *end = base + out_view.len;
    int64_t *sizes = (int64_t *)sizes_view.buf;
    recview_t v = recview_of(&r);
    int64_t scratch_room = 0;
    for (Py_ssize_t b = 0; b < r.batches; b++) {
        Py_ssize_t first = (Py_ssize_t)r.starts[b], last = batch_end(&r, b);
        const char *why = NULL;
        uint8_t *records_end;
        for (;;) {
            Py_BEGIN_ALLOW_THREADS
            records_end = write_records(&v, first, last, scratch, scratch_room, bodies, &why);
            Py_END_ALLOW_THREADS
            if (records_end != NULL || why != records_too_small) break;
            /* a region larger than any before: grow (at least double, so this is rare) */
            int64_t region = region_size(&v, first, last);
            if (region < 2 * scratch_room) region = 2 * scratch_room;
            uint8_t *grown = (uint8_t *)PyMem_RawRealloc(scratch, (size_t)region);
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            scratch = grown;
            scratch_room = region;
        }
        if (records_end == NULL) {
            PyErr_SetString(PyExc_ValueError, why);
            goto done;
        }
        uint8_t *batch = p;
        if (end - p < BATCH_HEADER_BYTES) {
            PyErr_SetString(PyExc_ValueError, "output buffer too small for the batch headers");
            goto done;
        }
        memcpy(p, (const uint8_t *)header_view.buf + b * BATCH_HEADER_BYTES, BATCH_HEADER_BYTES);
        p = write_frame(p + BATCH_HEADER_BYTES, end, scratch, records_end - scratch, framing,
                        &prefix, &frame_end, block_size, compress_into);
        if (p == NULL) goto done;
        int64_t size = p - batch;
        if (size - LOG_OVERHEAD > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "batch %zd is %lld bytes, beyond an int32 length", b,
                         (long long)size);
            goto done;
        }
        put_be32(batch + LENGTH_FIELD, (uint32_t)(size - LOG_OVERHEAD));
        put_be32(batch + CRC_FIELD,
                 crc32c_one(batch + CRC_COVERS_FROM, (size_t)(size - CRC_COVERS_FROM)));
        sizes[b] = size;
    }
    written = p - base;
done:
    PyMem_RawFree(scratch);
    if (have_out) PyBuffer_Release(&out_view);
    if (have_headers) PyBuffer_Release(&header_view);
    if (have_sizes) PyBuffer_Release(&sizes_view);
    if (have_bodies) PyBuffer_Release(&bodies_view);
    if (have_records) release_records(&r, &starts_view, &ts_view);
    PyBuffer_Release(&frame_end);
    PyBuffer_Release(&prefix);
    return written < 0 ? NULL : PyLong_FromSsize_t(written);
}
