/*
 * kafkalog_core._native_schema: structured values (Avro binary, Spark's JSON) written from Arrow
 * columns, one row after another, in C.
 *
 * Optional accelerator: kafkalog_core/schema/ builds the same bytes with Arrow compute and numpy
 * when this module is absent (or KAFKALOG_NATIVE=0), and the tests hold the two to that.
 *
 * The Python side checks the rows first (nulls where the schema has none, sizes, ranges) and
 * hands over a tree of nodes, one per Arrow array of the value's type, each a tuple
 *
 *   (kind, validity, offset, values, offsets, offsets64, null_index, value_index, p1, p2, text,
 *    children)
 *
 *   validity   the array's validity bitmap or None; bit (offset + i) is row i's
 *   offset     the array's offset (Arrow slices share buffers and move this)
 *   values     fixed-width values (index offset + i), a bit-packed boolean array, or the data
 *              of a binary/string array
 *   offsets    int32 (or int64 when offsets64) offsets of a binary/string/list/map array,
 *              index offset + i; J_TIMESTAMP: an int32 zone offset in seconds per row, or None
 *   null_index, value_index
 *              Avro: the union branches written before a null / a value (-1: not a union)
 *   p1, p2     per kind (below)
 *   text       Avro K_CONST: the bytes written for every row; JSON: a struct field's prefix
 *              ("name": already escaped)
 *   children   a record's/struct's fields, a list's items, a map's key and value
 *
 * Avro binary encoding (Avro specification, "Binary Encoding"): int and long are zig-zag
 * varints; float and double little-endian IEEE 754; bytes and string a long length then the
 * bytes; fixed the bytes alone; a union the branch index (a long) then the value; an array or a
 * map one block of count then items (key then value for a map) and a 0 count to end it, an empty
 * one the 0 alone; a record its fields in the schema's order. Decimals are the unscaled value,
 * two's complement big-endian: as few bytes as hold it for bytes, sign-extended to the size for
 * fixed.
 *
 * JSON is Spark's to_json with its default options (JacksonGenerator): null struct fields left
 * out, null items and map values written as null; strings escaped as Jackson does (", \, and the
 * control characters: \b \t \n \f \r, else \u00XX with upper-case hex; everything else, UTF-8
 * included, as is); binary as base64; dates yyyy-MM-dd; timestamps
 * yyyy-MM-dd'T'HH:mm:ss.SSS then the zone offset (Z, +HH:MM, +HH:MM:SS), none without a zone;
 * doubles and floats as Java's Double/Float.toString (from the shortest digits Arrow finds);
 * decimals as Java's BigDecimal.toString (Arrow's text, copied raw).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum {
    /* Avro */
    K_CONST = 0,   /* text, every row */
    K_BOOL = 1,    /* bit-packed values -> 0x00 / 0x01 */
    K_INT = 2,     /* p1 = source width in bytes (1, 2, 4, 8), signed -> zig-zag varint */
    K_FLOAT = 3,   /* p1 = 4 (float), 8 (double), 48 (a float written as double) */
    K_BYTES = 4,   /* binary/string -> long length + bytes */
    K_FIXED = 5,   /* p1 = size: binary (offsets) or fixed_size_binary (values) -> bytes alone */
    K_DECIMAL = 6, /* p1 = source width (16, 32), p2 = fixed size, or 0 for bytes */
    K_RECORD = 7,
    K_ARRAY = 8,
    K_MAP = 9,
    /* JSON */
    J_BOOL = 20,
    J_INT = 21,       /* p1 = source width */
    J_STRING = 22,    /* quoted, escaped */
    J_BASE64 = 23,    /* quoted base64 of binary */
    J_RAW = 24,       /* text copied as is (decimals) */
    J_DOUBLE = 25,    /* Arrow's shortest text of a float/double -> Java's */
    J_DATE = 26,      /* int32 days -> "yyyy-MM-dd" */
    J_TIMESTAMP = 27, /* int64 epoch millis -> "yyyy-MM-ddTHH:mm:ss.SSS" + zone; p1 = has zone */
    J_STRUCT = 28,
    J_ARRAY = 29,
    J_MAP = 30,
};

