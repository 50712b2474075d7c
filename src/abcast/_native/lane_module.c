/* abcast._lane: the native lane's first frame kinds (docs/performance.md §5, step 3) —
   a sequencer's steady frames at a member, each frame's whole stack step in one C call.

   receive(frame, peer, lanes, now) -> (tag, outputs) | None
       `lanes` maps a group's name to (tag, stack); `stack` is a runtime-shaped sequencer
       stack (abcast.runtime.lane.eligible: OpenDetector, OpenChannel, Membership over a
       Sequencer). For a frame from `peer` of the two kinds below that the Python path
       would take by its shortcuts and steady checks, it does what
       `stack.receive(decode_envelope(frame), now)` does and returns the tag and the
       outputs that call returns (deliveries only: these frames at a member emit nothing
       else). For anything else it returns None having changed nothing, and the caller
       runs the Python path, which handles or refuses the frame as before.
         - the sequencer's order (steady_wire.h's `[Fd, RData, SOrder]`, no bodies);
         - another member's data (`[Fd, RData, SData]`) at a member that is not the
           sequencer (at the sequencer, data causes an order: not here yet).
   broadcast(stack, payload, now) -> outputs | None
       `stack.broadcast(payload, now)[1]` for a steady broadcast of such a stack, or None
       having changed nothing (the caller runs `stack.broadcast`).
   pump(connection, data, node) -> bool: a tcp:// read's whole frames to `receive`
       (lane_pump.c, with its rules); pump_counts() -> {"reads", "frames", "passed": n}
   carry_out(driver, outputs, now): a lane step's outputs to its driver, its packets
       written by C where tcp:// would write them at once (lane_write.c, with its rules);
       write_counts() -> {"packets", "runs": n}
   counts() -> {"taken", "frames", "broadcasts", "declined": n}; reset_counts()
   plant(k): a planted bug for the differential test (tests/unit/test_native_lane.py),
       0 for none; PLANTS names them.
   SOURCE_HASH: the hash of the C sources it was built from (native_sources.py).

   Rules. The Python objects are the only state: the lane reads and writes the same
   attributes the Python layers do (no copy, nothing to hand back). Every check comes
   before the first change, so a decline leaves no trace. A stack of another shape
   (layers not exactly OpenDetector, OpenChannel, Membership over a Sequencer: another
   ordering, channel or detector) is declined by its layers' types before any of their
   attributes is read, by `receive` and `broadcast` alike: the lane never raises for a
   stack `eligible` refuses (it once raised AttributeError for one). What it does, in the
   Python path's order:
     - the failure detector's `pass_up`: a known peer, not suspected, no claim -> its
       `last_heard` stamped;
     - the reliable channel's `pass_up`: tick set, a steady member, no hole, the next
       seq, an owed ack not falling due after the tick; a carried ack below `next_seq`
       with nothing waiting for credit -> `_on_ack` (the acked prefix dropped, progress
       stamped, the oldest first transmission timed: `RtoEstimator.sample`'s arithmetic,
       in C; the RTO mark cleared when nothing is left) -> `high` + 1, an ack owed;
     - the membership layer's steady check (member or leaving, not frozen, the sender in
       its view) -> `s.now`;
     - the sequencer (no optimistic, safe or causal option; the sender in its view and
       not itself) -> `st.now`, then for an order from the view's leader
       `sequencer_numbering.on_order` (a number already known as another id: declined,
       the Python path refuses it), for data at a member `on_data` (a body new here is
       kept), and `deliver_ready`.
   Where a Python layer changes, the lane changes with it: the differential test runs
   both on one history and compares every output and every state.

   The files: this one (the rules, `receive`, `broadcast`, the counts, the planted bugs,
   the module); lane_pump.c (a tcp:// read's frames to `receive`); lane_write.c (a step's
   packets written); lane_steps.c (the layers' steps both share); lane_objects.c (the names,
   the types and the helpers on Python objects); lane.h (what they share). */

#include "lane.h"


#ifndef ABCAST_STEADY_SOURCE_HASH
#define ABCAST_STEADY_SOURCE_HASH "unknown"
#endif

static const char *const PLANT_NAMES[PLANT_COUNT] = {
    "none", "the detector's last_heard not stamped", "the channel's ack not marked owed",
    "a delivered number left in st.numbers", "a carried ack's progress_at not set",
    "an order renumbering a known number taken", "a member's data at a member not kept",
    "the order's piggybacked ack left owed", "the order's sends not stamped",
};

