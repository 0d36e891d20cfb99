/*
 * kafkalog_core._native's int64 array arguments: every unit (the encoder, the compressed
 * writer, the cleaner's key loops) takes its offsets, sizes and tables as buffers of int64,
 * checked here the same way, so a wrong length is one ValueError naming the argument.
 */
#include "_native.h"

int get_array(PyObject *obj, Py_buffer *view, Py_ssize_t items, int writable, const char *name) {
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) return -1;
    if ((items >= 0 && view->len != items * 8) || (items < 0 && view->len % 8 != 0)) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd int64 values, got %zd bytes", name,
                     items, view->len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}
