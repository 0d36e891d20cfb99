/*
 * kafkalog_core._native, part three: the log cleaner's keys (KAFKA_LOG_FACTS.md 8.2).
 *
 * Kafka's cleaner keeps, per key, the latest offset in an open-addressing table of MD5 digests
 * (SkimpyOffsetMap): two keys with the same MD5 are the same key to it. These loops give the
 * core the same table without a Python step per record:
 *
 *   md5_spans       - the MD5 digest of each key, the keys given as (start, length) spans of
 *                     one buffer (RFC 1321; kafkalog_core.maintenance.key_digests has the
 *                     numpy twin);
 *   offset_map_put  - put (digest, offset) pairs in order, stopping where the table needs to
 *                     grow or where it holds `limit` keys (Kafka's full map ends the round);
 *   offset_map_get  - the offset of each digest, -1 when absent;
 *   offset_map_move - every entry of one table into a larger one.
 *
 * A table is an int64 array of `slots` x 3: the digest's two little-endian 8-byte halves and
 * the offset, -1 marking an empty slot. `slots` is a power of two, probed linearly from the
 * digest's first half (MD5 output is uniform, so no further mixing is needed).
 */
#include "_native.h"

#include <math.h>

/* ---------------------------------------------------------------------------------------- */
/* MD5 (RFC 1321)                                                                            */
/* ---------------------------------------------------------------------------------------- */

static uint32_t md5_k[64];
static const uint8_t md5_shift[64] = {
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
    5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
    4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
    6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
};

/* The sine table of RFC 1321 section 3.4: floor(2^32 * |sin(i + 1)|). */
void md5_init_table(void) {
    for (int i = 0; i < 64; i++) md5_k[i] = (uint32_t)(fabs(sin((double)(i + 1))) * 4294967296.0);
}

static uint32_t rotl(uint32_t x, int s) { return (x << s) | (x >> (32 - s)); }

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

/* One step of round r: a = b + rotl(a + F(b, c, d) + K[i] + M[g], s), the registers then
 * rotating (the macro takes them in rotated order instead of moving them). */
#define STEP(F, a, b, c, d, i, g) \
    a = b + rotl(a + F(b, c, d) + md5_k[i] + m[g], md5_shift[i])
#define F1(b, c, d) (((b) & (c)) | (~(b) & (d)))
#define F2(b, c, d) (((d) & (b)) | (~(d) & (c)))
#define F3(b, c, d) ((b) ^ (c) ^ (d))
#define F4(b, c, d) ((c) ^ ((b) | ~(d)))

static void md5_block(uint32_t state[4], const uint8_t *block) {
    uint32_t m[16];
    for (int i = 0; i < 16; i++) m[i] = le32(block + 4 * i);
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    for (int i = 0; i < 16; i += 4) {
        STEP(F1, a, b, c, d, i, i);
        STEP(F1, d, a, b, c, i + 1, i + 1);
        STEP(F1, c, d, a, b, i + 2, i + 2);
        STEP(F1, b, c, d, a, i + 3, i + 3);
    }
    for (int i = 16; i < 32; i += 4) {
        STEP(F2, a, b, c, d, i, (5 * i + 1) & 15);
        STEP(F2, d, a, b, c, i + 1, (5 * i + 6) & 15);
        STEP(F2, c, d, a, b, i + 2, (5 * i + 11) & 15);
        STEP(F2, b, c, d, a, i + 3, (5 * i + 16) & 15);
    }
    for (int i = 32; i < 48; i += 4) {
        STEP(F3, a, b, c, d, i, (3 * i + 5) & 15);
        STEP(F3, d, a, b, c, i + 1, (3 * i + 8) & 15);
        STEP(F3, c, d, a, b, i + 2, (3 * i + 11) & 15);
        STEP(F3, b, c, d, a, i + 3, (3 * i + 14) & 15);
    }
    for (int i = 48; i < 64; i += 4) {
        STEP(F4, a, b, c, d, i, (7 * i) & 15);
        STEP(F4, d, a, b, c, i + 1, (7 * i + 7) & 15);
        STEP(F4, c, d, a, b, i + 2, (7 * i + 14) & 15);
        STEP(F4, b, c, d, a, i + 3, (7 * i + 21) & 15);
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
}

static void md5(const uint8_t *p, int64_t n, uint8_t out[16]) {
    uint32_t state[4] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u};
    int64_t whole = n & ~(int64_t)63;
    for (int64_t at = 0; at < whole; at += 64) md5_block(state, p + at);
    uint8_t tail[128];
    int64_t rest = n - whole;
    memset(tail, 0, sizeof tail);
    memcpy(tail, p + whole, (size_t)rest);
    tail[rest] = 0x80;
    int64_t tail_len = rest < 56 ? 64 : 128;
    uint64_t bits = (uint64_t)n * 8u;
    for (int i = 0; i < 8; i++) tail[tail_len - 8 + i] = (uint8_t)(bits >> (8 * i));
    md5_block(state, tail);
    if (tail_len == 128) md5_block(state, tail + 64);
    for (int i = 0; i < 4; i++) {
        out[4 * i] = (uint8_t)state[i];
        out[4 * i + 1] = (uint8_t)(state[i] >> 8);
        out[4 * i + 2] = (uint8_t)(state[i] >> 16);
        out[4 * i + 3] = (uint8_t)(state[i] >> 24);
    }
}

