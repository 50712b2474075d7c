/* abcast._lane.carry_out: a lane step's outputs carried out, its packets written by C
   where tcp:// would write them at once (docs/performance.md §5, "the write path").

   carry_out(driver, outputs, now) -> None
       What `driver.received(outputs, now)` does for the outputs of a lane step (the
       pump's frames, the driver's lane broadcasts): its run of protocol packets first,
       then its deliveries and timers. When the run — the `Transmit`s `_carry_out` would
       collect before anything else (to one peer each, no control packet, skipping the
       deliveries and timers it holds back) — finds every peer's tcp:// channel idle, they
       are written here, each peer's frames as one write of their length prefixes and
       bytes (as the Python path's cork has it), and only the other outputs go to
       `driver.received`, in
       their order; otherwise everything does, and the Python path writes them. Outputs
       left that are all deliveries and timers go straight to `driver._carry_out_held`,
       inside what `_apply` does around it (the step's backpressure answer forgotten,
       `_applying` set while the application's callbacks run), for a driver open and
       without metrics; anything else to `received`.

   backpressured(stack) -> bool | None
       `stack.backpressured()` for the lane's stack shape (abcast.runtime.lane.eligible):
       a link of the channel with `max_waiting` packets waiting for credit, or the
       sequencer's own broadcasts not yet delivered here at `max_unstable`; None for
       another shape (the caller asks the stack). The driver asks it before every
       broadcast a step has not answered yet.

   Rules. Idle is `TcpTransport.send_run`'s fast path (`_Channel.write_at_once`), checked
   for every peer before the first write: the driver open, not carrying out, without
   metrics; the node open, without metrics, the peer's address known; the transport
   exactly a plain `TcpTransport`, open, not corked, not busy polling; the frame within
   its bound; the channel connected, nothing queued, nothing written in this loop turn,
   no sealer, an empty write buffer. A write then does what that path does: the channel
   marked as written this turn (and put on the transport's end-of-turn list, the loop
   callback scheduled with the list's first), the write, the transport's `frames_out`
   and `bytes_out`, its drain waiters woken if any, and the driver's `protocol_packets`
   and `_pressure` (forgotten, as after any step). The differential test of the
   transport's write path (tests/unit/test_hotpath_tcp.py, the conformance suite's run
   check) holds `send_run` to cork/send/uncork; tests/runtime/test_runtime_native_lane.py
   holds this to `send_run`. */

#include "lane.h"

static struct {
    PyObject *closed, *_applying, *meter, *host, *_state, *traffic, *_transport,
        *_peer_urls, *_corks, *_busy, *_peers, *_channels, *options, *max_frame_bytes,
        *_conn, *_in_turn, *_peer, *queue, *sealer, *get_write_buffer_size, *write,
        *_dirty, *_loop, *call_soon, *_end_turn, *stats, *frames_out, *bytes_out,
        *_progress, *_waiters, *notify, *protocol_packets, *_pressure, *received, *to,
        *_carry_out_held, *layers, *config, *max_waiting, *_out, *waiting, *ordering, *st,
        *sent, *delivered, *node, *max_unstable,
        *data, *control, *open;
    /* imported at first use (importing abcast.transport.tcp at the lane's import would
       be a cycle): abcast.transport.tcp.TcpTransport, abcast.effects.SetTimer and
       CancelTimer */
    PyObject *tcp_type, *set_timer, *cancel_timer;
} wn;

static unsigned long long written_packets, handed_runs;

