/*
 * kafkalog_core.record._native: the per-record loops of the v2 encoder, in C.
 *
 * Optional accelerator. `kafkalog_core.record.encoder` decides the batch boundaries and fills
 * the 61-byte headers with numpy (per batch); this module does what is left per record, which
 * numpy/Arrow can only do in several passes over memory:
 *
 *   region_sizes  - the exact bytes of each batch's records region (varint sizes of the
 *                   deltas, lengths and the record length itself);
 *   write_batches - header | records ... for every batch, back to back, and each batch's
 *                   CRC-32C (Castagnoli, over attributes..end, stored big-endian at byte 17)
 *                   while the batch is still in cache; without headers it writes only the
 *                   records regions, for the compressed path.
 *
 * A record (KAFKA_LOG_FACTS.md 1.3):
 *   length | attributes(0) | timestampDelta | offsetDelta | keyLength | key | valueLength | value
 *   | headersCount + headers
 * every integer a zigzag varint; null key/value = length -1 and no bytes. The headers part is
 * either one 0x00 byte (no headers) or the bytes the encoder serialized for the record.
 *
 * The numpy path in encoder.py produces the same bytes; tests hold the two to that.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BATCH_HEADER_BYTES 61
#define CRC_FIELD 17      /* crc: uint32 big-endian at byte 17 of a batch */
#define CRC_COVERS_FROM 21 /* CRC-32C covers attributes .. end of batch */

/* ---------------------------------------------------------------------------------------- */
/* CRC-32C                                                                                   */
/* ---------------------------------------------------------------------------------------- */

static uint32_t crc_table[8][256];

static void crc_init_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = crc_table[0][i];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xFF] ^ (c >> 8);
            crc_table[t][i] = c;
        }
    }
}

/* Slicing-by-8 over the running (pre-inverted) state: the portable fallback. */
static uint32_t crc32c_table(uint32_t crc, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        w ^= crc;
        crc = crc_table[7][w & 0xFF] ^ crc_table[6][(w >> 8) & 0xFF] ^
              crc_table[5][(w >> 16) & 0xFF] ^ crc_table[4][(w >> 24) & 0xFF] ^
              crc_table[3][(w >> 32) & 0xFF] ^ crc_table[2][(w >> 40) & 0xFF] ^
              crc_table[1][(w >> 48) & 0xFF] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_HW_CRC 1
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p,
                                                              size_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}

/* Three independent CRCs at once: the crc32 instruction has a latency of ~3 cycles but a
 * throughput of one per cycle, so three batches' chains in one loop run ~3x one chain. */
__attribute__((target("sse4.2"))) static void crc32c_hw3(uint32_t crc[3], const uint8_t *p[3],
                                                           size_t n[3]) {
    size_t common = n[0];
    if (n[1] < common) common = n[1];
    if (n[2] < common) common = n[2];
    common &= ~(size_t)7;
    uint64_t c0 = crc[0], c1 = crc[1], c2 = crc[2];
    const uint8_t *a = p[0], *b = p[1], *d = p[2];
    for (size_t i = 0; i < common; i += 8) {
        uint64_t w0, w1, w2;
        memcpy(&w0, a + i, 8);
        memcpy(&w1, b + i, 8);
        memcpy(&w2, d + i, 8);
        c0 = _mm_crc32_u64(c0, w0);
        c1 = _mm_crc32_u64(c1, w1);
        c2 = _mm_crc32_u64(c2, w2);
    }
    crc[0] = crc32c_hw((uint32_t)c0, a + common, n[0] - common);
    crc[1] = crc32c_hw((uint32_t)c1, b + common, n[1] - common);
    crc[2] = crc32c_hw((uint32_t)c2, d + common, n[2] - common);
}
#endif

static int use_hw_crc = 0;

