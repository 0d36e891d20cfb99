/*
 * kafkalog_core._native_decode: the v2 record decoder's sequential walk in C.
 *
 * Optional accelerator for kafkalog_core.record.decoder. A v2 records area is a chain of
 * length-prefixed records (KAFKA_LOG_FACTS.md 1.3):
 *
 *   length | attributes | timestampDelta | offsetDelta | keyLength | key | valueLength | value
 *   | headersCount | (headerKeyLength | headerKey | headerValueLength | headerValue)*
 *
 * every integer a zigzag varint. Finding where each record starts is inherently one record
 * after the other, which numpy can only speculate about; this module walks every record of
 * every batch of a group once and writes each record's field positions, so that Python builds
 * the Arrow columns from them without a per-record loop.
 *
 * It accepts exactly what the numpy path accepts and nothing more: on any doubt it reports
 * failure and the caller runs the numpy path, which raises the precise, located error. So the
 * error messages live in one place (record/decoder/) and this file only has to be strict.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define MIN_RECORD_BODY 6
#define MIN_RECORD_SIZE (1 + MIN_RECORD_BODY)
#define FIELDS 10 /* see record_fields_doc */

/* A zigzag varint of at most `most` bytes lying wholly before `limit`; 0 on failure. */
static inline int read_varint(const uint8_t *d, int64_t *pos, int64_t limit, int most,
                              int64_t *out) {
    uint64_t value = 0;
    int64_t p = *pos;
    for (int k = 0; k < most; k++) {
        if (p + k >= limit) return 0;
        uint8_t b = d[p + k];
        value |= (uint64_t)(b & 0x7F) << (7 * k);
        if (b < 0x80) {
            *out = (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
            *pos = p + k + 1;
            return 1;
        }
    }
    return 0;
}

/* One record at *pos inside [.., hi): its fields into out[f * n + i]; 0 when malformed. */
static inline int walk_record(const uint8_t *d, int64_t *pos, int64_t hi, int64_t *out,
                              Py_ssize_t n, Py_ssize_t i) {
    int64_t start = *pos, p = start, length, ts_delta, offset_delta, key_len, value_len, count;
    if (!read_varint(d, &p, hi, 5, &length) || length < MIN_RECORD_BODY) return 0;
    int64_t end = p + length;
    if (end > hi) return 0;
    p += 1; /* attributes: unused in v2 */
    if (!read_varint(d, &p, end, 10, &ts_delta)) return 0;
    if (!read_varint(d, &p, end, 5, &offset_delta)) return 0;
    if (!read_varint(d, &p, end, 5, &key_len) || key_len < -1) return 0;
    int64_t key_pos = p;
    if (key_len > 0 && (p += key_len) > end) return 0;
    if (!read_varint(d, &p, end, 5, &value_len) || value_len < -1) return 0;
    int64_t value_pos = p;
    if (value_len > 0 && (p += value_len) > end) return 0;
    if (!read_varint(d, &p, end, 5, &count) || count < 0 || count > end - p) return 0;
    int64_t headers_pos = p;
    for (int64_t h = 0; h < count; h++) {
        int64_t hk, hv;
        if (!read_varint(d, &p, end, 5, &hk) || hk < 0 || (p += hk) > end) return 0;
        if (!read_varint(d, &p, end, 5, &hv) || hv < -1) return 0;
        if (hv > 0 && (p += hv) > end) return 0;
    }
    if (p != end) return 0;
    out[0 * n + i] = start;
    out[1 * n + i] = end - start;
    out[2 * n + i] = ts_delta;
    out[3 * n + i] = offset_delta;
    out[4 * n + i] = key_pos;
    out[5 * n + i] = key_len;
    out[6 * n + i] = value_pos;
    out[7 * n + i] = value_len;
    out[8 * n + i] = headers_pos;
    out[9 * n + i] = count;
    *pos = end;
    return 1;
}

PyDoc_STRVAR(
    record_fields_doc,
    "record_fields(data, regions, counts, out) -> int\n"
    "\n"
    "Walk the records areas regions[2b] .. regions[2b + 1] of `data` (uint8), batch b holding\n"
    "counts[b] records, and write per record, into out (int64, FIELDS x n, n = sum(counts),\n"
    "field-major): start, size (length varint included), timestampDelta, offsetDelta, key\n"
    "position, key length (-1 null), value position, value length (-1 null), position after\n"
    "headersCount, headersCount. Returns -1 when every batch decoded, else the index of the\n"
    "first batch that did not (the caller's numpy path then names the problem).");

static PyObject *record_fields(PyObject *self, PyObject *args) {
    PyObject *data_obj, *regions_obj, *counts_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "OOOO", &data_obj, &regions_obj, &counts_obj, &out_obj))
        return NULL;
    Py_buffer data, regions, counts, out;
    if (PyObject_GetBuffer(data_obj, &data, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(regions_obj, &regions, PyBUF_SIMPLE) < 0) goto fail_data;
    if (PyObject_GetBuffer(counts_obj, &counts, PyBUF_SIMPLE) < 0) goto fail_regions;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE) < 0) goto fail_counts;
    Py_ssize_t batches = counts.len / 8;
    const int64_t *region = (const int64_t *)regions.buf, *count = (const int64_t *)counts.buf;
    int64_t total = 0;
    for (Py_ssize_t b = 0; b < batches; b++) total += count[b] > 0 ? count[b] : 0;
    if (regions.len != batches * 16 || counts.len % 8 != 0 || out.len != total * FIELDS * 8) {
        PyErr_SetString(PyExc_ValueError,
                        "record_fields: regions needs 2 and out FIELDS int64 per record");
        goto fail_out;
    }
    const uint8_t *d = (const uint8_t *)data.buf;
    int64_t *o = (int64_t *)out.buf, size = (int64_t)data.len;
    Py_ssize_t failed = -1, i = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t b = 0; b < batches && failed < 0; b++) {
        int64_t lo = region[2 * b], hi = region[2 * b + 1], c = count[b], pos = lo;
        if (lo < 0 || hi < lo || hi > size || c < 0 || c > (hi - lo) / MIN_RECORD_SIZE) {
            failed = b;
            break;
        }
        for (int64_t r = 0; r < c; r++, i++)
            if (!walk_record(d, &pos, hi, o, (Py_ssize_t)total, i)) {
                failed = b;
                break;
            }
        if (failed < 0 && pos != hi) failed = b;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out);
    PyBuffer_Release(&counts);
    PyBuffer_Release(&regions);
    PyBuffer_Release(&data);
    return PyLong_FromSsize_t(failed);
fail_out:
    PyBuffer_Release(&out);
fail_counts:
    PyBuffer_Release(&counts);
fail_regions:
    PyBuffer_Release(&regions);
fail_data:
    PyBuffer_Release(&data);
    return NULL;
}

static PyMethodDef methods[] = {
    {"record_fields", record_fields, METH_VARARGS, record_fields_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native_decode",
    "The v2 record decoder's sequential walk in C (optional; record/decoder/walk.py has the numpy path).",
    -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native_decode(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "FIELDS", FIELDS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