int lane_planted = PLANT_NONE;
static unsigned long long frames_taken, broadcasts_taken, declined;

PyObject *lane_receive(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "receive(frame, peer, lanes, now) takes 4 arguments");
        return NULL;
    }
    PyObject *frame = args[0], *peer = args[1], *lanes = args[2], *now_obj = args[3];
    if (!PyDict_Check(lanes)) {
        PyErr_SetString(PyExc_TypeError, "receive: lanes must be a dict");
        return NULL;
    }
    long long now;
    if (as_ll(now_obj, &now) < 0) return NULL;

    held_refs h = {.n = 0}, *hp = &h;
    PyObject *outputs = NULL;
    sw_frame f;
    if (!PyBytes_Check(frame) || !PyUnicode_Check(peer)
        || !sw_parse((const uint8_t *)PyBytes_AS_STRING(frame),
                     (size_t)PyBytes_GET_SIZE(frame), &f)
        || !utf8_equals(peer, f.sender))
        DECLINE();

    /* The group's lane: a node hosts a few groups, so a scan beats building a str. */
    PyObject *entry = NULL, *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(lanes, &pos, &key, &value)) {
        if (PyUnicode_Check(key) && utf8_equals(key, f.group)) {
            entry = value;
            break;
        }
    }
    if (entry == NULL || !PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) DECLINE();
    /* Strong references to what the dicts lend (entry, the peer's detector record, its
       links): Python code may run below (a collection's finalizers). */
    if (hold(hp, Py_NewRef(entry)) == NULL) goto error;
    PyObject *tag = PyTuple_GET_ITEM(entry, 0), *stack = PyTuple_GET_ITEM(entry, 1);

    /* --- the checks: nothing changes before all pass ---------------------------------- */
    PyObject *o, *layers;
    int truth;
    GET(o, stack, _pass_up);
    if (o == Py_None) DECLINE();
    GET(o, stack, _pass_up2);
    if (o == Py_None) DECLINE();
    GET(o, stack, _pass_down_each);
    if (o == Py_None) DECLINE();
    GET(layers, stack, layers);
    if (!PyList_Check(layers) || PyList_GET_SIZE(layers) != 3) DECLINE();
    PyObject *detector = PyList_GET_ITEM(layers, 0), *channel = PyList_GET_ITEM(layers, 1),
             *membership = PyList_GET_ITEM(layers, 2);
    if (!lane_layers_shaped(detector, channel, membership)) DECLINE();  /* not `eligible` */

    /* the failure detector's pass_up */
    PyObject *ds, *peers, *pst;
    GET(ds, detector, _s);
    GET(peers, ds, peers);
    if (!PyDict_Check(peers)) DECLINE();
    truth = held_item(hp, peers, peer, &pst);
    if (truth <= 0) goto check_failed;
    GET(o, pst, suspected);
    TRUTH(truth, o);
    if (truth) DECLINE();
    GET(o, pst, claim);
    if (o != Py_None) DECLINE();

    /* the reliable channel's pass_up */
    PyObject *in_links, *link, *out = NULL;
    long long high, tick_at, tick_period;
    int ack_armed;
    GET(o, channel, _tick_set);
    TRUTH(truth, o);
    if (!truth) DECLINE();
    GET(o, channel, _steady);
    truth = PySequence_Contains(o, peer);
    if (truth < 0) goto error;
    if (!truth) DECLINE();
    GET(in_links, channel, _in);
    if (!PyDict_Check(in_links)) DECLINE();
    truth = held_item(hp, in_links, peer, &link);
    if (truth <= 0) goto check_failed;
    GET(o, link, above);
    TRUTH(truth, o);
    if (truth) DECLINE();
    GET(o, link, high);
    if (as_ll(o, &high) < 0) goto error;
    if (f.rdata_seq != (unsigned long long)high + 1) DECLINE();
    GET(o, link, ack_armed);
    TRUTH(ack_armed, o);
    if (!ack_armed) {
        GET(o, channel, _tick_at);
        if (as_ll(o, &tick_at) < 0) goto error;
        GET(o, channel, _tick_period);
        if (as_ll(o, &tick_period) < 0) goto error;
        if (tick_at > now + tick_period) DECLINE();
    }
    if (f.rdata_ack) {
        PyObject *out_links;
        GET(out_links, channel, _out);
        if (!PyDict_Check(out_links)) DECLINE();
        truth = held_item(hp, out_links, peer, &out);
        if (truth < 0) goto error;
        if (truth) {
            long long next_seq;
            GET(o, out, next_seq);
            if (as_ll(o, &next_seq) < 0) goto error;
            if (f.rdata_ack >= (unsigned long long)next_seq) DECLINE();
            GET(o, out, waiting);
            TRUTH(truth, o);
            if (truth) DECLINE();
        }
    }

    /* the membership layer's steady check, the sender in its view */
    PyObject *ms, *mview;
    truth = lane_member_steady(hp, membership, &ms);
    if (truth <= 0) goto check_failed;
    GET(mview, ms, view);
    if (mview == Py_None) DECLINE();
    GET(o, mview, members);
    truth = PySequence_Contains(o, peer);
    if (truth < 0) goto error;
    if (!truth) DECLINE();

    /* the sequencer's steady state: no option but the plain one's */
    lane_seq q;
    truth = lane_sequencer_plain(hp, membership, &q);
    if (truth <= 0) goto check_failed;
    PyObject *st = q.st, *smembers = q.members, *me = q.me, *numbers = q.numbers,
             *bodies = q.bodies, *delivered = q.delivered, *log = q.log, *deps_of = q.deps_of;
    long long next_delivery = q.next_delivery;
    PyObject *leader = PyTuple_GET_ITEM(smembers, 0);  /* view.leader */
    int at_leader = 0;
    if (!PyUnicode_Check(leader)) DECLINE();
    if (PyUnicode_Compare(me, peer) == 0) DECLINE();  /* the Python path refuses it */
    if (f.kind == SW_KIND_ORDER) {
        if (PyUnicode_Compare(leader, peer) != 0) DECLINE();  /* a former sequencer's */
    } else {
        truth = PySequence_Contains(smembers, peer);
        if (truth < 0) goto error;
        if (!truth) DECLINE();
        at_leader = PyUnicode_Compare(leader, me) == 0;  /* data in, an order out */
    }
    if (PyErr_Occurred()) goto error;
    const uint8_t *cursor = f.ids;
    sw_id id;
    PyObject *data_id = NULL;  /* a member's data: its MsgId, if its body is new here */
    if (f.kind == SW_KIND_DATA) {
        long long done = 0;
        PyObject *seen = PyDict_GetItemWithError(delivered, peer);
        if (seen == NULL && PyErr_Occurred()) goto error;
        if (seen != NULL && as_ll(seen, &done) < 0) goto error;
        if (f.seq > (unsigned long long)done) {
            data_id = hold(&h, lane_new_msgid(peer, (long long)f.seq));
            if (data_id == NULL) goto error;
            truth = PyDict_Contains(bodies, data_id);
            if (truth < 0) goto error;
            if (truth) data_id = NULL;  /* sent again: idempotent (still held by h) */
        }
    }
    links_out order = {.n = 0};  /* at the sequencer: the order this data causes */
    numbering nb = {.released = NULL};
    if (at_leader && data_id != NULL) {
        truth = lane_check_admit(&nb, hp, st, peer, f.seq);
        if (truth > 0) truth = lane_size_fits(hp, channel, lane_SOrderType, 0);
        if (truth > 0) {
            GET(o, st, others);
            truth = lane_check_links(&order, hp, stack, detector, channel, o, 1);
        }
        if (truth < 0) goto error;
        if (!truth) DECLINE();
    }
    if (f.seq + f.n_ids > ((uint64_t)1 << 62) + SW_MAX_ORDER_IDS) DECLINE();  /* (bounded) */
    for (size_t i = 0; i < f.n_ids; i++) {
        if (!sw_next_id(&cursor, f.ids_end, &id)) DECLINE();
        long long at = (long long)(f.seq + i);
        if (at < next_delivery || lane_planted == PLANT_ACCEPT_CONFLICT) continue;
        PyObject *at_obj = PyLong_FromLongLong(at);
        if (at_obj == NULL) goto error;
        PyObject *known = PyDict_GetItemWithError(numbers, at_obj);
        Py_DECREF(at_obj);
        int same = 1;
        if (known == NULL) {
            if (PyErr_Occurred()) goto error;
        } else if ((same = lane_same_id(known, id)) < 0) {
            goto error;
        }
        if (!same) DECLINE();  /* the Python path refuses it */
    }

    /* --- the changes, in the Python path's order -------------------------------------- */
    if (lane_planted != PLANT_NO_STAMP
        && lane_setattr(pst, ATTR(last_heard), now_obj) < 0)
        goto error;
    if (out != NULL && lane_channel_on_ack(out, f.rdata_ack, now_obj, now) < 0) goto error;
    if (set_int(link, ATTR(high), high + 1) < 0) goto error;
    if (!ack_armed) {
        if (lane_planted != PLANT_NO_ACK_OWED
            && lane_setattr(link, ATTR(ack_armed), Py_True) < 0)
            goto error;
        if (lane_setattr(link, ATTR(ack_aged), Py_False) < 0) goto error;
    }
    if (lane_setattr(ms, ATTR(now), now_obj) < 0) goto error;
    if (lane_setattr(st, ATTR(now), now_obj) < 0) goto error;

    /* sequencer_numbering.on_data at a member: the body kept */
    if (data_id != NULL && lane_planted != PLANT_DATA_DROPPED) {
        PyObject *payload = PyBytes_FromStringAndSize((const char *)f.payload,
                                                      (Py_ssize_t)f.payload_len);
        int rc = payload == NULL ? -1 : PyDict_SetItem(bodies, data_id, payload);
        Py_XDECREF(payload);
        if (rc < 0) goto error;
    }

    /* sequencer_numbering.on_order (no ids for data) */
    cursor = f.ids;
    for (size_t i = 0; i < f.n_ids; i++) {
        sw_next_id(&cursor, f.ids_end, &id);  /* (read once above) */
        long long at = (long long)(f.seq + i);
        if (at < next_delivery) continue;
        PyObject *origin = lane_node_str(smembers, id.node);
        if (origin == NULL) goto error;
        PyObject *mid = lane_new_msgid(origin, (long long)id.seq);
        Py_DECREF(origin);
        if (mid == NULL) goto error;
        PyObject *at_obj = PyLong_FromLongLong(at);
        int rc = at_obj == NULL ? -1 : PyDict_SetItem(numbers, at_obj, mid);
        Py_XDECREF(at_obj);
        Py_DECREF(mid);
        if (rc < 0) goto error;
    }

    outputs = PyList_New(0);
    if (outputs == NULL) goto error;
    PyObject *frames = NULL;  /* the sequencer's order to the others, after the deliveries */
    if (order.n) {
        long long first;
        unsigned long long rseq[MAX_OTHERS], rack[MAX_OTHERS];
        sw_id ordered = {.node = f.sender, .seq = f.seq};
        PyObject *packet = hold(hp, lane_announce_one(&nb, st, peer, f.seq, &first));
        frames = hold(hp, PyList_New(0));
        if (packet == NULL || frames == NULL
            || lane_number_links(&order, packet, now_obj, now, rseq, rack) < 0
            || lane_add_frames(&order, frames, rseq, rack, (unsigned long long)first, &ordered,
                               NULL, 0, now_obj) < 0)
            goto error;
    }
    if (f.kind == SW_KIND_DATA && data_id == NULL) goto done;  /* on_data: [] */

    if (lane_deliver_ready(st, numbers, bodies, delivered, log, deps_of, next_delivery, outputs)
        < 0)
        goto error;
    if (frames != NULL) {
        Py_ssize_t end = PyList_GET_SIZE(outputs);
        if (PyList_SetSlice(outputs, end, end, frames) < 0) goto error;
    }

