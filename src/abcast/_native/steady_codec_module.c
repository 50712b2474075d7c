/* abcast._steady_codec: the steady wire subset (steady_wire.h) for Python.

   parse(frame) -> (group, sender, flags, kind, rdata_seq, rdata_ack, body, payload) | None
       body: SData's seq (kind KIND_DATA), or (first, ((node, seq), ...)) (KIND_ORDER).
       None for any frame that is not a steady one, valid by msgspec's rules; never raises
       for what the bytes hold (only TypeError for an argument without the buffer protocol).
   encode_data_frame(group, sender, rdata_seq, rdata_ack, seq, payload) -> bytes
   encode_order_frame(group, sender, rdata_seq, rdata_ack, first, ids, payload) -> bytes
       byte for byte abcast.codec.encode_frame(group, sender, Packet((FD, RData(rdata_seq,
       rdata_ack), SData(seq) | SOrder(first, ids)), payload)). Values a peer's decoder
       would refuse raise ValueError (TypeError for a wrong type), so no frame leaves that
       a peer would drop.
   SOURCE_HASH: the hash of the C sources it was built from (setup.py's source_hash), so a
       test can refuse a stale build. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "steady_wire.h"

#ifndef ABCAST_STEADY_SOURCE_HASH
#define ABCAST_STEADY_SOURCE_HASH "unknown"
#endif

#define STACK_IDS 16  /* ids encoded without a heap buffer */

static PyObject *text(sw_str s) {
    return PyUnicode_DecodeUTF8(s.ptr, (Py_ssize_t)s.len, NULL);
}

/* A tuple of `n` new references (each may be NULL after a failed call: then none is
   kept and NULL is returned). Py_BuildValue parses its format on every call: this does
   not, and the parse's own cost is of the order of that parsing. */
static PyObject *pack(Py_ssize_t n, PyObject **items) {
    PyObject *t = NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!items[i]) goto fail;
    t = PyTuple_New(n);
    if (!t) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(t, i, items[i]);
    return t;
fail:
    for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(items[i]);
    return NULL;
}

/* The frame's values as a tuple (the frame was accepted by sw_parse). */
static PyObject *frame_tuple(const sw_frame *f) {
    PyObject *body;
    if (f->kind == SW_KIND_DATA) {
        body = PyLong_FromUnsignedLongLong(f->seq);
    } else {
        PyObject *ids = PyTuple_New((Py_ssize_t)f->n_ids);
        if (!ids) return NULL;
        const uint8_t *cursor = f->ids;
        for (size_t i = 0; i < f->n_ids; i++) {
            sw_id id;
            if (!sw_next_id(&cursor, f->ids_end, &id)) {
                Py_DECREF(ids);
                PyErr_SetString(PyExc_SystemError, "steady codec: ids changed under parse");
                return NULL;
            }
            PyObject *pair[2] = {text(id.node), PyLong_FromUnsignedLongLong(id.seq)};
            PyObject *item = pack(2, pair);
            if (!item) {
                Py_DECREF(ids);
                return NULL;
            }
            PyTuple_SET_ITEM(ids, (Py_ssize_t)i, item);
        }
        PyObject *order[2] = {PyLong_FromUnsignedLongLong(f->seq), ids};
        body = pack(2, order);
    }
    PyObject *values[8] = {
        text(f->group), text(f->sender), PyLong_FromLong((long)f->flags),
        PyLong_FromLong((long)f->kind), PyLong_FromUnsignedLongLong(f->rdata_seq),
        PyLong_FromUnsignedLongLong(f->rdata_ack), body,
        PyBytes_FromStringAndSize((const char *)f->payload, (Py_ssize_t)f->payload_len),
    };
    return pack(8, values);
}

static PyObject *parse(PyObject *module, PyObject *frame) {
    (void)module;
    sw_frame f;
    if (PyBytes_CheckExact(frame)) {
        if (!sw_parse((const uint8_t *)PyBytes_AS_STRING(frame),
                      (size_t)PyBytes_GET_SIZE(frame), &f))
            Py_RETURN_NONE;
        return frame_tuple(&f);
    }
    Py_buffer view;
    if (PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out;
    if (sw_parse((const uint8_t *)view.buf, (size_t)view.len, &f)) {
        out = frame_tuple(&f);
    } else {
        out = Py_None;
        Py_INCREF(out);
    }
    PyBuffer_Release(&view);
    return out;
}

/* --- encoding: arguments checked as a peer's decoder would check them ---------------- */

/* A str of 1..max_chars code points, as UTF-8 (a lone surrogate raises, as msgspec). */
static int arg_text(PyObject *obj, const char *what, Py_ssize_t max_chars, sw_str *out) {
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str, not %.80s", what,
                     Py_TYPE(obj)->tp_name);
        return 0;
    }
    Py_ssize_t chars = PyUnicode_GET_LENGTH(obj);
    if (chars < 1 || chars > max_chars) {
        PyErr_Format(PyExc_ValueError, "%s must be 1..%zd characters, got %zd", what,
                     max_chars, chars);
        return 0;
    }
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(obj, &n);
    if (!s) return 0;
    out->ptr = s;
    out->len = (size_t)n;
    return 1;
}

/* An int in lo..2**62 (not a bool: msgspec would encode that as true/false). */
static int arg_int(PyObject *obj, const char *what, uint64_t lo, uint64_t *out) {
    if (!PyLong_Check(obj) || PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.80s", what,
                     Py_TYPE(obj)->tp_name);
        return 0;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred()) return 0;
    if (overflow || v < (long long)lo || (uint64_t)v > SW_SEQ_MAX) {
        PyErr_Format(PyExc_ValueError, "%s must be in %llu..2**62", what,
                     (unsigned long long)lo);
        return 0;
    }
    *out = (uint64_t)v;
    return 1;
}