int lane_write_init(void) {
#define INTERN(name) \
    if ((wn.name = PyUnicode_InternFromString(#name)) == NULL) return -1
    INTERN(closed); INTERN(_applying); INTERN(meter); INTERN(host); INTERN(_state);
    INTERN(traffic); INTERN(_transport); INTERN(_peer_urls); INTERN(_corks); INTERN(_busy);
    INTERN(_peers); INTERN(_channels); INTERN(options); INTERN(max_frame_bytes);
    INTERN(_conn); INTERN(_in_turn); INTERN(_peer); INTERN(queue); INTERN(sealer);
    INTERN(get_write_buffer_size); INTERN(write); INTERN(_dirty); INTERN(_loop);
    INTERN(call_soon); INTERN(_end_turn); INTERN(stats); INTERN(frames_out);
    INTERN(bytes_out); INTERN(_progress); INTERN(_waiters); INTERN(notify);
    INTERN(protocol_packets); INTERN(_pressure); INTERN(received); INTERN(to);
    INTERN(_carry_out_held); INTERN(layers); INTERN(config); INTERN(max_waiting);
    INTERN(_out); INTERN(waiting); INTERN(ordering); INTERN(st); INTERN(sent);
    INTERN(delivered); INTERN(node); INTERN(max_unstable);
    INTERN(data); INTERN(control); INTERN(open);
#undef INTERN
    return 0;
}

#define MAX_RUN 8 /* packets of one step written here; a longer run: the Python path */

static int import_types(void) {
    if ((wn.set_timer = lane_import_attr("abcast.effects", "SetTimer")) == NULL
        || (wn.cancel_timer = lane_import_attr("abcast.effects", "CancelTimer")) == NULL
        || (wn.tcp_type = lane_import_attr("abcast.transport.tcp", "TcpTransport")) == NULL)
        return -1;
    return 0;
}

typedef struct {
    PyObject *channel, *writer, *data; /* held */
    Py_ssize_t size, index;                /* the frame's bytes, its place in outputs */
    Py_ssize_t first;                      /* the run's first packet to the same peer */
} packet_out;

/* obj.name, a reference held by `hp`; NULL with an error set */
#define WGET(dst, obj, name)                                        \
    do {                                                            \
        (dst) = hold(hp, PyObject_GetAttr((obj), wn.name));         \
        if ((dst) == NULL) goto error;                              \
    } while (0)

static int is_open_str(PyObject *o) {
    return PyUnicode_Check(o) && PyUnicode_Compare(o, wn.open) == 0;
}

/* The step's run of packets written here (1: `*written` of them, at `written_at` in
   `outputs`; the other outputs are for `received`), or nothing done (0), or -1. */
static int write_run(PyObject *driver, PyObject *outputs, Py_ssize_t *written,
                     Py_ssize_t *written_at) {
    held_refs h = {.n = 0}, *hp = &h;
    packet_out run[MAX_RUN];
    Py_ssize_t n = 0, count = PyList_GET_SIZE(outputs);
    PyObject *o, *transport, *node, *urls, *peers, *channels, *opts;
    int truth;
    *written = 0;

    /* the run, as `_carry_out` collects it: the protocol Transmits (one peer each),
       skipping the deliveries and timers it holds back, up to the first other output;
       a peer's frames leave in one write, as under the Python path's cork */
    if (wn.tcp_type == NULL && import_types() < 0) goto error;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *out = PyList_GET_ITEM(outputs, i), *type = (PyObject *)Py_TYPE(out);
        if (type == lane_DeliverType || type == wn.set_timer || type == wn.cancel_timer)
            continue;
        if (type != lane_TransmitType) break;
        WGET(o, out, control);
        if (o != Py_False) break;
        if (n == MAX_RUN) goto decline;
        PyObject *to;
        WGET(to, out, to);
        if (!PyTuple_Check(to) || PyTuple_GET_SIZE(to) != 1) goto decline;
        WGET(run[n].data, out, data);
        if (!PyBytes_Check(run[n].data)) goto decline;
        run[n].size = PyBytes_GET_SIZE(run[n].data);
        run[n].channel = PyTuple_GET_ITEM(to, 0); /* the peer, for now */
        run[n].index = i;
        run[n].first = n;
        for (Py_ssize_t k = 0; k < n; k++) {
            int same = PyObject_RichCompareBool(run[k].channel, run[n].channel, Py_EQ);
            if (same < 0) goto error;
            if (same) { /* the peer's frames so far: one write */
                run[n].first = run[k].first;
                break;
            }
        }
        n++;
    }
    if (n == 0) goto decline;

    /* --- the checks: nothing is written before all pass ------------------------------ */
    WGET(o, driver, closed);
    if (o != Py_False) goto decline;
    WGET(o, driver, _applying);
    if (o != Py_False) goto decline;
    WGET(o, driver, meter);
    if (o != Py_None) goto decline;
    WGET(node, driver, host);
    WGET(o, node, _state);
    if (!is_open_str(o)) goto decline;
    WGET(o, node, traffic);
    if (o != Py_None) goto decline;
    WGET(transport, node, _transport);
    if ((PyObject *)Py_TYPE(transport) != wn.tcp_type) goto decline; /* tcps, wrappers */
    WGET(o, transport, _state);
    if (!is_open_str(o)) goto decline;
    WGET(o, transport, _corks);
    if (!PyLong_Check(o) || PyLong_AsLong(o) != 0) goto decline;
    WGET(o, transport, _busy);
    if (o != Py_None) goto decline;
    WGET(urls, node, _peer_urls);
    WGET(peers, transport, _peers);
    WGET(channels, transport, _channels);
    if (!PyDict_Check(urls) || !PyDict_Check(peers) || !PyDict_Check(channels)) goto decline;
    WGET(opts, transport, options);
    WGET(o, opts, max_frame_bytes);
    long long limit = PyLong_AsLongLong(o);
    if (limit == -1 && PyErr_Occurred()) goto error;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *peer = run[k].channel, *channel, *conn, *writer, *state;
        if (run[k].size > limit) goto decline;
        if (run[k].first != k) continue; /* its peer's checks: at its first frame */
        truth = PyDict_Contains(urls, peer);
        if (truth <= 0) goto check_failed;
        truth = PyDict_Contains(peers, peer);
        if (truth <= 0) goto check_failed;
        truth = held_item(hp, channels, peer, &channel);
        if (truth <= 0) goto check_failed;
        WGET(conn, channel, _conn);
        if (conn == Py_None) goto decline;
        WGET(o, channel, _in_turn);
        if (o != Py_False) goto decline;
        WGET(state, channel, _peer);
        WGET(o, state, queue);
        truth = PyObject_IsTrue(o);
        if (truth != 0) goto check_failed;
        WGET(o, conn, sealer);
        if (o != Py_None) goto decline;
        WGET(writer, conn, _transport);
        if (writer == Py_None) goto decline;
        o = hold(hp, PyObject_CallMethodNoArgs(writer, wn.get_write_buffer_size));
        if (o == NULL) goto error;
        if (!PyLong_Check(o) || PyLong_AsLong(o) != 0) goto decline;
        run[k].channel = channel;
        run[k].writer = writer;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        run[k].channel = run[run[k].first].channel;
        run[k].writer = run[run[k].first].writer;
    }

    /* --- the writes: what write_at_once and sent do ---------------------------------- */
    PyObject *dirty, *stats, *progress, *waiters;
    WGET(dirty, transport, _dirty);
    WGET(stats, transport, stats);
    WGET(progress, transport, _progress);
    if (!PyList_Check(dirty)) goto decline;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (run[k].first != k) continue; /* written with its peer's first frame */
        if (PyObject_SetAttr(run[k].channel, wn._in_turn, Py_True) < 0) goto error;
        if (PyList_GET_SIZE(dirty) == 0) {
            PyObject *loop, *end_turn;
            WGET(loop, transport, _loop);
            WGET(end_turn, transport, _end_turn);
            o = PyObject_CallMethodOneArg(loop, wn.call_soon, end_turn);
            if (o == NULL) goto error;
            Py_DECREF(o);
        }
        if (PyList_Append(dirty, run[k].channel) < 0) goto error;
        Py_ssize_t frames = 0, size = 0; /* the peer's frames: as `encode_frames` joins them */
        for (Py_ssize_t j = k; j < n; j++)
            if (run[j].first == k) {
                frames++;
                size += run[j].size;
            }
        PyObject *wire = PyBytes_FromStringAndSize(NULL, size + 4 * frames);
        if (wire == NULL) goto error;
        unsigned char *w = (unsigned char *)PyBytes_AS_STRING(wire);
        for (Py_ssize_t j = k; j < n; j++) {
            if (run[j].first != k) continue;
            Py_ssize_t length = run[j].size;
            w[0] = (unsigned char)(length >> 24);
            w[1] = (unsigned char)(length >> 16);
            w[2] = (unsigned char)(length >> 8);
            w[3] = (unsigned char)length;
            memcpy(w + 4, PyBytes_AS_STRING(run[j].data), (size_t)length);
            w += 4 + length;
        }
        o = PyObject_CallMethodOneArg(run[k].writer, wn.write, wire);
        Py_DECREF(wire);
        if (o == NULL) goto error;
        Py_DECREF(o);
        if (lane_add_int(stats, wn.frames_out, frames) < 0
            || lane_add_int(stats, wn.bytes_out, size) < 0)
            goto error;
        WGET(waiters, progress, _waiters);
        truth = PyObject_IsTrue(waiters);
        if (truth < 0) goto error;
        if (truth) {
            o = PyObject_CallMethodNoArgs(progress, wn.notify);
            if (o == NULL) goto error;
            Py_DECREF(o);
        }
    }
    for (Py_ssize_t k = 0; k < n; k++) written_at[k] = run[k].index;
    if (lane_add_int(driver, wn.protocol_packets, n) < 0) goto error;
    written_packets += (unsigned long long)n;
    release(&h);
    *written = n;
    return 1;

check_failed:
    if (truth < 0) goto error;
decline:
    release(&h);
    return 0;
error:
    release(&h);
    return -1;
}