done:
    release(&h);
    frames_taken++;
    PyObject *result = PyTuple_Pack(2, tag, outputs);
    Py_DECREF(outputs);
    return result;

check_failed:  /* a shared check's answer: 0 declines, -1 is an error */
    if (truth < 0) goto error;
decline:
    release(&h);
    declined++;
    Py_RETURN_NONE;
error:
    release(&h);
    Py_XDECREF(outputs);
    return NULL;
}

/* broadcast(stack, payload, now): `stack.broadcast(payload, now)[1]` for a steady
   broadcast (see the rules), or None having changed nothing. */
static PyObject *lane_broadcast(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "broadcast(stack, payload, now) takes 3 arguments");
        return NULL;
    }
    PyObject *stack = args[0], *payload = args[1], *now_obj = args[2];
    long long now;
    if (as_ll(now_obj, &now) < 0) return NULL;
    held_refs h = {.n = 0}, *hp = &h;
    PyObject *outputs = NULL, *o, *layers, *ms, *others;
    int truth;
    long long seq;
    if (!PyBytes_Check(payload)) DECLINE();
    GET(o, stack, _pass_down_each);
    if (o == Py_None) DECLINE();
    GET(o, stack, _pass_down);
    if (o == Py_None) DECLINE();
    GET(layers, stack, layers);
    if (!PyList_Check(layers) || PyList_GET_SIZE(layers) != 3) DECLINE();
    PyObject *detector = PyList_GET_ITEM(layers, 0), *channel = PyList_GET_ITEM(layers, 1),
             *membership = PyList_GET_ITEM(layers, 2);
    if (!lane_layers_shaped(detector, channel, membership)) DECLINE();  /* not `eligible` */
    GET(o, channel, _tick_set);  /* pass_down_each's first test (else _transmit sets it) */
    TRUTH(truth, o);
    if (!truth) DECLINE();
    GET(o, stack, _next_seq);
    if (as_ll(o, &seq) < 0) goto error;
    /* the membership layer's steady check, the sequencer's plain state (not relay) */
    lane_seq q;
    truth = lane_member_steady(hp, membership, &ms);
    if (truth > 0) truth = lane_sequencer_plain(hp, membership, &q);
    if (truth <= 0) goto check_failed;
    GET(o, q.st, relay);
    TRUTH(truth, o);
    if (truth) DECLINE();
    PyObject *st = q.st, *me = q.me, *numbers = q.numbers, *bodies = q.bodies,
             *delivered = q.delivered, *log = q.log, *deps_of = q.deps_of;
    long long next_delivery = q.next_delivery;
    truth = PyUnicode_Compare(PyTuple_GET_ITEM(q.members, 0), me);
    if (truth == -1 && PyErr_Occurred()) goto error;
    int at_leader = truth == 0;
    GET(others, st, others);
    links_out down = {.n = 0};
    numbering nb = {.released = NULL};
    truth = lane_size_fits(hp, channel, lane_SDataType, PyBytes_GET_SIZE(payload));
    if (truth > 0 && at_leader) {
        truth = lane_check_admit(&nb, hp, st, me, (unsigned long long)seq);
        if (truth > 0) truth = lane_size_fits(hp, channel, lane_SOrderType, 0);
    }
    if (truth > 0) truth = lane_check_links(&down, hp, stack, detector, channel, others,
                                            at_leader ? 2 : 1);
    if (truth > 0) truth = !PySequence_Contains(others, down.me);  /* `me not in dests` */
    if (truth < 0) goto error;
    if (!truth) DECLINE();

    /* --- the changes, in the Python path's order ------------------------------------ */
    unsigned long long rseq[MAX_OTHERS], rack[MAX_OTHERS];
    PyObject *seq_obj = hold(hp, PyLong_FromLongLong(seq));
    PyObject *mid = hold(hp, lane_new_msgid(me, seq));
    if (seq_obj == NULL || mid == NULL || set_int(stack, ATTR(_next_seq), seq + 1) < 0
        || lane_setattr(ms, ATTR(now), now_obj) < 0
        || lane_setattr(st, ATTR(now), now_obj) < 0
        || lane_setattr(st, ATTR(sent), seq_obj) < 0
        || PyDict_SetItem(bodies, mid, payload) < 0)
        goto error;
    PyObject *data = hold(hp, PyObject_Vectorcall(lane_SDataType, &seq_obj, 1, NULL));
    PyObject *data_packet = data ? hold(hp, lane_one_header_packet(data, payload)) : NULL;
    if (data_packet == NULL) goto error;
    PyObject *order_packet = NULL;
    long long first = 0;
    outputs = PyList_New(0);
    if (outputs == NULL) goto error;
    if (at_leader) {  /* admit + number: its order, and its delivery here */
        order_packet = hold(hp, lane_announce_one(&nb, st, me, (unsigned long long)seq, &first));
        if (order_packet == NULL
            || lane_deliver_ready(st, numbers, bodies, delivered, log, deps_of, next_delivery,
                                  outputs) < 0)
            goto error;
    }
    if (lane_number_links(&down, data_packet, now_obj, now, rseq, rack) < 0
        || lane_add_frames(&down, outputs, rseq, rack, (unsigned long long)seq, NULL,
                           PyBytes_AS_STRING(payload), PyBytes_GET_SIZE(payload), now_obj) < 0)
        goto error;
    if (order_packet != NULL) {
        Py_ssize_t me_len;
        const char *me_utf8 = PyUnicode_AsUTF8AndSize(me, &me_len);
        if (me_utf8 == NULL) goto error;
        sw_id ordered = {.node = {me_utf8, (size_t)me_len}, .seq = (uint64_t)seq};
        if (lane_number_links(&down, order_packet, now_obj, now, rseq, rack) < 0
            || lane_add_frames(&down, outputs, rseq, rack, (unsigned long long)first, &ordered,
                               NULL, 0, now_obj) < 0)
            goto error;
    }
    release(&h);
    broadcasts_taken++;
    return outputs;

