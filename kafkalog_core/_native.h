/*
 * What the source files of kafkalog_core._native share: the encoder's view of the records
 * (`_native.c`), the fused compressed writer (`_native_compressed.c`), which writes each
 * batch's records with `write_records` and checksums it with `crc32c_one`, and the cleaner's
 * key loops (`_native_keys.c`), the merge of sorted runs (`_native_merge.c`), which reads binary
 * key columns as the encoder does; all of them read their int64 arrays with `get_array`
 * (`_native_args.c`).
 */
#ifndef KAFKALOG_NATIVE_H
#define KAFKALOG_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BATCH_HEADER_BYTES 61
#define CRC_FIELD 17      /* crc: uint32 big-endian at byte 17 of a batch */
#define CRC_COVERS_FROM 21 /* CRC-32C covers attributes .. end of batch */
#define LENGTH_FIELD 8     /* length: int32 big-endian at byte 8, the batch size - 12 */
#define LOG_OVERHEAD 12    /* baseOffset + length: the bytes the length field does not count */

/* A binary column as Arrow holds it: offsets (int32 or int64, already sliced to the column's
 * rows: n + 1 entries), the validity bitmap (or none) with the column's bit offset, and the
 * data buffer. From Python: a tuple (offsets, validity or None, bit_offset, data or None);
 * None for the headers column when no record has headers. */
typedef struct {
    Py_buffer offsets, validity, data;
    int present, have_validity, have_data, wide;
    Py_ssize_t bit_offset;
} column_t;

/* What the hot loops read of a column, held in locals: stores through the output's uint8_t
 * pointer may alias any memory, so fields read through a struct pointer would be reloaded
 * after every byte written; a local copy stays in registers. */
typedef struct {
    const int32_t *o32; /* exactly one of o32 / o64 is set */
    const int64_t *o64;
    const uint8_t *validity; /* NULL: no nulls */
    Py_ssize_t bit_offset;
    const uint8_t *data;
    int64_t data_len;
} colview_t;

/* A binary column from its Python spec (None: not present), checked to hold n rows; -1 with an
 * exception. */
int get_column(PyObject *spec, Py_ssize_t n, column_t *c, const char *name);
void release_column(column_t *c);
colview_t view_of(const column_t *c);

static inline int64_t view_offset(const colview_t *c, Py_ssize_t i) {
    return c->o32 ? (int64_t)c->o32[i] : c->o64[i];
}

/* Row i's length in bytes, -1 for null (what Kafka writes as the length of a null). */
static inline int64_t view_length(const colview_t *c, Py_ssize_t i) {
    if (c->validity) {
        Py_ssize_t bit = c->bit_offset + i;
        if (!((c->validity[bit >> 3] >> (bit & 7)) & 1)) return -1;
    }
    return view_offset(c, i + 1) - view_offset(c, i);
}

/* The bytes of row i (length `len` > 0), or NULL when they are not inside the data buffer. */
static inline const uint8_t *view_bytes(const colview_t *c, Py_ssize_t i, int64_t len) {
    int64_t start = view_offset(c, i);
    if (c->data == NULL || start < 0 || start + len > c->data_len) return NULL;
    return c->data + start;
}

typedef struct {
    Py_ssize_t n, batches;
    const int64_t *starts, *timestamps;
    column_t key, value, suffix; /* suffix not present when no record has headers */
} records_t;

/* The hot loops' local copy of a records_t. */
typedef struct {
    colview_t key, value, suffix;
    int has_suffix;
    const int64_t *timestamps;
} recview_t;

uint32_t crc32c_one(const uint8_t *p, size_t n);
void put_be32(uint8_t *p, uint32_t v);
recview_t recview_of(const records_t *r);
int64_t region_size(const recview_t *r, Py_ssize_t start, Py_ssize_t end);
Py_ssize_t batch_end(const records_t *r, Py_ssize_t b);
void release_records(records_t *r, Py_buffer *starts_view, Py_buffer *ts_view);
int parse_records(PyObject *starts, PyObject *timestamps, PyObject *key, PyObject *value,
                  PyObject *suffix, records_t *r, Py_buffer *starts_view, Py_buffer *ts_view);
/* The optional int32 record sizes (None: *bodies NULL, no buffer held) and the batch headers
 * (BATCH_HEADER_BYTES per batch) of the write functions, checked; -1 with an exception. */
int get_bodies(PyObject *obj, Py_ssize_t n, Py_buffer *view, const int32_t **bodies);
int get_headers(PyObject *obj, Py_ssize_t batches, Py_buffer *view);
extern const char records_too_small[]; /* write_records' why when `room` is short */
uint8_t *write_records(const recview_t *rv, Py_ssize_t start, Py_ssize_t end, uint8_t *p,
                       int64_t room, const int32_t *bodies, const char **why);

/* _native_args.c: an int64 array argument (`items` of them, any number when < 0); -1 with an
 * exception naming it */
int get_array(PyObject *obj, Py_buffer *view, Py_ssize_t items, int writable, const char *name);

/* _native_compressed.c */
extern const char write_compressed_batches_doc[];
PyObject *write_compressed_batches(PyObject *self, PyObject *args);

/* _native_keys.c: the log cleaner's key digests and offset map */
void md5_init_table(void);
extern const char md5_spans_doc[], offset_map_put_doc[], offset_map_get_doc[],
    offset_map_move_doc[];
PyObject *md5_spans(PyObject *self, PyObject *args);
PyObject *offset_map_put(PyObject *self, PyObject *args);
PyObject *offset_map_get(PyObject *self, PyObject *args);
PyObject *offset_map_move(PyObject *self, PyObject *args);

/* _native_merge.c: the merge of sorted runs */
extern const char merge_runs_doc[];
PyObject *merge_runs(PyObject *self, PyObject *args);

#endif