static uint32_t crc32c_one(const uint8_t *p, size_t n) {
#ifdef HAVE_HW_CRC
    if (use_hw_crc) return ~crc32c_hw(0xFFFFFFFFu, p, n);
#endif
    return ~crc32c_table(0xFFFFFFFFu, p, n);
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Fill the CRC field of the batches starting at `batch[0..count)` (each `size[i]` bytes). */
static void fill_crcs(uint8_t *const *batch, const size_t *size, int count) {
    int i = 0;
#ifdef HAVE_HW_CRC
    if (use_hw_crc) {
        for (; i + 3 <= count; i += 3) {
            uint32_t crc[3] = {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu};
            const uint8_t *p[3];
            size_t n[3];
            for (int k = 0; k < 3; k++) {
                p[k] = batch[i + k] + CRC_COVERS_FROM;
                n[k] = size[i + k] - CRC_COVERS_FROM;
            }
            crc32c_hw3(crc, p, n);
            for (int k = 0; k < 3; k++) put_be32(batch[i + k] + CRC_FIELD, ~crc[k]);
        }
    }
#endif
    for (; i < count; i++)
        put_be32(batch[i] + CRC_FIELD,
                 crc32c_one(batch[i] + CRC_COVERS_FROM, size[i] - CRC_COVERS_FROM));
}

/* ---------------------------------------------------------------------------------------- */
/* varints                                                                                   */
/* ---------------------------------------------------------------------------------------- */

static inline uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

static inline int64_t varint_size(uint64_t u) {
    int bits = 64 - __builtin_clzll(u | 1);
    return (bits + 6) / 7;
}

static inline uint8_t *put_varint(uint8_t *p, uint64_t u) {
    while (u >= 0x80) {
        *p++ = (uint8_t)(u | 0x80);
        u >>= 7;
    }
    *p++ = (uint8_t)u;
    return p;
}

/* ---------------------------------------------------------------------------------------- */
/* argument plumbing                                                                         */
/* ---------------------------------------------------------------------------------------- */

/* A binary column: per-row lengths (int64, -1 = null), Arrow offsets (int32 or int64, already
 * sliced to the column's rows: n + 1 entries) and the data buffer. */
typedef struct {
    Py_buffer lengths, offsets, data;
    int have_offsets, have_data, wide;
} column_t;

static int get_array(PyObject *obj, Py_buffer *view, Py_ssize_t items, int writable,
                     const char *name) {
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) return -1;
    if (items >= 0 && view->len != items * 8) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd int64 values, got %zd bytes", name,
                     items, view->len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static void release_column(column_t *c) {
    PyBuffer_Release(&c->lengths);
    if (c->have_offsets) PyBuffer_Release(&c->offsets);
    if (c->have_data) PyBuffer_Release(&c->data);
}

static int get_column(PyObject *lengths, PyObject *offsets, PyObject *data, Py_ssize_t n,
                      column_t *c, const char *name) {
    memset(c, 0, sizeof(*c));
    if (get_array(lengths, &c->lengths, n, 0, name) < 0) return -1;
    if (offsets == Py_None) return 0;
    if (PyObject_GetBuffer(offsets, &c->offsets, PyBUF_SIMPLE) < 0) goto fail;
    c->have_offsets = 1;
    if (c->offsets.len == (n + 1) * 8)
        c->wide = 1;
    else if (c->offsets.len != (n + 1) * 4) {
        PyErr_Format(PyExc_ValueError, "%s: offsets of %zd bytes do not fit %zd rows", name,
                     c->offsets.len, n);
        goto fail;
    }
    if (data != Py_None) {
        if (PyObject_GetBuffer(data, &c->data, PyBUF_SIMPLE) < 0) goto fail;
        c->have_data = 1;
    }
    return 0;
fail:
    release_column(c);
    return -1;
}

static inline int64_t column_length(const column_t *c, Py_ssize_t i) {
    return ((const int64_t *)c->lengths.buf)[i];
}

/* The bytes of row i (length `len` > 0), or NULL when they are not inside the data buffer. */
static inline const uint8_t *column_bytes(const column_t *c, Py_ssize_t i, int64_t len) {
    int64_t start = c->wide ? ((const int64_t *)c->offsets.buf)[i]
                            : (int64_t)((const int32_t *)c->offsets.buf)[i];
    if (!c->have_data || start < 0 || start + len > (int64_t)c->data.len) return NULL;
    return (const uint8_t *)c->data.buf + start;
}

/* ---------------------------------------------------------------------------------------- */
/* the encoder loops                                                                         */
/* ---------------------------------------------------------------------------------------- */

typedef struct {
    Py_ssize_t n, batches;
    const int64_t *starts, *timestamps;
    column_t key, value, suffix; /* suffix.lengths empty (have 0) when records have no headers */
    int has_suffix;
} records_t;

static inline int64_t record_body(const records_t *r, Py_ssize_t i, Py_ssize_t start) {
    int64_t klen = column_length(&r->key, i), vlen = column_length(&r->value, i);
    int64_t body = 1 /* attributes */ + varint_size(zigzag(r->timestamps[i] - r->timestamps[start])) +
                   varint_size(zigzag((int64_t)(i - start))) + varint_size(zigzag(klen)) +
                   varint_size(zigzag(vlen));
    if (klen > 0) body += klen;
    if (vlen > 0) body += vlen;
    body += r->has_suffix ? column_length(&r->suffix, i) : 1;
    return body;
}

static Py_ssize_t batch_end(const records_t *r, Py_ssize_t b) {
    return b + 1 < r->batches ? (Py_ssize_t)r->starts[b + 1] : r->n;
}

static int parse_records(PyObject *starts, PyObject *timestamps, PyObject *key_lengths,
                         PyObject *key_offsets, PyObject *key_data, PyObject *value_lengths,
                         PyObject *value_offsets, PyObject *value_data, PyObject *suffix_lengths,
                         PyObject *suffix_offsets, PyObject *suffix_data, records_t *r,
                         Py_buffer *starts_view, Py_buffer *ts_view) {
    memset(r, 0, sizeof(*r));
    if (get_array(timestamps, ts_view, -1, 0, "timestamps") < 0) return -1;
    r->n = ts_view->len / 8;
    if (get_array(starts, starts_view, -1, 0, "starts") < 0) goto fail_ts;
    r->batches = starts_view->len / 8;
    r->starts = (const int64_t *)starts_view->buf;
    r->timestamps = (const int64_t *)ts_view->buf;
    for (Py_ssize_t b = 0; b < r->batches; b++) {
        Py_ssize_t end = b + 1 < r->batches ? (Py_ssize_t)r->starts[b + 1] : r->n;
        if (r->starts[b] < 0 || (Py_ssize_t)r->starts[b] >= end || end > r->n ||
            (b == 0 && r->starts[0] != 0)) {
            PyErr_SetString(PyExc_ValueError, "starts must begin at 0 and increase below n");
            goto fail_starts;
        }
    }
    if (get_column(key_lengths, key_offsets, key_data, r->n, &r->key, "key") < 0)
        goto fail_starts;
    if (get_column(value_lengths, value_offsets, value_data, r->n, &r->value, "value") < 0)
        goto fail_key;
    if (suffix_lengths != Py_None) {
        if (get_column(suffix_lengths, suffix_offsets, suffix_data, r->n, &r->suffix,
                       "headers") < 0)
            goto fail_value;
        r->has_suffix = 1;
    }
    return 0;
fail_value:
    release_column(&r->value);
fail_key:
    release_column(&r->key);
fail_starts:
    PyBuffer_Release(starts_view);
fail_ts:
    PyBuffer_Release(ts_view);
    return -1;
}

static void release_records(records_t *r, Py_buffer *starts_view, Py_buffer *ts_view) {
    if (r->has_suffix) release_column(&r->suffix);
    release_column(&r->value);
    release_column(&r->key);
    PyBuffer_Release(starts_view);
    PyBuffer_Release(ts_view);
}

PyDoc_STRVAR(region_sizes_doc,
             "region_sizes(out, starts, timestamps, key_lengths, value_lengths, suffix_lengths)\n"
             "\n"
             "Write into `out` (int64, one per batch) the bytes of each batch's records region.\n"
             "suffix_lengths is None when no record has headers (one 0x00 byte each).");

static PyObject *region_sizes(PyObject *self, PyObject *args) {
    PyObject *out, *starts, *timestamps, *key_lengths, *value_lengths, *suffix_lengths;
    if (!PyArg_ParseTuple(args, "OOOOOO", &out, &starts, &timestamps, &key_lengths,
                          &value_lengths, &suffix_lengths))
        return NULL;
    records_t r;
    Py_buffer starts_view, ts_view, out_view;
    if (parse_records(starts, timestamps, key_lengths, Py_None, Py_None, value_lengths, Py_None,
                      Py_None, suffix_lengths, Py_None, Py_None, &r, &starts_view, &ts_view) < 0)
        return NULL;
    if (get_array(out, &out_view, r.batches, 1, "out") < 0) {
        release_records(&r, &starts_view, &ts_view);
        return NULL;
    }
    int64_t *sizes = (int64_t *)out_view.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t b = 0; b < r.batches; b++) {
        Py_ssize_t start = (Py_ssize_t)r.starts[b], end = batch_end(&r, b);
        int64_t total = 0;
        for (Py_ssize_t i = start; i < end; i++) {
            int64_t body = record_body(&r, i, start);
            total += body + varint_size(zigzag(body));
        }
        sizes[b] = total;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out_view);
    release_records(&r, &starts_view, &ts_view);
    Py_RETURN_NONE;
}