check_failed:  /* a shared check's answer: 0 declines, -1 is an error */
    if (truth < 0) goto error;
decline:
    release(&h);
    declined++;
    Py_RETURN_NONE;
error:
    release(&h);
    Py_XDECREF(outputs);
    return NULL;
}

static PyObject *lane_counts(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return Py_BuildValue("{sKsKsKsK}", "taken", frames_taken + broadcasts_taken, "frames",
                         frames_taken, "broadcasts", broadcasts_taken, "declined", declined);
}

static PyObject *lane_reset_counts(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    frames_taken = broadcasts_taken = declined = 0;
    lane_pump_reset();
    lane_write_reset();
    Py_RETURN_NONE;
}

static PyObject *lane_plant(PyObject *module, PyObject *arg) {
    (void)module;
    long k = PyLong_AsLong(arg);
    if (k == -1 && PyErr_Occurred()) return NULL;
    if (k < 0 || k >= PLANT_COUNT) {
        PyErr_Format(PyExc_ValueError, "plant: no planted bug %ld (0 to %d)", k,
                     PLANT_COUNT - 1);
        return NULL;
    }
    lane_planted = (int)k;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"receive", (PyCFunction)(void (*)(void))lane_receive, METH_FASTCALL,
     "receive(frame, peer, lanes, now) -> (tag, outputs) | None: a sequencer's steady "
     "frame at a member, its whole stack step (see the module's source for the rules)"},
    {"broadcast", (PyCFunction)(void (*)(void))lane_broadcast, METH_FASTCALL,
     "broadcast(stack, payload, now) -> outputs | None: a steady broadcast's whole stack "
     "step (see the module's source for the rules)"},
    {"pump", (PyCFunction)(void (*)(void))lane_pump, METH_FASTCALL,
     "pump(inbound, data, node) -> bool: a tcp:// read's whole frames to `receive` and "
     "their outputs to the driver, as the Python path does (see lane_pump.c)"},
    {"pump_counts", lane_pump_counts, METH_NOARGS,
     "{'reads', 'frames', 'passed': n}: reads pumped, frames stepped by them, reads passed "
     "to the Python path, since the last reset_counts"},
    {"carry_out", (PyCFunction)(void (*)(void))lane_carry_out_py, METH_FASTCALL,
     "carry_out(driver, outputs, now): a lane step's outputs carried out, its packets "
     "written here where tcp:// would write them at once (see lane_write.c)"},
    {"backpressured", lane_backpressured, METH_O,
     "backpressured(stack) -> bool | None: stack.backpressured() for the lane's stack "
     "shape, None for another (see lane_write.c)"},
    {"write_counts", lane_write_counts, METH_NOARGS,
     "{'packets', 'runs': n}: packets carry_out wrote, steps it wrote them for"},
    {"counts", lane_counts, METH_NOARGS,
     "{'taken', 'frames', 'broadcasts', 'declined': n} since the last reset"},
    {"reset_counts", lane_reset_counts, METH_NOARGS, "zero the counts"},
    {"plant", lane_plant, METH_O, "plant(k): planted bug k for the tests (0: none)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "abcast._lane",
    "The native lane: a steady frame's whole stack step in C (docs/performance.md §5).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__lane(void) {
    if (lane_objects_init() < 0 || lane_pump_init() < 0 || lane_write_init() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    PyObject *plants = PyDict_New();
    if (plants == NULL) goto fail;
    for (int k = 0; k < PLANT_COUNT; k++) {
        PyObject *key = PyLong_FromLong(k), *name = PyUnicode_FromString(PLANT_NAMES[k]);
        int rc = key && name ? PyDict_SetItem(plants, key, name) : -1;
        Py_XDECREF(key);
        Py_XDECREF(name);
        if (rc < 0) {
            Py_DECREF(plants);
            goto fail;
        }
    }
    if (PyModule_AddObject(m, "PLANTS", plants) < 0) {
        Py_DECREF(plants);
        goto fail;
    }
    if (PyModule_AddStringConstant(m, "SOURCE_HASH", ABCAST_STEADY_SOURCE_HASH) < 0) goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