const char md5_spans_doc[] =
    "md5_spans(data, starts, lengths, out) -> None\n"
    "MD5 of data[starts[i] : starts[i] + lengths[i]] into out[16 i : 16 i + 16] (int64 starts\n"
    "and lengths; every span must lie inside data).";

PyObject *md5_spans(PyObject *self, PyObject *args) {
    PyObject *data_obj, *starts_obj, *lengths_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "OOOO", &data_obj, &starts_obj, &lengths_obj, &out_obj))
        return NULL;
    Py_buffer data, starts, lengths, out;
    if (PyObject_GetBuffer(data_obj, &data, PyBUF_SIMPLE) < 0) return NULL;
    if (get_array(starts_obj, &starts, -1, 0, "starts") < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    Py_ssize_t n = starts.len / 8;
    PyObject *result = NULL;
    if (get_array(lengths_obj, &lengths, n, 0, "lengths") < 0) goto release_starts;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE) < 0) goto release_lengths;
    if (out.len != n * 16) {
        PyErr_Format(PyExc_ValueError, "out: expected %zd bytes, got %zd", n * 16, out.len);
        goto release_out;
    }
    const int64_t *s = (const int64_t *)starts.buf, *l = (const int64_t *)lengths.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < 0 || l[i] < 0 || s[i] + l[i] > (int64_t)data.len) {
            PyErr_Format(PyExc_ValueError, "span %zd (%lld, %lld) lies outside the %zd bytes", i,
                         (long long)s[i], (long long)l[i], data.len);
            goto release_out;
        }
    }
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < n; i++)
        md5((const uint8_t *)data.buf + s[i], l[i], (uint8_t *)out.buf + 16 * i);
    Py_END_ALLOW_THREADS;
    result = Py_None;
    Py_INCREF(result);
release_out:
    PyBuffer_Release(&out);
release_lengths:
    PyBuffer_Release(&lengths);
release_starts:
    PyBuffer_Release(&starts);
    PyBuffer_Release(&data);
    return result;
}

/* ---------------------------------------------------------------------------------------- */
/* The offset map                                                                            */
/* ---------------------------------------------------------------------------------------- */

#define EMPTY (-1)

/* The slot of `digest` (or the empty slot where it would go). */
static int64_t *find_slot(int64_t *table, uint64_t mask, const int64_t digest[2]) {
    uint64_t at = (uint64_t)digest[0] & mask;
    for (;;) {
        int64_t *slot = table + 3 * at;
        if (slot[2] == EMPTY || (slot[0] == digest[0] && slot[1] == digest[1])) return slot;
        at = (at + 1) & mask;
    }
}

/* A table argument: int64 values, a power-of-two count of 3-value slots. */
static int get_table(PyObject *obj, Py_buffer *view, int writable, uint64_t *slots) {
    if (get_array(obj, view, -1, writable, "table") < 0) return -1;
    Py_ssize_t n = view->len / 24;
    if (n <= 0 || view->len != n * 24 || (n & (n - 1)) != 0) {
        PyErr_Format(PyExc_ValueError, "table: %zd bytes is not a power of two of 24-byte slots",
                     view->len);
        PyBuffer_Release(view);
        return -1;
    }
    *slots = (uint64_t)n;
    return 0;
}

