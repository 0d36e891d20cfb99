/*
 * kafkalog_core._native: the core's per-record loops in C - the v2 encoder's, murmur2, the
 * cleaner's key map and the merge of sorted runs.
 *
 * Optional accelerator; each caller keeps a numpy path that gives the same results, and the
 * tests hold the two to that.
 *
 * Encoder. `kafkalog_core.record.encoder` fills the 61-byte headers with numpy (per batch);
 * this module does what is per record, which numpy/Arrow can only do in several passes:
 *
 *   non_decreasing - whether the timestamps allow the C split;
 *   plan_batches   - the batch split of encoder/split.py split_batches (non-decreasing timestamps)
 *                    with each batch's exact size, restartable at any batch start so that an
 *                    append can plan and write one piece at a time;
 *   region_sizes   - exact sizes for batches the numpy split chose (any timestamps);
 *   write_batches  - header | records ... for every batch, back to back, and each batch's
 *                    CRC-32C (Castagnoli, over attributes..end, stored big-endian at byte 17)
 *                    while the batch is still in cache; without headers it writes only the
 *                    records regions, for the compressed path;
 *   max_length     - the longest row of a column (the up-front size bound of a stream);
 *   write_compressed_batches (in _native_compressed.c) - header | lz4 or snappy framed records,
 *                    each batch's records compressed from a cache-sized scratch buffer.
 *
 * A record (KAFKA_LOG_FACTS.md 1.3):
 *   length | attributes(0) | timestampDelta | offsetDelta | keyLength | key | valueLength | value
 *   | headersCount + headers
 * every integer a zigzag varint; null key/value = length -1 and no bytes. The headers part is
 * either one 0x00 byte (no headers) or the bytes the encoder serialized for the record.
 *
 * The numpy path in record/encoder/ produces the same bytes.
 *
 * Partitioner. murmur2_column hashes every key of a column the way the Java producer's
 * Utils.murmur2 does (kafkalog_core.partitioner has the numpy twin).
 *
 * Cleaner. md5_spans and the offset_map_* loops (in _native_keys.c) are the log cleaner's map
 * of latest offsets per key (kafkalog_core.maintenance.offset_map has the Arrow twin).
 *
 * Merge. merge_runs (in _native_merge.c) merges sorted runs by a key of several columns (the
 * arrow range mode's write tasks; their pure path sorts the concatenation instead).
 */
#include "_native.h"


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

uint32_t crc32c_one(const uint8_t *p, size_t n) {
#ifdef HAVE_HW_CRC
    if (use_hw_crc) return ~crc32c_hw(0xFFFFFFFFu, p, n);
#endif
    return ~crc32c_table(0xFFFFFFFFu, p, n);
}