/* The arguments both frames share but the payload; args[4] is `seq_name`. */
static int common_args(PyObject *const *args, const char *seq_name, sw_out *f) {
    if (!arg_text(args[0], "group", SW_GROUP_MAX_CHARS, &f->group)
        || !arg_text(args[1], "sender", SW_NODE_MAX_CHARS, &f->sender)
        || !arg_int(args[2], "rdata_seq", 1, &f->rdata_seq)
        || !arg_int(args[3], "rdata_ack", 0, &f->rdata_ack)
        || !arg_int(args[4], seq_name, 1, &f->seq))
        return 0;
    f->flags = 0;
    f->ids = NULL;
    f->n_ids = 0;
    return 1;
}

static int payload_arg(PyObject *obj, Py_buffer *view, sw_out *f) {
    if (PyUnicode_Check(obj)) {  /* has no buffer anyway; say what is wanted */
        PyErr_SetString(PyExc_TypeError, "payload must be bytes-like, not str");
        return 0;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return 0;
    f->payload = (const uint8_t *)view->buf;
    f->payload_len = (size_t)view->len;
    return 1;
}

static PyObject *finish(size_t size, uint8_t *(*write)(uint8_t *, const sw_out *),
                        const sw_out *f) {
    if (!size) {
        PyErr_SetString(PyExc_OverflowError, "steady frame too large for msgpack");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (!out) return NULL;
    uint8_t *end = write((uint8_t *)PyBytes_AS_STRING(out), f);
    if ((size_t)(end - (uint8_t *)PyBytes_AS_STRING(out)) != size) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_SystemError, "steady codec: frame size mismatch");
        return NULL;
    }
    return out;
}

static PyObject *encode_data_frame(PyObject *module, PyObject *const *args,
                                   Py_ssize_t nargs) {
    (void)module;
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError,
                     "encode_data_frame(group, sender, rdata_seq, rdata_ack, seq, payload) "
                     "takes 6 arguments, got %zd", nargs);
        return NULL;
    }
    sw_out f;
    Py_buffer view;
    if (!common_args(args, "seq", &f) || !payload_arg(args[5], &view, &f)) return NULL;
    PyObject *out = finish(sw_data_frame_size(&f), sw_write_data_frame, &f);
    PyBuffer_Release(&view);
    return out;
}

static PyObject *encode_order_frame(PyObject *module, PyObject *const *args,
                                    Py_ssize_t nargs) {
    (void)module;
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError,
                     "encode_order_frame(group, sender, rdata_seq, rdata_ack, first, ids, "
                     "payload) takes 7 arguments, got %zd", nargs);
        return NULL;
    }
    sw_out f;
    if (!common_args(args, "first", &f)) return NULL;
    PyObject *ids = PySequence_Fast(args[5], "ids must be a sequence of (node, seq)");
    if (!ids) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(ids);
    if (n > SW_MAX_ORDER_IDS) {
        Py_DECREF(ids);
        PyErr_Format(PyExc_ValueError, "an order carries at most %d ids, got %zd",
                     SW_MAX_ORDER_IDS, n);
        return NULL;
    }
    sw_id stack_ids[STACK_IDS];
    sw_id *buf = n <= STACK_IDS ? stack_ids : PyMem_Malloc((size_t)n * sizeof(sw_id));
    PyObject *out = NULL;
    Py_buffer view;
    int have_view = 0;
    if (!buf) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject **items = PySequence_Fast_ITEMS(ids);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = items[i];
        if (!(PyTuple_Check(pair) || PyList_Check(pair))
            || PySequence_Fast_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "each id must be a (node, seq) pair");
            goto done;
        }
        PyObject **two = PySequence_Fast_ITEMS(pair);
        if (!arg_text(two[0], "an id's node", SW_NODE_MAX_CHARS, &buf[i].node)
            || !arg_int(two[1], "an id's seq", 1, &buf[i].seq))
            goto done;
    }
    f.ids = buf;
    f.n_ids = (size_t)n;
    if (!payload_arg(args[6], &view, &f)) goto done;
    have_view = 1;
    out = finish(sw_order_frame_size(&f), sw_write_order_frame, &f);
done:
    if (have_view) PyBuffer_Release(&view);
    if (buf && buf != stack_ids) PyMem_Free(buf);
    Py_DECREF(ids);
    return out;
}

static PyMethodDef methods[] = {
    {"parse", (PyCFunction)parse, METH_O,
     "parse(frame) -> tuple | None: a steady frame's values, or None for any other bytes."},
    {"encode_data_frame", (PyCFunction)(void (*)(void))encode_data_frame, METH_FASTCALL,
     "encode_data_frame(group, sender, rdata_seq, rdata_ack, seq, payload) -> bytes"},
    {"encode_order_frame", (PyCFunction)(void (*)(void))encode_order_frame, METH_FASTCALL,
     "encode_order_frame(group, sender, rdata_seq, rdata_ack, first, ids, payload) -> bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "abcast._steady_codec",
    "The steady subset of abcast's wire format in C (see src/abcast/_native/steady_wire.h).",
    0, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__steady_codec(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (PyModule_AddIntConstant(m, "KIND_DATA", SW_KIND_DATA) < 0
        || PyModule_AddIntConstant(m, "KIND_ORDER", SW_KIND_ORDER) < 0
        || PyModule_AddStringConstant(m, "SOURCE_HASH", ABCAST_STEADY_SOURCE_HASH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