/* 1 if every item of `outputs` is one `_carry_out` holds back (a delivery or a timer),
   0 if not */
static int all_held(PyObject *outputs) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(outputs); i++) {
        PyObject *type = (PyObject *)Py_TYPE(PyList_GET_ITEM(outputs, i));
        if (type != lane_DeliverType && type != wn.set_timer && type != wn.cancel_timer)
            return 0;
    }
    return 1;
}

/* `_apply`'s frame around `_carry_out_held(held)` for a step whose outputs are all held
   back (deliveries, timers): 1 done, 0 not this driver's state (the caller calls
   `received`), -1 with an error set */
static int carry_out_held(PyObject *driver, PyObject *held) {
    PyObject *o;
    int plain = 1;
    if ((o = PyObject_GetAttr(driver, wn.closed)) == NULL) return -1;
    plain &= o == Py_False;
    Py_DECREF(o);
    if ((o = PyObject_GetAttr(driver, wn._applying)) == NULL) return -1;
    plain &= o == Py_False;
    Py_DECREF(o);
    if ((o = PyObject_GetAttr(driver, wn.meter)) == NULL) return -1;
    plain &= o == Py_None;
    Py_DECREF(o);
    if (!plain) return 0;
    if (PyObject_SetAttr(driver, wn._pressure, Py_None) < 0
        || PyObject_SetAttr(driver, wn._applying, Py_True) < 0)
        return -1;
    o = PyObject_CallMethodOneArg(driver, wn._carry_out_held, held);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);  /* restored after the flag, as `_apply`'s finally */
    int rc = PyObject_SetAttr(driver, wn._applying, Py_False);
    if (rc < 0) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        Py_XDECREF(o);
        return -1;
    }
    PyErr_Restore(type, value, tb);
    if (o == NULL) return -1;
    Py_DECREF(o);
    return 1;
}