/* Copy `len` bytes of a column's row i (nothing for null/empty); NULL when out of bounds. */
static inline uint8_t *put_bytes(uint8_t *p, const column_t *c, Py_ssize_t i, int64_t len) {
    if (len <= 0) return p;
    const uint8_t *src = column_bytes(c, i, len);
    if (src == NULL) return NULL;
    memcpy(p, src, (size_t)len);
    return p + len;
}

/* Write the records of batch b at p (at most `room` bytes). Returns the end, or NULL with
 * *why set when the output is too small or a column's offsets point outside its data. */
static uint8_t *write_records(const records_t *r, Py_ssize_t b, uint8_t *p, int64_t room,
                              const char **why) {
    Py_ssize_t start = (Py_ssize_t)r->starts[b], end = batch_end(r, b);
    const uint8_t *limit = p + room;
    int64_t base_ts = r->timestamps[start];
    for (Py_ssize_t i = start; i < end; i++) {
        int64_t klen = column_length(&r->key, i), vlen = column_length(&r->value, i);
        int64_t body = record_body(r, i, start);
        if ((int64_t)(limit - p) < body + varint_size(zigzag(body))) {
            *why = "output buffer too small for the records";
            return NULL;
        }
        p = put_varint(p, zigzag(body));
        *p++ = 0; /* attributes */
        p = put_varint(p, zigzag(r->timestamps[i] - base_ts));
        p = put_varint(p, zigzag((int64_t)(i - start)));
        p = put_varint(p, zigzag(klen));
        if ((p = put_bytes(p, &r->key, i, klen)) == NULL) goto outside;
        p = put_varint(p, zigzag(vlen));
        if ((p = put_bytes(p, &r->value, i, vlen)) == NULL) goto outside;
        if (r->has_suffix) {
            if ((p = put_bytes(p, &r->suffix, i, column_length(&r->suffix, i))) == NULL)
                goto outside;
        } else {
            *p++ = 0; /* headersCount 0 */
        }
    }
    return p;
outside:
    *why = "a column's offsets point outside its data";
    return NULL;
}