typedef struct node {
    int kind;
    const uint8_t *validity;
    int64_t offset;
    const uint8_t *values;
    const void *offsets;
    int offsets64;
    int64_t null_index, value_index, p1, p2;
    const uint8_t *text;
    Py_ssize_t text_len;
    struct node *children;
    Py_ssize_t n_children;
} node_t;

/* What one call holds: the node tree and the buffers it borrows. */
typedef struct {
    node_t *nodes;
    Py_ssize_t n_nodes, cap_nodes;
    Py_buffer *views;
    Py_ssize_t n_views, cap_views;
} tree_t;

typedef struct {
    uint8_t *p, *start, *end;
} out_t;

/* ---------------------------------------------------------------------------------------- */
/* The node tree from Python                                                                */
/* ---------------------------------------------------------------------------------------- */

static Py_ssize_t count_nodes(PyObject *spec) {
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 12) {
        PyErr_SetString(PyExc_TypeError, "a node is a tuple of 12 items");
        return -1;
    }
    PyObject *children = PyTuple_GET_ITEM(spec, 11);
    if (!PyTuple_Check(children)) {
        PyErr_SetString(PyExc_TypeError, "a node's children are a tuple");
        return -1;
    }
    Py_ssize_t total = 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(children); i++) {
        Py_ssize_t c = count_nodes(PyTuple_GET_ITEM(children, i));
        if (c < 0) return -1;
        total += c;
    }
    return total;
}

static const void *borrow(tree_t *t, PyObject *obj) {
    if (obj == Py_None) return NULL;
    Py_buffer *v = &t->views[t->n_views];
    if (PyObject_GetBuffer(obj, v, PyBUF_SIMPLE) < 0) return (const void *)-1;
    t->n_views++;
    return v->buf;
}

static int long_item(PyObject *spec, Py_ssize_t i, int64_t *out) {
    *out = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, i));
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Fills t->nodes[at] from spec; children take the next free slots. */
static int parse_node(tree_t *t, PyObject *spec, node_t *n) {
    int64_t kind, offset, wide;
    if (long_item(spec, 0, &kind) < 0 || long_item(spec, 2, &offset) < 0 ||
        long_item(spec, 5, &wide) < 0 || long_item(spec, 6, &n->null_index) < 0 ||
        long_item(spec, 7, &n->value_index) < 0 || long_item(spec, 8, &n->p1) < 0 ||
        long_item(spec, 9, &n->p2) < 0)
        return -1;
    if (!((kind >= K_CONST && kind <= K_MAP) || (kind >= J_BOOL && kind <= J_MAP))) {
        PyErr_Format(PyExc_ValueError, "unknown node kind %lld", (long long)kind);
        return -1;
    }
    n->kind = (int)kind;
    n->offset = offset;
    n->offsets64 = (int)wide;
    const void *b;
    if ((b = borrow(t, PyTuple_GET_ITEM(spec, 1))) == (const void *)-1) return -1;
    n->validity = b;
    if ((b = borrow(t, PyTuple_GET_ITEM(spec, 3))) == (const void *)-1) return -1;
    n->values = b;
    if ((b = borrow(t, PyTuple_GET_ITEM(spec, 4))) == (const void *)-1) return -1;
    n->offsets = b;
    PyObject *text = PyTuple_GET_ITEM(spec, 10);
    n->text = NULL;
    n->text_len = 0;
    if (text != Py_None) {
        Py_buffer *v = &t->views[t->n_views];
        if (PyObject_GetBuffer(text, v, PyBUF_SIMPLE) < 0) return -1;
        t->n_views++;
        n->text = v->buf;
        n->text_len = v->len;
    }
    PyObject *children = PyTuple_GET_ITEM(spec, 11);
    n->n_children = PyTuple_GET_SIZE(children);
    n->children = t->nodes + t->n_nodes;
    t->n_nodes += n->n_children;
    for (Py_ssize_t i = 0; i < n->n_children; i++)
        if (parse_node(t, PyTuple_GET_ITEM(children, i), &n->children[i]) < 0) return -1;
    return 0;
}