/* carry_out(driver, outputs, now): see the top */
int lane_carry_out(PyObject *driver, PyObject *outputs, PyObject *now) {
    Py_ssize_t written = 0, written_at[MAX_RUN];
    if (!PyList_Check(outputs)) {
        PyErr_SetString(PyExc_TypeError, "carry_out: outputs must be a list");
        return -1;
    }
    int rc = PyList_GET_SIZE(outputs) ? write_run(driver, outputs, &written, written_at) : 0;
    if (rc < 0) return -1;
    PyObject *rest = outputs, *r;
    if (written) {
        handed_runs++;
        if (PyObject_SetAttr(driver, wn._pressure, Py_None) < 0) return -1;
        if (written == PyList_GET_SIZE(outputs)) return 0;
        rest = PyList_New(0);
        if (rest == NULL) return -1;
        for (Py_ssize_t i = 0, k = 0; i < PyList_GET_SIZE(outputs); i++) {
            if (k < written && written_at[k] == i) {
                k++;
                continue;
            }
            if (PyList_Append(rest, PyList_GET_ITEM(outputs, i)) < 0) {
                Py_DECREF(rest);
                return -1;
            }
        }
    } else {
        Py_INCREF(rest);
    }
    if (PyList_GET_SIZE(rest) && all_held(rest)) {  /* deliveries, timers: no dispatch */
        rc = carry_out_held(driver, rest);
        if (rc != 0) {
            Py_DECREF(rest);
            return rc < 0 ? -1 : 0;
        }
    }
    r = PyObject_CallMethodObjArgs(driver, wn.received, rest, now, NULL);
    Py_DECREF(rest);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* backpressured(stack) -> bool | None: see the top */
PyObject *lane_backpressured(PyObject *module, PyObject *stack) {
    (void)module;
    held_refs h = {.n = 0}, *hp = &h;
    PyObject *layers, *o, *config, *links, *key, *link, *core, *st, *delivered, *node;
    int truth;
    if (wn.tcp_type == NULL && import_types() < 0) return NULL;
    WGET(layers, stack, layers);
    if (!PyList_Check(layers) || PyList_GET_SIZE(layers) != 3
        || !lane_layers_shaped(PyList_GET_ITEM(layers, 0), PyList_GET_ITEM(layers, 1),
                               PyList_GET_ITEM(layers, 2)))
        goto other;
    /* the channel's: a link's credit queue at max_waiting */
    PyObject *channel = PyList_GET_ITEM(layers, 1);
    WGET(config, channel, config);
    WGET(o, config, max_waiting);
    Py_ssize_t limit = PyLong_AsSsize_t(o);
    if (limit == -1 && PyErr_Occurred()) goto error;
    WGET(links, channel, _out);
    if (!PyDict_Check(links)) goto other;
    Py_ssize_t pos = 0;
    while (PyDict_Next(links, &pos, &key, &link)) {
        WGET(o, link, waiting);
        Py_ssize_t waiting = PyObject_Length(o);
        if (waiting < 0) goto error;
        if (waiting >= limit) goto pressed;
    }
    /* the sequencer's: our own broadcasts not yet delivered at max_unstable */
    WGET(core, PyList_GET_ITEM(layers, 2), ordering);
    if ((PyObject *)Py_TYPE(core) != lane_SequencerType) goto other;
    WGET(st, core, st);
    WGET(node, st, node);
    WGET(delivered, st, delivered);
    if (!PyDict_Check(delivered)) goto other;
    PyObject *mine;
    truth = held_item(hp, delivered, node, &mine);
    if (truth < 0) goto error;
    long long done = 0, sent, bound;
    if (truth && (done = PyLong_AsLongLong(mine)) == -1 && PyErr_Occurred()) goto error;
    WGET(o, st, sent);
    if ((sent = PyLong_AsLongLong(o)) == -1 && PyErr_Occurred()) goto error;
    WGET(o, st, max_unstable);
    if ((bound = PyLong_AsLongLong(o)) == -1 && PyErr_Occurred()) goto error;
    release(&h);
    return PyBool_FromLong(sent - done >= bound);
pressed:
    release(&h);
    Py_RETURN_TRUE;
other:
    release(&h);
    Py_RETURN_NONE;
error:
    release(&h);
    return NULL;
}

PyObject *lane_carry_out_py(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "carry_out(driver, outputs, now) takes 3 arguments");
        return NULL;
    }
    if (lane_carry_out(args[0], args[1], args[2]) < 0) return NULL;
    Py_RETURN_NONE;
}

PyObject *lane_write_counts(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return Py_BuildValue("{sKsK}", "packets", written_packets, "runs", handed_runs);
}

void lane_write_reset(void) {
    written_packets = handed_runs = 0;
}