PyDoc_STRVAR(
    write_batches_doc,
    "write_batches(out, headers, starts, timestamps, key_lengths, key_offsets, key_data,\n"
    "              value_lengths, value_offsets, value_data,\n"
    "              suffix_lengths, suffix_offsets, suffix_data) -> int\n"
    "\n"
    "Write every batch into `out` (writable bytes): with `headers` (61 bytes per batch, length\n"
    "field filled), header then records, and the batch's CRC-32C; with headers None only the\n"
    "records regions, back to back. Returns the bytes written. *_data may be None when every\n"
    "row of that column is null or empty; the suffix_* are None when no record has headers.");

/* Batches whose CRC is still to be filled: three at a time go through the interleaved CRC
 * while they are in cache. */
#define CRC_GROUP 3

static PyObject *write_batches(PyObject *self, PyObject *args) {
    PyObject *out, *headers, *starts, *timestamps, *kl, *ko, *kd, *vl, *vo, *vd, *sl, *so, *sd;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOO", &out, &headers, &starts, &timestamps, &kl, &ko,
                          &kd, &vl, &vo, &vd, &sl, &so, &sd))
        return NULL;
    records_t r;
    Py_buffer starts_view, ts_view, out_view, header_view;
    if (parse_records(starts, timestamps, kl, ko, kd, vl, vo, vd, sl, so, sd, &r, &starts_view,
                      &ts_view) < 0)
        return NULL;
    if (!r.key.have_offsets || !r.value.have_offsets || (r.has_suffix && !r.suffix.have_offsets)) {
        PyErr_SetString(PyExc_ValueError, "write_batches needs the offsets of every column");
        release_records(&r, &starts_view, &ts_view);
        return NULL;
    }
    if (PyObject_GetBuffer(out, &out_view, PyBUF_WRITABLE) < 0) {
        release_records(&r, &starts_view, &ts_view);
        return NULL;
    }
    int with_headers = headers != Py_None;
    if (with_headers) {
        if (PyObject_GetBuffer(headers, &header_view, PyBUF_SIMPLE) < 0) goto fail_out;
        if (header_view.len != r.batches * BATCH_HEADER_BYTES) {
            PyErr_Format(PyExc_ValueError, "headers: expected %zd bytes, got %zd",
                         r.batches * BATCH_HEADER_BYTES, header_view.len);
            PyBuffer_Release(&header_view);
            goto fail_out;
        }
    }
    uint8_t *base = (uint8_t *)out_view.buf, *p = base, *end = base + out_view.len;
    const char *why = NULL;
    Py_BEGIN_ALLOW_THREADS
    uint8_t *pending[CRC_GROUP];
    size_t pending_size[CRC_GROUP];
    int npending = 0;
    for (Py_ssize_t b = 0; b < r.batches; b++) {
        uint8_t *batch = p;
        if (with_headers) {
            if (end - p < BATCH_HEADER_BYTES) {
                why = "output buffer too small for the batch headers";
                break;
            }
            memcpy(p, (const uint8_t *)header_view.buf + b * BATCH_HEADER_BYTES,
                   BATCH_HEADER_BYTES);
            p += BATCH_HEADER_BYTES;
        }
        p = write_records(&r, b, p, end - p, &why);
        if (p == NULL) break;
        if (with_headers) {
            pending[npending] = batch;
            pending_size[npending] = (size_t)(p - batch);
            if (++npending == CRC_GROUP) {
                fill_crcs(pending, pending_size, npending);
                npending = 0;
            }
        }
    }
    if (why == NULL && npending) fill_crcs(pending, pending_size, npending);
    Py_END_ALLOW_THREADS
    Py_ssize_t written = why == NULL ? (Py_ssize_t)(p - base) : -1;
    if (with_headers) PyBuffer_Release(&header_view);
    PyBuffer_Release(&out_view);
    release_records(&r, &starts_view, &ts_view);
    if (why != NULL) {
        PyErr_SetString(PyExc_ValueError, why);
        return NULL;
    }
    return PyLong_FromSsize_t(written);
