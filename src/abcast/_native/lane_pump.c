/* abcast._lane.pump: a tcp:// read's frames handed to the native lane without the Python
   path's framing, dispatch and clock glue (docs/performance.md §5, "the read path").

   pump(inbound, data, node) -> bool
       `inbound` is an admitted tcp:// connection (abcast.transport._tcp_inbound._Inbound)
       whose transport's frame handler is `node`'s `_on_frame` (the node installs the pump
       as it starts the transport: `QueuedTransport.frame_pump`). For a read the Python
       path would cut into whole frames and hand to the node one by one, it does what
       `_Inbound.data_received` -> `deliver_all` -> `Node._on_frame` do, frame by frame,
       and returns True; otherwise it returns False having changed nothing, and the
       caller runs that path.

   Rules. The connection offers its reads only once admitted without a handshake (its
   frames are plain: nothing to open). Every check comes before the first change: the
   link alive, a reader holding no bytes, `data` nothing but
   whole frames each within the reader's bound, the transport open and without busy
   polling, the node with lanes and metrics off. Then, in order: the connection's
   `active` and `framed` marks; for each frame the transport's `frames_in`/`bytes_in`,
   the node's clock read once (`now_us`), the lane's `receive`, and the outputs it
   returns carried out as `Node._on_frame` has their driver do it
   (`received(outputs, now)`; lane_write.c's `carry_out` writes the packets itself where
   tcp:// would write them at once). The first frame the lane declines, and every frame after it,
   go to `deliver_all` (which counts them and hands them to the node: the Python path
   and its refusals, unchanged). A driver's exception is `deliver_all`'s
   (`handler_failed`); a link dropped or a transport closed on the way ends the read
   there, as it does in `deliver_all`. */

#include "lane.h"

static struct {
    PyObject *_reader, *_buf, *_max, *link, *_alive, *_owner, *_state, *_busy,
        *stats, *frames_in, *bytes_in, *_lanes, *traffic, *clock, *now_us, *peer, *received,
        *deliver_all, *handler_failed, *active, *framed, *open;
} pn;

static unsigned long long pumped_reads, pumped_frames, passed_reads;