void put_be32(uint8_t *p, uint32_t v) {
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

/* Bytes of a varint by the bit length of its value: a table, as a division by 7 in every one
 * of a record's dozen varint sizes was a fifth of the encoder's instructions. */
static const uint8_t varint_bytes_by_bits[65] = {
    1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5,
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 10,
};

static inline int64_t varint_size(uint64_t u) {
    return varint_bytes_by_bits[64 - __builtin_clzll(u | 1)];
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

void release_column(column_t *c) {
    if (!c->present) return;
    PyBuffer_Release(&c->offsets);
    if (c->have_validity) PyBuffer_Release(&c->validity);
    if (c->have_data) PyBuffer_Release(&c->data);
    c->present = 0;
}

int get_column(PyObject *spec, Py_ssize_t n, column_t *c, const char *name) {
    memset(c, 0, sizeof(*c));
    if (spec == Py_None) return 0;
    PyObject *offsets, *validity, *data;
    Py_ssize_t bit_offset;
    if (!PyArg_ParseTuple(spec, "OOnO", &offsets, &validity, &bit_offset, &data)) return -1;
    if (PyObject_GetBuffer(offsets, &c->offsets, PyBUF_SIMPLE) < 0) return -1;
    c->present = 1;
    if (c->offsets.len == (n + 1) * 8)
        c->wide = 1;
    else if (c->offsets.len != (n + 1) * 4) {
        PyErr_Format(PyExc_ValueError, "%s: offsets of %zd bytes do not fit %zd rows", name,
                     c->offsets.len, n);
        goto fail;
    }
    if (validity != Py_None) {
        if (PyObject_GetBuffer(validity, &c->validity, PyBUF_SIMPLE) < 0) goto fail;
        c->have_validity = 1;
        c->bit_offset = bit_offset;
        if (bit_offset < 0 || (bit_offset + n + 7) / 8 > c->validity.len) {
            PyErr_Format(PyExc_ValueError, "%s: validity bitmap too short", name);
            goto fail;
        }
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


colview_t view_of(const column_t *c) {
    colview_t v;
    memset(&v, 0, sizeof(v));
    if (!c->present) return v;
    if (c->wide)
        v.o64 = (const int64_t *)c->offsets.buf;
    else
        v.o32 = (const int32_t *)c->offsets.buf;
    if (c->have_validity) {
        v.validity = (const uint8_t *)c->validity.buf;
        v.bit_offset = c->bit_offset;
    }
    if (c->have_data) {
        v.data = (const uint8_t *)c->data.buf;
        v.data_len = (int64_t)c->data.len;
    }
    return v;
}

/* Copy n bytes with fixed-size moves for short runs (keys, small values), where a call to
 * memcpy costs more than the copy; overlapping moves cover every length exactly. */
static inline void copy_bytes(uint8_t *dst, const uint8_t *src, size_t n) {
    if (n >= 16 && n <= 64) {
        uint8_t head[16], tail[16];
        size_t at = 0;
        for (; at + 16 < n; at += 16) {
            memcpy(head, src + at, 16);
            memcpy(dst + at, head, 16);
        }
        memcpy(tail, src + n - 16, 16);
        memcpy(dst + n - 16, tail, 16);
    } else if (n >= 8 && n < 16) {
        uint64_t a, b;
        memcpy(&a, src, 8);
        memcpy(&b, src + n - 8, 8);
        memcpy(dst, &a, 8);
        memcpy(dst + n - 8, &b, 8);
    } else if (n < 8) {
        for (size_t i = 0; i < n; i++) dst[i] = src[i];
    } else {
        memcpy(dst, src, n);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* the encoder loops                                                                         */
/* ---------------------------------------------------------------------------------------- */


recview_t recview_of(const records_t *r) {
    recview_t v;
    v.key = view_of(&r->key);
    v.value = view_of(&r->value);
    v.suffix = view_of(&r->suffix);
    v.has_suffix = r->suffix.present;
    v.timestamps = r->timestamps;
    return v;
}

/* A record's size without its length varint, its timestampDelta and its offsetDelta. */
static inline int64_t record_fixed(const recview_t *r, Py_ssize_t i) {
    int64_t klen = view_length(&r->key, i), vlen = view_length(&r->value, i);
    int64_t fixed = 1 /* attributes */ + varint_size(zigzag(klen)) + varint_size(zigzag(vlen));
    if (klen > 0) fixed += klen;
    if (vlen > 0) fixed += vlen;
    fixed += r->has_suffix ? view_length(&r->suffix, i) : 1;
    return fixed;
}

static inline int64_t record_body(const recview_t *r, int64_t fixed, Py_ssize_t i,
                                  Py_ssize_t start) {
    return fixed + varint_size(zigzag(r->timestamps[i] - r->timestamps[start])) +
           varint_size(zigzag((int64_t)(i - start)));
}

/* Exact bytes of the records region of the batch [start, end). */
int64_t region_size(const recview_t *r, Py_ssize_t start, Py_ssize_t end) {
    int64_t total = 0;
    for (Py_ssize_t i = start; i < end; i++) {
        int64_t body = record_body(r, record_fixed(r, i), i, start);
        total += body + varint_size(zigzag(body));
    }
    return total;
}

Py_ssize_t batch_end(const records_t *r, Py_ssize_t b) {
    return b + 1 < r->batches ? (Py_ssize_t)r->starts[b + 1] : r->n;
}

void release_records(records_t *r, Py_buffer *starts_view, Py_buffer *ts_view) {
    release_column(&r->suffix);
    release_column(&r->value);
    release_column(&r->key);
    if (starts_view != NULL) PyBuffer_Release(starts_view);
    PyBuffer_Release(ts_view);
}

/* Timestamps and the three columns; with `starts` also the batch starts (checked). */
int parse_records(PyObject *starts, PyObject *timestamps, PyObject *key, PyObject *value,
                  PyObject *suffix, records_t *r, Py_buffer *starts_view, Py_buffer *ts_view) {
    memset(r, 0, sizeof(*r));
    if (get_array(timestamps, ts_view, -1, 0, "timestamps") < 0) return -1;
    r->n = ts_view->len / 8;
    r->timestamps = (const int64_t *)ts_view->buf;
    if (starts != NULL) {
        if (get_array(starts, starts_view, -1, 0, "starts") < 0) {
            PyBuffer_Release(ts_view);
            return -1;
        }
        r->batches = starts_view->len / 8;
        r->starts = (const int64_t *)starts_view->buf;
        for (Py_ssize_t b = 0; b < r->batches; b++) {
            Py_ssize_t end = batch_end(r, b);
            if (r->starts[b] < 0 || (Py_ssize_t)r->starts[b] >= end || end > r->n ||
                (b == 0 && r->starts[0] != 0)) {
                PyErr_SetString(PyExc_ValueError, "starts must begin at 0 and increase below n");
                release_records(r, starts_view, ts_view);
                return -1;
            }
        }
    }
    if (get_column(key, r->n, &r->key, "key") < 0 ||
        get_column(value, r->n, &r->value, "value") < 0 ||
        get_column(suffix, r->n, &r->suffix, "headers") < 0) {
        release_records(r, starts != NULL ? starts_view : NULL, ts_view);
        return -1;
    }
    if (!r->key.present || !r->value.present) {
        PyErr_SetString(PyExc_ValueError, "key and value columns are required");
        release_records(r, starts != NULL ? starts_view : NULL, ts_view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(non_decreasing_doc,
             "non_decreasing(context, timestamps) -> bool: whether context + timestamps never\n"
             "decrease (plan_batches' condition; otherwise the numpy split runs).");

static PyObject *non_decreasing(PyObject *self, PyObject *args) {
    PyObject *context, *timestamps;
    if (!PyArg_ParseTuple(args, "OO", &context, &timestamps)) return NULL;
    Py_buffer ctx_view, ts_view;
    if (get_array(context, &ctx_view, -1, 0, "context") < 0) return NULL;
    if (get_array(timestamps, &ts_view, -1, 0, "timestamps") < 0) {
        PyBuffer_Release(&ctx_view);
        return NULL;
    }
    const int64_t *ctx = (const int64_t *)ctx_view.buf, *ts = (const int64_t *)ts_view.buf;
    Py_ssize_t c = ctx_view.len / 8, n = ts_view.len / 8;
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 1; j < c && ok; j++) ok = ctx[j] >= ctx[j - 1];
    if (ok && c > 0 && n > 0) ok = ts[0] >= ctx[c - 1];
    for (Py_ssize_t j = 1; j < n && ok; j++) ok = ts[j] >= ts[j - 1];
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ts_view);
    PyBuffer_Release(&ctx_view);
    return PyBool_FromLong(ok);
}

PyDoc_STRVAR(
    plan_batches_doc,
    "plan_batches(starts_out, sizes_out, timestamps, context, key, value, headers,\n"
    "             budget, most, offset_delta_size, first_row, piece_bytes[, bodies_out])\n"
    "             -> (count, next_row)\n"
    "\n"
    "The encoder's batch split (encoder.split.split_batches) for non-decreasing timestamps (see\n"
    "non_decreasing), with the exact records-region bytes of each batch, in one pass from\n"
    "first_row (a batch start). Stops before a batch that would take the batches planned in\n"
    "this call (61-byte headers included) past piece_bytes, but plans at least one. Writes the\n"
    "batch starts and region sizes into starts_out/sizes_out (int64, room for one per record\n"
    "from first_row) and returns how many, and the row the next call starts at (n when done).\n"
    "Planning again from any batch start gives the same batches: a record's estimate depends\n"
    "only on its position, not on where planning began. bodies_out (int32, optional) gets\n"
    "each planned record's size without its length varint, for write_batches.");

static PyObject *plan_batches(PyObject *self, PyObject *args) {
    PyObject *starts_out, *sizes_out, *timestamps, *context, *key, *value, *suffix;
    PyObject *bodies_out = Py_None;
    long long budget, most, offset_delta_size, piece_bytes;
    Py_ssize_t first_row;
    if (!PyArg_ParseTuple(args, "OOOOOOOLLLnL|O", &starts_out, &sizes_out, &timestamps, &context,
                          &key, &value, &suffix, &budget, &most, &offset_delta_size, &first_row,
                          &piece_bytes, &bodies_out))
        return NULL;
    records_t r;
    Py_buffer ts_view, ctx_view, starts_view, sizes_view, bodies_view;
    int32_t *bodies = NULL;
    if (parse_records(NULL, timestamps, key, value, suffix, &r, NULL, &ts_view) < 0) return NULL;
    if (get_array(context, &ctx_view, -1, 0, "context") < 0) goto fail_records;
    if (get_array(starts_out, &starts_view, -1, 1, "starts_out") < 0) goto fail_ctx;
    if (get_array(sizes_out, &sizes_view, -1, 1, "sizes_out") < 0) goto fail_starts;
    if (most < 1 || first_row < 0 || first_row > r.n) {
        PyErr_SetString(PyExc_ValueError, "most must be >= 1 and first_row within the records");
        goto fail_sizes;
    }
    if (starts_view.len / 8 < r.n - first_row || sizes_view.len / 8 < r.n - first_row) {
        PyErr_SetString(PyExc_ValueError, "starts_out/sizes_out need room for every row left");
        goto fail_sizes;
    }
    if (bodies_out != Py_None) {
        if (PyObject_GetBuffer(bodies_out, &bodies_view, PyBUF_WRITABLE) < 0) goto fail_sizes;
        if (bodies_view.len / 4 < r.n - first_row) {
            PyErr_SetString(PyExc_ValueError, "bodies_out needs an int32 for every row left");
            PyBuffer_Release(&bodies_view);
            goto fail_sizes;
        }
        bodies = (int32_t *)bodies_view.buf;
    }
    const int64_t *ctx = (const int64_t *)ctx_view.buf, *ts = r.timestamps;
    Py_ssize_t c = ctx_view.len / 8, n = r.n;
    int64_t *starts = (int64_t *)starts_view.buf, *sizes = (int64_t *)sizes_view.buf;
    recview_t v = recview_of(&r);
    Py_ssize_t count = 0, next_row = n;
    Py_BEGIN_ALLOW_THREADS
    /* Each record's size estimate: offsetDelta sized for `most - 1`, timestampDelta for the
     * distance to the record `most - 1` back (or the first one there is) - it depends only on
     * the record and those before it, so a split continued from a batch start of another
     * encode agrees with it. Then a greedy split on the estimates; the open batch's exact size
     * is summed alongside (a record's deltas need only the batch's first record). */
    Py_ssize_t start = first_row;
    int64_t acc = 0, exact = 0, planned = 0;
    for (Py_ssize_t i = first_row; i <= n; i++) {
        int64_t f = 0, est = 0;
        if (i < n) {
            Py_ssize_t lag = c + i - (Py_ssize_t)(most - 1);
            if (lag < 0) lag = 0;
            int64_t far = lag < c ? ctx[lag] : ts[lag - c];
            f = record_fixed(&v, i);
            est = f + offset_delta_size + varint_size(zigzag(ts[i] - far));
            est += varint_size(zigzag(est));
        }
        if (i > start && (i == n || acc + est > budget)) { /* batch [start, i) closes */
            if (count > 0 && planned + BATCH_HEADER_BYTES + exact > piece_bytes) {
                next_row = start;
                break;
            }
            starts[count] = start;
            sizes[count++] = exact;
            planned += BATCH_HEADER_BYTES + exact;
            start = i;
            acc = exact = 0;
        }
        if (i == n) break;
        int64_t body = record_body(&v, f, i, start);
        if (bodies != NULL) bodies[i - first_row] = (int32_t)body;
        exact += body + varint_size(zigzag(body));
        acc += est;
    }
    Py_END_ALLOW_THREADS
    if (bodies != NULL) PyBuffer_Release(&bodies_view);
    PyBuffer_Release(&sizes_view);
    PyBuffer_Release(&starts_view);
    PyBuffer_Release(&ctx_view);
    release_records(&r, NULL, &ts_view);
    return Py_BuildValue("nn", count, next_row);
fail_sizes:
    PyBuffer_Release(&sizes_view);
fail_starts:
    PyBuffer_Release(&starts_view);
fail_ctx:
    PyBuffer_Release(&ctx_view);
fail_records:
    release_records(&r, NULL, &ts_view);
    return NULL;
}

PyDoc_STRVAR(region_sizes_doc,
             "region_sizes(out, starts, timestamps, key, value, headers)\n"
             "\n"
             "Write into `out` (int64, one per batch) the bytes of each batch's records region.\n"
             "headers is None when no record has headers (one 0x00 byte each).");

static PyObject *region_sizes(PyObject *self, PyObject *args) {
    PyObject *out, *starts, *timestamps, *key, *value, *suffix;
    if (!PyArg_ParseTuple(args, "OOOOOO", &out, &starts, &timestamps, &key, &value, &suffix))
        return NULL;
    records_t r;
    Py_buffer starts_view, ts_view, out_view;
    if (parse_records(starts, timestamps, key, value, suffix, &r, &starts_view, &ts_view) < 0)
        return NULL;
    if (get_array(out, &out_view, r.batches, 1, "out") < 0) {
        release_records(&r, &starts_view, &ts_view);
        return NULL;
    }
    int64_t *sizes = (int64_t *)out_view.buf;
    recview_t v = recview_of(&r);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t b = 0; b < r.batches; b++)
        sizes[b] = region_size(&v, (Py_ssize_t)r.starts[b], batch_end(&r, b));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out_view);
    release_records(&r, &starts_view, &ts_view);
    Py_RETURN_NONE;
}

/* Copy `len` bytes of a column's row i (nothing for null/empty); NULL when out of bounds. */
static inline uint8_t *put_bytes(uint8_t *p, const colview_t *c, Py_ssize_t i, int64_t len) {
    if (len <= 0) return p;
    const uint8_t *src = view_bytes(c, i, len);
    if (src == NULL) return NULL;
    copy_bytes(p, src, (size_t)len);
    return p + len;
}

int get_bodies(PyObject *obj, Py_ssize_t n, Py_buffer *view, const int32_t **bodies) {
    *bodies = NULL;
    if (obj == Py_None) return 0;
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return -1;
    if (view->len < n * 4) {
        PyErr_SetString(PyExc_ValueError, "bodies: expected an int32 per record");
        PyBuffer_Release(view);
        return -1;
    }
    *bodies = (const int32_t *)view->buf;
    return 0;
}

int get_headers(PyObject *obj, Py_ssize_t batches, Py_buffer *view) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return -1;
    if (view->len != batches * BATCH_HEADER_BYTES) {
        PyErr_Format(PyExc_ValueError, "headers: expected %zd bytes, got %zd",
                     batches * BATCH_HEADER_BYTES, view->len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

const char records_too_small[] = "output buffer too small for the records";

/* Write the records [start, end) of one batch at p (at most `room` bytes). Returns the end,
 * or NULL with *why set when the output is too small or a column's offsets point outside its
 * data. */
uint8_t *write_records(const recview_t *rv, Py_ssize_t start, Py_ssize_t end, uint8_t *p,
                       int64_t room, const int32_t *bodies, const char **why) {
    const recview_t r = *rv; /* locals: see colview_t */
    const uint8_t *limit = p + room;
    int64_t base_ts = r.timestamps[start];
    for (Py_ssize_t i = start; i < end; i++) {
        int64_t klen = view_length(&r.key, i), vlen = view_length(&r.value, i);
        if (klen < -1 || vlen < -1) goto backwards;
        int64_t body = bodies ? bodies[i] : record_body(&r, record_fixed(&r, i), i, start);
        if ((int64_t)(limit - p) < body + varint_size(zigzag(body))) {
            *why = records_too_small;
            return NULL;
        }
        p = put_varint(p, zigzag(body));
        *p++ = 0; /* attributes */
        p = put_varint(p, zigzag(r.timestamps[i] - base_ts));
        p = put_varint(p, zigzag((int64_t)(i - start)));
        p = put_varint(p, zigzag(klen));
        if ((p = put_bytes(p, &r.key, i, klen)) == NULL) goto outside;
        p = put_varint(p, zigzag(vlen));
        if ((p = put_bytes(p, &r.value, i, vlen)) == NULL) goto outside;
        if (r.has_suffix) {
            if ((p = put_bytes(p, &r.suffix, i, view_length(&r.suffix, i))) == NULL)
                goto outside;
        } else {
            *p++ = 0; /* headersCount 0 */
        }
    }
    return p;
outside:
    *why = "a column's offsets point outside its data";
    return NULL;
backwards:
    *why = "a column's offsets decrease";
    return NULL;
}

PyDoc_STRVAR(
    write_batches_doc,
    "write_batches(out, headers, starts, timestamps, key, value, headers_column[, bodies])\n"
    "    -> int\n"
    "\n"
    "Write every batch into `out` (writable bytes): with `headers` (61 bytes per batch, length\n"
    "field filled), header then records, and the batch's CRC-32C; with headers None only the\n"
    "records regions, back to back. Returns the bytes written. Columns as for plan_batches;\n"
    "headers_column is None when no record has headers. bodies (int32, optional): the record\n"
    "sizes plan_batches wrote for these rows, instead of computing them again.");

/* Batches whose CRC is still to be filled: three at a time go through the interleaved CRC
 * while they are in cache. */
#define CRC_GROUP 3

static PyObject *write_batches(PyObject *self, PyObject *args) {
    PyObject *out, *headers, *starts, *timestamps, *key, *value, *suffix, *bodies_obj = Py_None;
    if (!PyArg_ParseTuple(args, "OOOOOOO|O", &out, &headers, &starts, &timestamps, &key, &value,
                          &suffix, &bodies_obj))
        return NULL;
    records_t r;
    Py_buffer starts_view, ts_view, out_view, header_view, bodies_view;
    if (parse_records(starts, timestamps, key, value, suffix, &r, &starts_view, &ts_view) < 0)
        return NULL;
    const int32_t *bodies = NULL;
    if (get_bodies(bodies_obj, r.n, &bodies_view, &bodies) < 0) {
        release_records(&r, &starts_view, &ts_view);
        return NULL;
    }
    if (PyObject_GetBuffer(out, &out_view, PyBUF_WRITABLE) < 0) {
        if (bodies != NULL) PyBuffer_Release(&bodies_view);
        release_records(&r, &starts_view, &ts_view);
        return NULL;
    }
    int with_headers = headers != Py_None;
    if (with_headers && get_headers(headers, r.batches, &header_view) < 0) goto fail_out;
    uint8_t *base = (uint8_t *)out_view.buf, *p = base, *end = base + out_view.len;
    const char *why = NULL;
    recview_t v = recview_of(&r);
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
        p = write_records(&v, (Py_ssize_t)r.starts[b], batch_end(&r, b), p, end - p, bodies,
                          &why);
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
    if (bodies != NULL) PyBuffer_Release(&bodies_view);
    if (with_headers) PyBuffer_Release(&header_view);
    PyBuffer_Release(&out_view);
    release_records(&r, &starts_view, &ts_view);
    if (why != NULL) {
        PyErr_SetString(PyExc_ValueError, why);
        return NULL;
    }
    return PyLong_FromSsize_t(written);
fail_out:
    if (bodies != NULL) PyBuffer_Release(&bodies_view);
    PyBuffer_Release(&out_view);
    release_records(&r, &starts_view, &ts_view);
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* murmur2 (the Java producer's Utils.murmur2: seed 0x9747b28c, m 0x5bd1e995, r 24)          */
/* ---------------------------------------------------------------------------------------- */

static uint32_t murmur2(const uint8_t *data, size_t length) {
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    size_t blocks = length / 4;
    for (size_t i = 0; i < blocks; i++) {
        uint32_t k;
        memcpy(&k, data + 4 * i, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        k = __builtin_bswap32(k);
#endif
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    const uint8_t *tail = data + 4 * blocks;
    switch (length & 3) {
        case 3:
            h ^= (uint32_t)tail[2] << 16;
            /* fall through */
        case 2:
            h ^= (uint32_t)tail[1] << 8;
            /* fall through */
        case 1:
            h ^= tail[0];
            h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

PyDoc_STRVAR(murmur2_column_doc,
             "murmur2_column(out, column) -> None\n"
             "\n"
             "Write murmur2 of every key of `column` (offsets, validity, bit_offset, data) into\n"
             "`out` (int32, one per row) as the Java producer computes it; 0 for a null key.");

static PyObject *murmur2_column(PyObject *self, PyObject *args) {
    PyObject *out, *spec;
    if (!PyArg_ParseTuple(args, "OO", &out, &spec)) return NULL;
    Py_buffer out_view;
    if (PyObject_GetBuffer(out, &out_view, PyBUF_WRITABLE) < 0) return NULL;
    if (out_view.len % 4 != 0) {
        PyErr_SetString(PyExc_ValueError, "out: expected int32 values");
        PyBuffer_Release(&out_view);
        return NULL;
    }
    Py_ssize_t n = out_view.len / 4;
    column_t c;
    if (get_column(spec, n, &c, "keys") < 0) {
        PyBuffer_Release(&out_view);
        return NULL;
    }
    uint32_t *hashes = (uint32_t *)out_view.buf;
    const char *why = NULL;
    const colview_t v = view_of(&c);
    const int present = c.present;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t len = present ? view_length(&v, i) : -1;
        if (len < 0) {
            hashes[i] = 0;
            continue;
        }
        const uint8_t *bytes = len ? view_bytes(&v, i, len) : (const uint8_t *)"";
        if (bytes == NULL) {
            why = "a column's offsets point outside its data";
            break;
        }
        hashes[i] = murmur2(bytes, (size_t)len);
    }
    Py_END_ALLOW_THREADS
    release_column(&c);
    PyBuffer_Release(&out_view);
    if (why != NULL) {
        PyErr_SetString(PyExc_ValueError, why);
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(max_length_doc,
             "max_length(n, column) -> int: the longest of the column's n rows in bytes\n"
             "(-1 when every row is null). ValueError when its offsets decrease.");

static PyObject *max_length(PyObject *self, PyObject *args) {
    Py_ssize_t n;
    PyObject *spec;
    if (!PyArg_ParseTuple(args, "nO", &n, &spec)) return NULL;
    column_t c;
    if (get_column(spec, n, &c, "column") < 0) return NULL;
    const colview_t v = view_of(&c);
    int64_t longest = -1;
    Py_ssize_t backwards = -1;
    if (c.present) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t len = view_offset(&v, i + 1) - view_offset(&v, i);
            if (len < 0) { /* malformed offsets, null or not: refuse, do not guess */
                backwards = i;
                break;
            }
            if (len > longest && view_length(&v, i) >= 0) longest = len;
        }
        Py_END_ALLOW_THREADS
    }
    release_column(&c);
    if (backwards >= 0) {
        PyErr_Format(PyExc_ValueError, "column offsets decrease at row %zd", backwards);
        return NULL;
    }
    return PyLong_FromLongLong(longest);
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
    {"non_decreasing", non_decreasing, METH_VARARGS, non_decreasing_doc},
    {"plan_batches", plan_batches, METH_VARARGS, plan_batches_doc},
    {"region_sizes", region_sizes, METH_VARARGS, region_sizes_doc},
    {"write_batches", write_batches, METH_VARARGS, write_batches_doc},
    {"write_compressed_batches", write_compressed_batches, METH_VARARGS,
     write_compressed_batches_doc},
    {"crc32c", crc32c_py, METH_O, crc32c_doc},
    {"max_length", max_length, METH_VARARGS, max_length_doc},
    {"murmur2_column", murmur2_column, METH_VARARGS, murmur2_column_doc},
    {"md5_spans", md5_spans, METH_VARARGS, md5_spans_doc},
    {"offset_map_put", offset_map_put, METH_VARARGS, offset_map_put_doc},
    {"offset_map_get", offset_map_get, METH_VARARGS, offset_map_get_doc},
    {"offset_map_move", offset_map_move, METH_VARARGS, offset_map_move_doc},
    {"merge_runs", merge_runs, METH_VARARGS, merge_runs_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native",
    "The core's per-record loops in C: the v2 encoder's, murmur2, the cleaner's key map and the "
    "merge of sorted runs "
    "(optional; each caller has a numpy path).",
    -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    crc_init_tables();
    md5_init_table();
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