fail_out:
    PyBuffer_Release(&out_view);
    release_records(&r, &starts_view, &ts_view);
    return NULL;
}

PyDoc_STRVAR(crc32c_doc, "crc32c(data) -> int: CRC-32C (Castagnoli) of a bytes-like object.");

static PyObject *crc32c_py(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t crc = crc32c_one((const uint8_t *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

PyDoc_STRVAR(set_hardware_crc_doc,
             "set_hardware_crc(on) -> bool: use the CPU's crc32 instruction when it has one\n"
             "(the default) or the portable table; returns whether hardware CRC is now used.\n"
             "For tests that must cover both.");

static PyObject *set_hardware_crc(PyObject *self, PyObject *arg) {
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
#ifdef HAVE_HW_CRC
    __builtin_cpu_init();
    use_hw_crc = on && __builtin_cpu_supports("sse4.2") != 0;
#else
    use_hw_crc = 0;
#endif
    return PyBool_FromLong(use_hw_crc);
}

static PyMethodDef methods[] = {
    {"set_hardware_crc", set_hardware_crc, METH_O, set_hardware_crc_doc},
    {"region_sizes", region_sizes, METH_VARARGS, region_sizes_doc},
    {"write_batches", write_batches, METH_VARARGS, write_batches_doc},
    {"crc32c", crc32c_py, METH_O, crc32c_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native",
    "The per-record loops of the v2 encoder in C (optional; encoder.py has a numpy path).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    crc_init_tables();
#ifdef HAVE_HW_CRC
    __builtin_cpu_init();
    use_hw_crc = __builtin_cpu_supports("sse4.2") != 0;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "HARDWARE_CRC", use_hw_crc) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