int lane_pump_init(void) {
#define INTERN(name) \
    if ((pn.name = PyUnicode_InternFromString(#name)) == NULL) return -1
    INTERN(_reader); INTERN(_buf); INTERN(_max); INTERN(link);
    INTERN(_alive); INTERN(_owner); INTERN(_state); INTERN(_busy); INTERN(stats);
    INTERN(frames_in); INTERN(bytes_in); INTERN(_lanes); INTERN(traffic); INTERN(clock);
    INTERN(now_us); INTERN(peer); INTERN(received); INTERN(deliver_all);
    INTERN(handler_failed); INTERN(active); INTERN(framed); INTERN(open);
#undef INTERN
    return 0;
}

/* getattr(obj, name), a new reference; NULL with an error set */
static inline PyObject *attr(PyObject *obj, PyObject *name) {
    return PyObject_GetAttr(obj, name);
}

/* obj.name is exactly True (1), something else (0), or an error (-1) */
static int attr_is(PyObject *obj, PyObject *name, PyObject *want) {
    PyObject *o = attr(obj, name);
    if (o == NULL) return -1;
    int is = o == want;
    Py_DECREF(o);
    return is;
}

/* obj.name == "open" (1), not (0), error (-1) */
static int attr_is_open(PyObject *obj) {
    PyObject *o = attr(obj, pn._state);
    if (o == NULL) return -1;
    int is = PyUnicode_Check(o) && PyUnicode_Compare(o, pn.open) == 0;
    Py_DECREF(o);
    return is;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* the frames from `start` on (their prefixes at offsets[k]) handed to deliver_all */
static int pass_rest(PyObject *owner, PyObject *link, const char *data,
                     const Py_ssize_t *offsets, Py_ssize_t start, Py_ssize_t count) {
    PyObject *rest = PyList_New(count - start);
    if (rest == NULL) return -1;
    for (Py_ssize_t k = start; k < count; k++) {
        Py_ssize_t at = offsets[k];
        PyObject *frame = PyBytes_FromStringAndSize(
            data + at + 4, (Py_ssize_t)be32((const unsigned char *)data + at));
        if (frame == NULL) {
            Py_DECREF(rest);
            return -1;
        }
        PyList_SET_ITEM(rest, k - start, frame);
    }
    PyObject *r = PyObject_CallMethodObjArgs(owner, pn.deliver_all, link, rest, NULL);
    Py_DECREF(rest);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

#define MAX_PUMPED 64 /* frames in one read the pump takes; a longer read: the Python path */

PyObject *lane_pump(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "pump(inbound, data, node) takes 3 arguments");
        return NULL;
    }
    PyObject *inbound = args[0], *data = args[1], *node = args[2];
    PyObject *link = NULL, *reader = NULL, *owner = NULL, *lanes = NULL, *clock = NULL,
             *stats = NULL, *peer = NULL, *o = NULL;
    int rc;
    if (!PyBytes_Check(data)) goto pass;

    /* --- the checks: nothing changes before all pass ---------------------------------- */
    if ((link = attr(inbound, pn.link)) == NULL) goto error;
    if ((rc = attr_is(link, pn._alive, Py_True)) <= 0) goto check;
    if ((reader = attr(inbound, pn._reader)) == NULL) goto error;
    if ((o = attr(reader, pn._buf)) == NULL) goto error;
    rc = PyByteArray_Check(o) && PyByteArray_GET_SIZE(o) == 0;
    Py_CLEAR(o);
    if (!rc) goto pass;
    if ((o = attr(reader, pn._max)) == NULL) goto error;
    long long limit = PyLong_AsLongLong(o);
    Py_CLEAR(o);
    if (limit == -1 && PyErr_Occurred()) goto error;
    if ((owner = attr(inbound, pn._owner)) == NULL) goto error;
    if ((rc = attr_is_open(owner)) <= 0) goto check;
    if ((rc = attr_is(owner, pn._busy, Py_None)) <= 0) goto check;
    if ((rc = attr_is(node, pn.traffic, Py_None)) <= 0) goto check;
    if ((lanes = attr(node, pn._lanes)) == NULL) goto error;
    if (!PyDict_Check(lanes) || PyDict_GET_SIZE(lanes) == 0) goto pass;

    const char *bytes = PyBytes_AS_STRING(data);
    Py_ssize_t size = PyBytes_GET_SIZE(data), pos = 0, count = 0;
    Py_ssize_t offsets[MAX_PUMPED];
    while (pos < size) {  /* whole frames only, each within the bound */
        if (size - pos < 4 || count == MAX_PUMPED) goto pass;
        uint32_t length = be32((const unsigned char *)bytes + pos);
        if ((long long)length > limit || (Py_ssize_t)length > size - pos - 4) goto pass;
        offsets[count++] = pos;
        pos += 4 + (Py_ssize_t)length;
    }
    if (count == 0) goto pass;

    /* --- the read: what data_received, deliver_all and Node._on_frame do -------------- */
    if (PyObject_SetAttr(inbound, pn.active, Py_True) < 0
        || PyObject_SetAttr(inbound, pn.framed, Py_True) < 0)
        goto error;
    if ((stats = attr(owner, pn.stats)) == NULL || (clock = attr(node, pn.clock)) == NULL
        || (peer = attr(link, pn.peer)) == NULL)
        goto error;
    pumped_reads++;
    for (Py_ssize_t k = 0; k < count; k++) {
        Py_ssize_t at = offsets[k], length = (Py_ssize_t)be32((const unsigned char *)bytes + at);
        PyObject *now = PyObject_CallMethodNoArgs(clock, pn.now_us);
        if (now == NULL) goto error;
        PyObject *frame = PyBytes_FromStringAndSize(bytes + at + 4, length);
        if (frame == NULL) {
            Py_DECREF(now);
            goto error;
        }
        PyObject *step_args[4] = {frame, peer, lanes, now};
        PyObject *stepped = lane_receive(module, step_args, 4);
        Py_DECREF(frame);
        if (stepped == NULL) {
            Py_DECREF(now);
            goto error;
        }
        if (stepped == Py_None) {  /* declined: this frame and the rest, the Python way */
            Py_DECREF(stepped);
            Py_DECREF(now);
            if (pass_rest(owner, link, bytes, offsets, k, count) < 0) goto error;
            break;
        }
        pumped_frames++;
        if (lane_add_int(stats, pn.frames_in, 1) < 0 || lane_add_int(stats, pn.bytes_in, length) < 0) {
            Py_DECREF(stepped);
            Py_DECREF(now);
            goto error;
        }
        PyObject *r = lane_carry_out(PyTuple_GET_ITEM(stepped, 0),
                                     PyTuple_GET_ITEM(stepped, 1), now) < 0 ? NULL : Py_None;
        Py_XINCREF(r);
        Py_DECREF(stepped);
        Py_DECREF(now);
        if (r == NULL) {  /* the handler raised: deliver_all's answer */
            PyObject *type, *exc, *tb;
            PyErr_Fetch(&type, &exc, &tb);
            PyErr_NormalizeException(&type, &exc, &tb);
            if (exc != NULL && tb != NULL) PyException_SetTraceback(exc, tb);
            r = exc == NULL ? NULL
                            : PyObject_CallMethodObjArgs(owner, pn.handler_failed, link, exc,
                                                         NULL);
            Py_XDECREF(type);
            Py_XDECREF(exc);
            Py_XDECREF(tb);
            if (r == NULL) goto error;
        }
        Py_DECREF(r);
        /* the handler may have dropped the link or closed the transport */
        if ((rc = attr_is(link, pn._alive, Py_True)) <= 0) goto done;
        if ((rc = attr_is_open(owner)) <= 0) goto done;
    }
    rc = 1;
    goto done;

check:  /* a check's answer: 0 passes the read to the Python path, -1 is an error */
    if (rc < 0) goto error;
pass:
    passed_reads++;
    Py_XDECREF(link);
    Py_XDECREF(reader);
    Py_XDECREF(owner);
    Py_XDECREF(lanes);
    Py_RETURN_FALSE;
error:
    rc = -1;
    Py_CLEAR(o);
done:  /* rc: 1 or 0 (the read taken, the rest of it dropped with its link), -1 */
    Py_XDECREF(link);
    Py_XDECREF(reader);
    Py_XDECREF(owner);
    Py_XDECREF(lanes);
    Py_XDECREF(clock);
    Py_XDECREF(stats);
    Py_XDECREF(peer);
    if (rc < 0) return NULL;
    Py_RETURN_TRUE;
}

PyObject *lane_pump_counts(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return Py_BuildValue("{sKsKsK}", "reads", pumped_reads, "frames", pumped_frames,
                         "passed", passed_reads);
}

void lane_pump_reset(void) {
    pumped_reads = pumped_frames = passed_reads = 0;
}
