/*
 * kafkalog_core._native, part four: the merge of sorted runs.
 *
 *   merge_runs - the order of the rows of k runs, each sorted already, as a stable sort of
 *                their concatenation by the same key would give it: a k-way merge (a loser
 *                tree, about log2(k) key comparisons per row) instead of a sort of every row.
 *
 * The key is a list of columns compared one after the other, all ascending: int8, int64,
 * uint64, float64 (no NaN: the caller gives NaN a class column of its own; -0.0 == 0.0 as C
 * compares them) and binary columns (null first, then by unsigned bytes, a prefix first). Equal
 * keys keep the concatenation's order: the lower run first, and a run's own order inside it.
 */
#include "_native.h"

enum { MAX_KEY_COLUMNS = 64 };

typedef struct {
    int columns;
    char kind[MAX_KEY_COLUMNS];
    const void *values[MAX_KEY_COLUMNS]; /* fixed-width columns */
    colview_t binary[MAX_KEY_COLUMNS];   /* binary columns */
} merge_key_t;

/* One fixed-width column's step of compare_rows: its answer when rows i and j differ there. */
#define COMPARE_AS(type)                                              \
    {                                                                 \
        const type *v = (const type *)key->values[c];                 \
        if (v[i] != v[j]) return v[i] < v[j] ? -1 : 1;                \
        break;                                                        \
    }

/* -1, 0 or 1 as row i's key sorts before, with or after row j's. */
static inline int compare_rows(const merge_key_t *key, Py_ssize_t i, Py_ssize_t j) {
    for (int c = 0; c < key->columns; c++) {
        switch (key->kind[c]) {
        case 'b': COMPARE_AS(int8_t)
        case 'q': COMPARE_AS(int64_t)
        case 'Q': COMPARE_AS(uint64_t)
        case 'd': COMPARE_AS(double)
        default: { /* 's': checked by merge_runs to lie inside the data */
            const colview_t *v = &key->binary[c];
            int64_t a = view_length(v, i), b = view_length(v, j);
            if (a < 0 || b < 0) {
                if (a != b) return a < b ? -1 : 1; /* null first */
                break;
            }
            int64_t common = a < b ? a : b;
            int d = common ? memcmp(v->data + view_offset(v, i), v->data + view_offset(v, j),
                                    (size_t)common)
                           : 0;
            if (d != 0) return d < 0 ? -1 : 1;
            if (a != b) return a < b ? -1 : 1;
        }
        }
    }
    return 0;
}

typedef struct {
    const merge_key_t *key;
    int64_t *head, *end; /* per run (padded to a power of two with empty runs) */
} runs_t;

/* Whether run a's next row goes out before run b's: an exhausted run never does, and on equal
 * keys the lower run goes first. */
static inline int before(const runs_t *r, Py_ssize_t a, Py_ssize_t b) {
    int done_a = r->head[a] >= r->end[a], done_b = r->head[b] >= r->end[b];
    if (done_a || done_b) return done_a ? (done_b && a < b) : 1;
    int c = compare_rows(r->key, r->head[a], r->head[b]);
    return c < 0 || (c == 0 && a < b);
}

const char merge_runs_doc[] =
    "merge_runs(out, starts, kinds, columns) -> None\n"
    "\n"
    "Write into `out` (int64, n rows) the rows of the runs [starts[r], starts[r + 1]) of the\n"
    "key `columns` (n rows each) in key order, each run sorted already; equal keys in row\n"
    "order. `kinds`: one byte per column, b int8, q int64, Q uint64, d float64 (no NaN), s a\n"
    "binary column (offsets, validity or None, bit_offset, data or None; nulls first).";