static int get_digests(PyObject *obj, Py_buffer *view, Py_ssize_t n) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return -1;
    if (view->len != n * 16) {
        PyErr_Format(PyExc_ValueError, "digests: expected %zd bytes, got %zd", n * 16, view->len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

const char offset_map_put_doc[] =
    "offset_map_put(table, size, limit, digests, offsets) -> (done, size, stop)\n"
    "Put (digests[i], offsets[i]) in order, a later put of a digest overwriting its offset.\n"
    "Stops before entry i when the table holds `limit` keys (stop = 1: Kafka's map is full;\n"
    "it stops even for a digest already present) or when one more key would fill more than\n"
    "3/4 of the slots (stop = 2: move to a larger table and go on from `done`); stop = 0 when\n"
    "every entry was put. `size` is the number of keys the table holds.";

PyObject *offset_map_put(PyObject *self, PyObject *args) {
    PyObject *table_obj, *digests_obj, *offsets_obj;
    Py_ssize_t size, limit;
    if (!PyArg_ParseTuple(args, "OnnOO", &table_obj, &size, &limit, &digests_obj, &offsets_obj))
        return NULL;
    Py_buffer table, digests, offsets;
    uint64_t slots;
    if (get_table(table_obj, &table, 1, &slots) < 0) return NULL;
    if (get_array(offsets_obj, &offsets, -1, 0, "offsets") < 0) {
        PyBuffer_Release(&table);
        return NULL;
    }
    Py_ssize_t n = offsets.len / 8;
    if (get_digests(digests_obj, &digests, n) < 0) {
        PyBuffer_Release(&offsets);
        PyBuffer_Release(&table);
        return NULL;
    }
    int64_t *t = (int64_t *)table.buf;
    const int64_t *off = (const int64_t *)offsets.buf;
    const uint8_t *dig = (const uint8_t *)digests.buf;
    uint64_t mask = slots - 1;
    Py_ssize_t i = 0;
    int stop = 0;
    for (; i < n; i++) {
        if (size >= limit) {
            stop = 1;
            break;
        }
        int64_t d[2];
        memcpy(d, dig + 16 * i, 16);
        int64_t *slot = find_slot(t, mask, d);
        if (slot[2] == EMPTY) {
            if ((uint64_t)(size + 1) * 4 > slots * 3) {
                stop = 2;
                break;
            }
            slot[0] = d[0];
            slot[1] = d[1];
            size++;
        }
        slot[2] = off[i];
    }
    PyBuffer_Release(&digests);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&table);
    return Py_BuildValue("nni", i, size, stop);
}

const char offset_map_get_doc[] =
    "offset_map_get(table, digests, out) -> None\n"
    "out[i] = the offset of digests[i] in the table, -1 when it holds no such digest.";

PyObject *offset_map_get(PyObject *self, PyObject *args) {
    PyObject *table_obj, *digests_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "OOO", &table_obj, &digests_obj, &out_obj)) return NULL;
    Py_buffer table, digests, out;
    uint64_t slots;
    if (get_table(table_obj, &table, 0, &slots) < 0) return NULL;
    if (get_array(out_obj, &out, -1, 1, "out") < 0) {
        PyBuffer_Release(&table);
        return NULL;
    }
    Py_ssize_t n = out.len / 8;
    if (get_digests(digests_obj, &digests, n) < 0) {
        PyBuffer_Release(&out);
        PyBuffer_Release(&table);
        return NULL;
    }
    int64_t *t = (int64_t *)table.buf, *o = (int64_t *)out.buf;
    const uint8_t *dig = (const uint8_t *)digests.buf;
    uint64_t mask = slots - 1;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t d[2];
        memcpy(d, dig + 16 * i, 16);
        o[i] = find_slot(t, mask, d)[2]; /* an empty slot holds -1 */
    }
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&digests);
    PyBuffer_Release(&out);
    PyBuffer_Release(&table);
    Py_RETURN_NONE;
}

const char offset_map_move_doc[] =
    "offset_map_move(old, new) -> None\n"
    "Put every entry of table `old` into the empty, larger table `new`.";

PyObject *offset_map_move(PyObject *self, PyObject *args) {
    PyObject *old_obj, *new_obj;
    if (!PyArg_ParseTuple(args, "OO", &old_obj, &new_obj)) return NULL;
    Py_buffer old_table, new_table;
    uint64_t old_slots, new_slots;
    if (get_table(old_obj, &old_table, 0, &old_slots) < 0) return NULL;
    if (get_table(new_obj, &new_table, 1, &new_slots) < 0) {
        PyBuffer_Release(&old_table);
        return NULL;
    }
    if (new_slots < old_slots) {
        PyErr_SetString(PyExc_ValueError, "the new table is smaller than the old one");
        PyBuffer_Release(&new_table);
        PyBuffer_Release(&old_table);
        return NULL;
    }
    const int64_t *src = (const int64_t *)old_table.buf;
    int64_t *dst = (int64_t *)new_table.buf;
    uint64_t mask = new_slots - 1;
    for (uint64_t k = 0; k < old_slots; k++) {
        const int64_t *slot = src + 3 * k;
        if (slot[2] == EMPTY) continue;
        int64_t *to = find_slot(dst, mask, slot);
        memcpy(to, slot, 24);
    }
    PyBuffer_Release(&new_table);
    PyBuffer_Release(&old_table);
    Py_RETURN_NONE;
}