static void release_tree(tree_t *t) {
    for (Py_ssize_t i = 0; i < t->n_views; i++) PyBuffer_Release(&t->views[i]);
    PyMem_Free(t->views);
    PyMem_Free(t->nodes);
}

static int build_tree(tree_t *t, PyObject *spec) {
    memset(t, 0, sizeof(*t));
    Py_ssize_t count = count_nodes(spec);
    if (count < 0) return -1;
    t->nodes = PyMem_Calloc((size_t)count, sizeof(node_t));
    t->views = PyMem_Calloc((size_t)count * 4, sizeof(Py_buffer));
    if (t->nodes == NULL || t->views == NULL) {
        PyErr_NoMemory();
        release_tree(t);
        return -1;
    }
    t->n_nodes = 1;
    if (parse_node(t, spec, &t->nodes[0]) < 0) {
        release_tree(t);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Output buffer                                                                            */
/* ---------------------------------------------------------------------------------------- */

static int grow(out_t *o, size_t need) {
    size_t used = (size_t)(o->p - o->start), cap = (size_t)(o->end - o->start);
    size_t want = cap ? cap : 4096;
    while (want - used < need) want *= 2;
    uint8_t *b = realloc(o->start, want);
    if (b == NULL) return -1;
    o->start = b;
    o->p = b + used;
    o->end = b + want;
    return 0;
}

#define ROOM(o, k)                                                                          \
    do {                                                                                    \
        if ((size_t)((o)->end - (o)->p) < (size_t)(k) && grow((o), (size_t)(k)) < 0) return -1; \
    } while (0)

static inline int is_valid(const node_t *n, int64_t i) {
    if (n->validity == NULL) return 1;
    int64_t bit = n->offset + i;
    return (n->validity[bit >> 3] >> (bit & 7)) & 1;
}

static inline int64_t off_at(const node_t *n, int64_t i) {
    return n->offsets64 ? ((const int64_t *)n->offsets)[i] : ((const int32_t *)n->offsets)[i];
}

static inline int64_t int_at(const node_t *n, int64_t i) {
    int64_t k = n->offset + i;
    switch (n->p1) {
    case 1: return ((const int8_t *)n->values)[k];
    case 2: return ((const int16_t *)n->values)[k];
    case 4: return ((const int32_t *)n->values)[k];
    default: return ((const int64_t *)n->values)[k];
    }
}

static inline void put_varint(out_t *o, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) {
        *o->p++ = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    *o->p++ = (uint8_t)z;
}

static inline void put_bytes(out_t *o, const void *b, size_t k) {
    memcpy(o->p, b, k);
    o->p += k;
}

/* ---------------------------------------------------------------------------------------- */
/* Avro                                                                                     */
/* ---------------------------------------------------------------------------------------- */

/* The two's complement bytes of a little-endian integer of `width` bytes, big-endian, in as
 * few bytes as keep its sign (at least one), or sign-extended to `size`. */
static void put_decimal(out_t *o, const uint8_t *le, int width, int size) {
    uint8_t fill = (le[width - 1] & 0x80) ? 0xFF : 0x00;
    int k = width;
    if (size == 0) {
        while (k > 1 && le[k - 1] == fill && ((le[k - 2] & 0x80) == (fill & 0x80))) k--;
        put_varint(o, k);
    } else {
        for (int j = size; j > width; j--) *o->p++ = fill;
        if (size < width) k = size;
    }
    for (int j = k - 1; j >= 0; j--) *o->p++ = le[j];
}

static int avro_value(const node_t *n, int64_t i, out_t *o);

static int avro_node(const node_t *n, int64_t i, out_t *o) {
    ROOM(o, 10);
    if (!is_valid(n, i)) {
        if (n->null_index >= 0) put_varint(o, n->null_index);
        /* the Python side refuses nulls where the schema has no null branch */
        return 0;
    }
    if (n->value_index >= 0) put_varint(o, n->value_index);
    return avro_value(n, i, o);
}

static int avro_value(const node_t *n, int64_t i, out_t *o) {
    int64_t k = n->offset + i;
    ROOM(o, 20);
    switch (n->kind) {
    case K_CONST:
        ROOM(o, n->text_len);
        put_bytes(o, n->text, (size_t)n->text_len);
        return 0;
    case K_BOOL:
        *o->p++ = (n->values[k >> 3] >> (k & 7)) & 1;
        return 0;
    case K_INT:
        put_varint(o, int_at(n, i));
        return 0;
    case K_FLOAT:
        if (n->p1 == 48) {
            double d = ((const float *)n->values)[k];
            put_bytes(o, &d, 8);
        } else {
            put_bytes(o, n->values + k * n->p1, (size_t)n->p1);
        }
        return 0;
    case K_BYTES: {
        int64_t a = off_at(n, k), b = off_at(n, k + 1);
        ROOM(o, (size_t)(b - a) + 10);
        put_varint(o, b - a);
        put_bytes(o, n->values + a, (size_t)(b - a));
        return 0;
    }
    case K_FIXED:
        ROOM(o, n->p1);
        if (n->offsets != NULL)
            put_bytes(o, n->values + off_at(n, k), (size_t)n->p1);
        else
            put_bytes(o, n->values + k * n->p1, (size_t)n->p1);
        return 0;
    case K_DECIMAL:
        ROOM(o, n->p2 + 48);
        put_decimal(o, n->values + k * n->p1, (int)n->p1, (int)n->p2);
        return 0;
    case K_RECORD:
        for (Py_ssize_t c = 0; c < n->n_children; c++)
            if (avro_node(&n->children[c], i, o) < 0) return -1;
        return 0;
    case K_ARRAY:
    case K_MAP: {
        int64_t a = off_at(n, k), b = off_at(n, k + 1);
        if (b > a) put_varint(o, b - a);
        for (int64_t j = a; j < b; j++)
            for (Py_ssize_t c = 0; c < n->n_children; c++)
                if (avro_node(&n->children[c], j, o) < 0) return -1;
        ROOM(o, 1);
        *o->p++ = 0;
        return 0;
    }
    default: /* parse_node admits only the kinds above */
        return -1;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* JSON                                                                                     */
/* ---------------------------------------------------------------------------------------- */

static const char HEX[] = "0123456789ABCDEF";

/* A JSON string of UTF-8 bytes, escaped as Jackson escapes. */
static int json_string(out_t *o, const uint8_t *s, int64_t len) {
    ROOM(o, (size_t)len * 6 + 2);
    *o->p++ = '"';
    for (int64_t j = 0; j < len; j++) {
        uint8_t c = s[j];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *o->p++ = c;
            continue;
        }
        *o->p++ = '\\';
        switch (c) {
        case '"': *o->p++ = '"'; break;
        case '\\': *o->p++ = '\\'; break;
        case '\b': *o->p++ = 'b'; break;
        case '\t': *o->p++ = 't'; break;
        case '\n': *o->p++ = 'n'; break;
        case '\f': *o->p++ = 'f'; break;
        case '\r': *o->p++ = 'r'; break;
        default:
            *o->p++ = 'u';
            *o->p++ = '0';
            *o->p++ = '0';
            *o->p++ = HEX[c >> 4];
            *o->p++ = HEX[c & 15];
        }
    }
    *o->p++ = '"';
    return 0;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int json_base64(out_t *o, const uint8_t *s, int64_t len) {
    ROOM(o, (size_t)(len + 2) / 3 * 4 + 2);
    *o->p++ = '"';
    int64_t j = 0;
    for (; j + 3 <= len; j += 3) {
        uint32_t w = ((uint32_t)s[j] << 16) | ((uint32_t)s[j + 1] << 8) | s[j + 2];
        *o->p++ = B64[w >> 18];
        *o->p++ = B64[(w >> 12) & 63];
        *o->p++ = B64[(w >> 6) & 63];
        *o->p++ = B64[w & 63];
    }
    if (len - j == 1) {
        uint32_t w = (uint32_t)s[j] << 16;
        *o->p++ = B64[w >> 18];
        *o->p++ = B64[(w >> 12) & 63];
        *o->p++ = '=';
        *o->p++ = '=';
    } else if (len - j == 2) {
        uint32_t w = ((uint32_t)s[j] << 16) | ((uint32_t)s[j + 1] << 8);
        *o->p++ = B64[w >> 18];
        *o->p++ = B64[(w >> 12) & 63];
        *o->p++ = B64[(w >> 6) & 63];
        *o->p++ = '=';
    }
    *o->p++ = '"';
    return 0;
}

/* The decimal digits of v, zero-padded to at least `width`. */
static void put_padded(out_t *o, uint64_t v, int width) {
    char tmp[24];
    int k = 0;
    do {
        tmp[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (k < width) tmp[k++] = '0';
    while (k) *o->p++ = (uint8_t)tmp[--k];
}

static void put_int(out_t *o, int64_t v) {
    if (v < 0) {
        *o->p++ = '-';
        put_padded(o, (uint64_t)0 - (uint64_t)v, 1);
    } else {
        put_padded(o, (uint64_t)v, 1);
    }
}

/* Days since 1970-01-01 -> proleptic Gregorian year, month, day (civil calendar arithmetic over
 * 400-year eras of 146097 days, each starting on a March 1st). */
static void civil(int64_t days, int64_t *y, int *m, int *d) {
    int64_t z = days + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

/* java.time's yyyy: four digits at least, a sign before a negative year and one beyond 9999 */
static void put_date(out_t *o, int64_t days) {
    int64_t y;
    int m, d;
    civil(days, &y, &m, &d);
    if (y < 0) {
        *o->p++ = '-';
        put_padded(o, -y, 4);
    } else {
        if (y > 9999) *o->p++ = '+';
        put_padded(o, y, 4);
    }
    *o->p++ = '-';
    put_padded(o, m, 2);
    *o->p++ = '-';
    put_padded(o, d, 2);
}

static inline int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static void put_timestamp(out_t *o, int64_t millis, int has_zone, int64_t zone_seconds) {
    int64_t local = millis + zone_seconds * 1000;
    int64_t days = floor_div(local, 86400000);
    int64_t ms = local - days * 86400000;
    *o->p++ = '"';
    put_date(o, days);
    *o->p++ = 'T';
    put_padded(o, ms / 3600000, 2);
    *o->p++ = ':';
    put_padded(o, ms / 60000 % 60, 2);
    *o->p++ = ':';
    put_padded(o, ms / 1000 % 60, 2);
    *o->p++ = '.';
    put_padded(o, ms % 1000, 3);
    if (has_zone) {
        if (zone_seconds == 0) {
            *o->p++ = 'Z';
        } else {
            int64_t a = zone_seconds < 0 ? -zone_seconds : zone_seconds;
            *o->p++ = zone_seconds < 0 ? '-' : '+';
            put_padded(o, a / 3600, 2);
            *o->p++ = ':';
            put_padded(o, a / 60 % 60, 2);
            if (a % 60) {
                *o->p++ = ':';
                put_padded(o, a % 60, 2);
            }
        }
    }
    *o->p++ = '"';
}

/* Arrow's shortest text of a float ("-1.5e+23", "0.001", "123", "nan", "-inf") in Java's
 * Double.toString layout: plain with at least one fraction digit for 1e-3 <= |x| < 1e7, else
 * d.dddE<exp>; NaN and infinities as the quoted strings Jackson writes. */
static int json_double(out_t *o, const uint8_t *s, int64_t len) {
    ROOM(o, (size_t)len + 32);
    int64_t j = 0;
    int neg = 0;
    if (len > 0 && s[0] == '-') {
        neg = 1;
        j = 1;
    }
    if (len - j == 3 && s[j] == 'n') {
        put_bytes(o, "\"NaN\"", 5);
        return 0;
    }
    if (len - j == 3 && s[j] == 'i') {
        if (neg)
            put_bytes(o, "\"-Infinity\"", 11);
        else
            put_bytes(o, "\"Infinity\"", 10);
        return 0;
    }
    char digits[40];
    int nd = 0;
    int point = -1; /* digits before the decimal point */
    int64_t exp10 = 0;
    for (; j < len; j++) {
        uint8_t c = s[j];
        if (c == '.') {
            point = nd;
        } else if (c == 'e' || c == 'E') {
            j++;
            int eneg = 0;
            if (j < len && (s[j] == '+' || s[j] == '-')) eneg = s[j++] == '-';
            for (; j < len; j++) exp10 = exp10 * 10 + (s[j] - '0');
            if (eneg) exp10 = -exp10;
            break;
        } else if (nd < 39) {
            digits[nd++] = (char)c;
        }
    }
    if (point < 0) point = nd;
    /* strip leading zeros (each moves the point left) and trailing zeros */
    int first = 0;
    while (first < nd - 1 && digits[first] == '0') {
        first++;
    }
    int64_t sci = exp10 + point - first - 1; /* exponent of the first significant digit */
    while (nd > first + 1 && digits[nd - 1] == '0') nd--;
    if (neg) *o->p++ = '-';
    if (nd - first == 1 && digits[first] == '0') {
        put_bytes(o, "0.0", 3);
        return 0;
    }
    const char *d = digits + first;
    int n = nd - first;
    if (sci >= -3 && sci < 7) {
        if (sci < 0) {
            *o->p++ = '0';
            *o->p++ = '.';
            for (int64_t z = sci + 1; z < 0; z++) *o->p++ = '0';
            put_bytes(o, d, (size_t)n);
        } else {
            int whole = (int)sci + 1;
            for (int q = 0; q < whole; q++) *o->p++ = q < n ? (uint8_t)d[q] : '0';
            *o->p++ = '.';
            if (n > whole)
                put_bytes(o, d + whole, (size_t)(n - whole));
            else
                *o->p++ = '0';
        }
    } else {
        *o->p++ = (uint8_t)d[0];
        *o->p++ = '.';
        if (n > 1)
            put_bytes(o, d + 1, (size_t)(n - 1));
        else
            *o->p++ = '0';
        *o->p++ = 'E';
        put_int(o, sci);
    }
    return 0;
}

static int json_value(const node_t *n, int64_t i, out_t *o);
static int json_item(const node_t *n, int64_t i, out_t *o);

/* A map key as JSON text: a string escaped, anything else (integers) quoted as it prints. */
static int json_key(const node_t *n, int64_t i, out_t *o) {
    if (n->kind == J_STRING) return json_value(n, i, o);
    ROOM(o, 2);
    *o->p++ = '"';
    if (json_value(n, i, o) < 0) return -1;
    ROOM(o, 1);
    *o->p++ = '"';
    return 0;
}

/* A list item or map value: null written as null. */
static int json_item(const node_t *n, int64_t i, out_t *o) {
    if (is_valid(n, i)) return json_value(n, i, o);
    ROOM(o, 4);
    put_bytes(o, "null", 4);
    return 0;
}

static int json_value(const node_t *n, int64_t i, out_t *o) {
    int64_t k = n->offset + i;
    ROOM(o, 48);
    switch (n->kind) {
    case J_BOOL:
        if ((n->values[k >> 3] >> (k & 7)) & 1)
            put_bytes(o, "true", 4);
        else
            put_bytes(o, "false", 5);
        return 0;
    case J_INT:
        put_int(o, int_at(n, i));
        return 0;
    case J_STRING: {
        int64_t a = off_at(n, k), b = off_at(n, k + 1);
        return json_string(o, n->values + a, b - a);
    }
    case J_BASE64: {
        int64_t a = off_at(n, k), b = off_at(n, k + 1);
        return json_base64(o, n->values + a, b - a);
    }
    case J_RAW: {
        int64_t a = off_at(n, k), b = off_at(n, k + 1);
        ROOM(o, (size_t)(b - a));
        put_bytes(o, n->values + a, (size_t)(b - a));
        return 0;
    }
    case J_DOUBLE: {
        int64_t a = off_at(n, k), b = off_at(n, k + 1);
        return json_double(o, n->values + a, b - a);
    }
    case J_DATE:
        *o->p++ = '"';
        put_date(o, ((const int32_t *)n->values)[k]);
        *o->p++ = '"';
        return 0;
    case J_TIMESTAMP: {
        int64_t zone = n->offsets != NULL ? ((const int32_t *)n->offsets)[k] : 0;
        put_timestamp(o, ((const int64_t *)n->values)[k], (int)n->p1, zone);
        return 0;
    }
    case J_STRUCT: {
        *o->p++ = '{';
        int first = 1;
        for (Py_ssize_t c = 0; c < n->n_children; c++) {
            const node_t *f = &n->children[c];
            if (!is_valid(f, i)) continue;
            ROOM(o, f->text_len + 1);
            if (!first) *o->p++ = ',';
            first = 0;
            put_bytes(o, f->text, (size_t)f->text_len);
            if (json_value(f, i, o) < 0) return -1;
        }
        ROOM(o, 1);
        *o->p++ = '}';
        return 0;
    }
    case J_ARRAY: {
        int64_t a = off_at(n, k), b = off_at(n, k + 1);
        const node_t *item = &n->children[0];
        *o->p++ = '[';
        for (int64_t j = a; j < b; j++) {
            ROOM(o, 1);
            if (j > a) *o->p++ = ',';
            if (json_item(item, j, o) < 0) return -1;
        }
        ROOM(o, 1);
        *o->p++ = ']';
        return 0;
    }
    case J_MAP: {
        int64_t a = off_at(n, k), b = off_at(n, k + 1);
        const node_t *key = &n->children[0], *value = &n->children[1];
        *o->p++ = '{';
        for (int64_t j = a; j < b; j++) {
            ROOM(o, 1);
            if (j > a) *o->p++ = ',';
            if (json_key(key, j, o) < 0) return -1;
            ROOM(o, 1);
            *o->p++ = ':';
            if (json_item(value, j, o) < 0) return -1;
        }
        ROOM(o, 1);
        *o->p++ = '}';
        return 0;
    }
    default:
        return -1;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Entry point                                                                              */
/* ---------------------------------------------------------------------------------------- */

static const char encode_rows_doc[] =
    "encode_rows(node, n, offsets, json) -> bytes\n\n"
    "Each of the n rows of the node tree as Avro binary (json false) or JSON text (json true),\n"
    "back to back; row i's end goes to offsets[i + 1] (an int64 array of n + 1, offsets[0] = 0).\n"
    "A row whose top node is null is left empty.";

static PyObject *encode_rows(PyObject *self, PyObject *args) {
    PyObject *spec, *offsets_obj;
    Py_ssize_t n;
    int json;
    if (!PyArg_ParseTuple(args, "OnOp", &spec, &n, &offsets_obj, &json)) return NULL;
    Py_buffer offsets_view;
    if (PyObject_GetBuffer(offsets_obj, &offsets_view, PyBUF_WRITABLE) < 0) return NULL;
    if (offsets_view.len < (Py_ssize_t)sizeof(int64_t) * (n + 1)) {
        PyBuffer_Release(&offsets_view);
        PyErr_SetString(PyExc_ValueError, "offsets holds fewer than n + 1 int64 values");
        return NULL;
    }
    tree_t tree;
    if (build_tree(&tree, spec) < 0) {
        PyBuffer_Release(&offsets_view);
        return NULL;
    }
    int64_t *offsets = offsets_view.buf;
    out_t o = {NULL, NULL, NULL};
    int failed = 0;
    const node_t *top = &tree.nodes[0];
    offsets[0] = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        if (is_valid(top, i)) {
            int r = json ? json_value(top, i, &o) : avro_node(top, i, &o);
            if (r < 0) failed = 1;
        }
        offsets[i + 1] = o.p - o.start;
    }
    Py_END_ALLOW_THREADS
    PyObject *result = NULL;
    if (failed) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
    } else {
        result = PyBytes_FromStringAndSize((const char *)o.start, o.p - o.start);
    }
    free(o.start);
    release_tree(&tree);
    PyBuffer_Release(&offsets_view);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_rows", encode_rows, METH_VARARGS, encode_rows_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native_schema",
    "Avro binary and Spark's JSON of Arrow rows in C (optional; kafkalog_core/schema has the "
    "Arrow path).",
    -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native_schema(void) { return PyModule_Create(&module); }