PyObject *merge_runs(PyObject *self, PyObject *args) {
    PyObject *out, *starts, *columns;
    const char *kinds;
    Py_ssize_t columns_given;
    if (!PyArg_ParseTuple(args, "OOs#O", &out, &starts, &kinds, &columns_given, &columns))
        return NULL;
    if (!PyTuple_Check(columns) || PyTuple_GET_SIZE(columns) != columns_given ||
        columns_given > MAX_KEY_COLUMNS) {
        PyErr_Format(PyExc_ValueError, "columns: expected a tuple of %zd (at most %d) columns",
                     columns_given, MAX_KEY_COLUMNS);
        return NULL;
    }
    Py_buffer out_view, starts_view, fixed[MAX_KEY_COLUMNS];
    column_t binary[MAX_KEY_COLUMNS];
    int held = 0; /* columns whose buffers are held */
    int64_t *head = NULL;
    PyObject *result = NULL;
    if (get_array(out, &out_view, -1, 1, "out") < 0) return NULL;
    if (get_array(starts, &starts_view, -1, 0, "starts") < 0) {
        PyBuffer_Release(&out_view);
        return NULL;
    }
    const Py_ssize_t n = out_view.len / 8, runs = starts_view.len / 8 - 1;
    const int64_t *start = (const int64_t *)starts_view.buf;
    if (runs < 0 || start[0] != 0 || start[runs] != n) {
        PyErr_SetString(PyExc_ValueError, "starts: expected 0, .., len(out)");
        goto done;
    }
    for (Py_ssize_t r = 0; r < runs; r++) {
        if (start[r + 1] < start[r]) {
            PyErr_SetString(PyExc_ValueError, "starts: decreasing");
            goto done;
        }
    }
    merge_key_t key;
    memset(&key, 0, sizeof(key));
    key.columns = (int)columns_given;
    for (; held < key.columns; held++) {
        PyObject *spec = PyTuple_GET_ITEM(columns, held);
        char kind = kinds[held];
        key.kind[held] = kind;
        if (kind == 's') {
            if (spec == Py_None) {
                PyErr_SetString(PyExc_ValueError, "columns: a binary column is None");
                goto done;
            }
            if (get_column(spec, n, &binary[held], "columns") < 0) goto done;
            const colview_t v = view_of(&binary[held]);
            key.binary[held] = v;
            int64_t last = n ? view_offset(&v, 0) : 0;
            int bad = last < 0;
            for (Py_ssize_t i = 1; i <= n && !bad; i++) {
                int64_t next = view_offset(&v, i);
                bad = next < last;
                last = next;
            }
            if (bad || last > (v.data ? v.data_len : 0)) {
                held++; /* release this one too */
                PyErr_SetString(PyExc_ValueError, "columns: offsets outside their data");
                goto done;
            }
            continue;
        }
        Py_ssize_t width = kind == 'b' ? 1 : 8;
        if (kind != 'b' && kind != 'q' && kind != 'Q' && kind != 'd') {
            PyErr_Format(PyExc_ValueError, "kinds: unknown kind %c", kind);
            goto done;
        }
        if (PyObject_GetBuffer(spec, &fixed[held], PyBUF_SIMPLE) < 0) goto done;
        key.values[held] = fixed[held].buf;
        if (fixed[held].len != n * width) {
            held++;
            PyErr_Format(PyExc_ValueError, "columns: expected %zd values of %zd bytes", n, width);
            goto done;
        }
    }
    Py_ssize_t leaves = 1;
    while (leaves < runs) leaves <<= 1;
    /* head, end: per leaf; loser: the loser of each inner node 1..leaves-1; win: scratch */
    head = PyMem_Malloc(sizeof(int64_t) * 4 * (size_t)leaves);
    if (head == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *end = head + leaves, *loser = head + 2 * leaves, *win = head + 3 * leaves;
    int64_t *order = (int64_t *)out_view.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < leaves; r++) {
        head[r] = r < runs ? start[r] : 0;
        end[r] = r < runs ? start[r + 1] : 0;
    }
    runs_t tree = {&key, head, end};
    /* Play the first round bottom-up: win[node] is the node's winner, loser[node] its loser;
     * the leaves' winners are their runs (win[leaves + r], kept in `loser`'s spare room). */
    int64_t winner = 0;
    if (leaves > 1) {
        for (Py_ssize_t node = leaves - 1; node >= 1; node--) {
            int64_t a = 2 * node >= leaves ? 2 * node - leaves : win[2 * node];
            int64_t b = 2 * node + 1 >= leaves ? 2 * node + 1 - leaves : win[2 * node + 1];
            int first = before(&tree, a, b);
            win[node] = first ? a : b;
            loser[node] = first ? b : a;
        }
        winner = win[1];
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        order[i] = head[winner]++;
        for (Py_ssize_t node = (winner + leaves) >> 1; node >= 1; node >>= 1) {
            if (before(&tree, loser[node], winner)) {
                int64_t t = loser[node];
                loser[node] = winner;
                winner = t;
            }
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    for (int c = 0; c < held; c++) {
        if (kinds[c] == 's')
            release_column(&binary[c]);
        else
            PyBuffer_Release(&fixed[c]);
    }
    PyMem_Free(head);
    PyBuffer_Release(&starts_view);
    PyBuffer_Release(&out_view);
    return result;
}
