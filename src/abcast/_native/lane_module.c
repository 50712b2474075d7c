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
   counts() -> {"taken", "frames", "broadcasts", "declined": n}; reset_counts()
   plant(k): a planted bug for the differential test (tests/unit/test_native_lane.py),
       0 for none; PLANTS names them.
   SOURCE_HASH: the hash of the C sources it was built from (native_sources.py).

   Rules. The Python objects are the only state: the lane reads and writes the same
   attributes the Python layers do (no copy, nothing to hand back). Every check comes
   before the first change, so a decline leaves no trace. What it does, in the Python
   path's order:
     - the failure detector's `pass_up`: a known peer, not suspected, no claim -> its
       `last_heard` stamped;
     - the reliable channel's `pass_up`: tick set, a steady member, no hole, the next
       seq, an owed ack not falling due after the tick; a carried ack below `next_seq`
       with nothing waiting for credit -> `_on_ack` (the acked prefix dropped, progress
       stamped, the oldest first transmission timed by `timer.sample`, the RTO mark
       cleared when nothing is left) -> `high` + 1, an ack owed;
     - the membership layer's steady check (member or leaving, not frozen, the sender in
       its view) -> `s.now`;
     - the sequencer (no optimistic, safe or causal option; the sender in its view and
       not itself) -> `st.now`, then for an order from the view's leader
       `sequencer_numbering.on_order` (a number already known as another id: declined,
       the Python path refuses it), for data at a member `on_data` (a body new here is
       kept), and `deliver_ready`.
   Where a Python layer changes, this file changes with it: the differential test runs
   both on one history and compares every output and every state. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "steady_wire.h"

#ifndef ABCAST_STEADY_SOURCE_HASH
#define ABCAST_STEADY_SOURCE_HASH "unknown"
#endif

enum {
    PLANT_NONE,
    PLANT_NO_STAMP,        /* the detector's last_heard not stamped */
    PLANT_NO_ACK_OWED,     /* the channel's ack not marked owed */
    PLANT_KEEP_NUMBER,     /* a delivered number left in st.numbers */
    PLANT_NO_PROGRESS,     /* a carried ack's progress_at not set */
    PLANT_ACCEPT_CONFLICT, /* a number known as another id taken */
    PLANT_DATA_DROPPED,    /* a member's data not kept */
    PLANT_ACK_KEPT_OWED,   /* the order's piggybacked ack left owed */
    PLANT_NO_LAST_SENT,    /* the detector's last_sent not stamped for the order */
    PLANT_COUNT
};

static const char *const PLANT_NAMES[PLANT_COUNT] = {
    "none", "the detector's last_heard not stamped", "the channel's ack not marked owed",
    "a delivered number left in st.numbers", "a carried ack's progress_at not set",
    "an order renumbering a known number taken", "a member's data at a member not kept",
    "the order's piggybacked ack left owed", "the order's sends not stamped",
};

static int plant = PLANT_NONE;
static unsigned long long frames_taken, broadcasts_taken, declined;

/* Interned attribute names and the two types the lane builds (set at import). */
static struct {
    PyObject *_pass_up, *_pass_up2, *_pass_down_each, *layers;
    PyObject *_s, *peers, *suspected, *claim, *last_heard;
    PyObject *_tick_set, *_tick_at, *_tick_period, *_steady, *_in, *_out;
    PyObject *above, *high, *ack_armed, *ack_aged;
    PyObject *next_seq, *waiting, *unacked, *tries, *sent, *progress_at, *timer, *sample,
        *rto_armed_at;
    PyObject *s, *status, *frozen, *view, *members, *now, *ordering;
    PyObject *st, *optimistic, *safe, *causal, *node, *numbers, *bodies, *delivered, *log,
        *deps_of, *next_delivery;
    PyObject *member, *leaving;
    PyObject *relay, *order_interval_us, *interval_ids, *next_number, *stable, *max_unstable,
        *admission, *_released, *_waiting, *_held, *others, *order_packets;
    PyObject *_bounds, *_room, *config, *window, *_piggyback, *rto, *last_sent, *group;
    PyObject *_pass_down, *_next_seq;
} N;

static PyTypeObject *MsgIdType;  /* abcast.ids.MsgId: a NamedTuple (a tuple subclass) */
static PyObject *DeliverType;    /* abcast.effects.Deliver */
static PyObject *TransmitType;   /* abcast.effects.Transmit */
static PyObject *PacketType;     /* abcast.codec.Packet */
static PyObject *SOrderType;     /* abcast.ordering.sequencer_wire.SOrder */
static PyObject *SDataType;      /* abcast.ordering.sequencer_wire.SData */
static PyObject *PendingType;    /* abcast.reliability.channel._Pending */

/* New references taken during one call, released at its end. */
#define MAX_HELD 256  /* (a call holds ~40, and ~5 per destination) */
typedef struct {
    PyObject *items[MAX_HELD];
    int n;
} held_refs;

static PyObject *hold(held_refs *h, PyObject *o) {
    if (o == NULL) return NULL;
    if (h->n == MAX_HELD) {
        Py_DECREF(o);
        PyErr_SetString(PyExc_SystemError, "abcast._lane: too many references held");
        return NULL;
    }
    h->items[h->n++] = o;
    return o;
}

static void release(held_refs *h) {
    while (h->n) Py_DECREF(h->items[--h->n]);
}

/* getattr(obj, name) as a reference held until the call ends; NULL with an error set. */
#define GET(dst, obj, name)                                   \
    do {                                                      \
        (dst) = hold(hp, PyObject_GetAttr((obj), N.name));    \
        if ((dst) == NULL) goto error;                        \
    } while (0)

/* truthiness, or -1 with an error set */
#define TRUTH(dst, obj)                                       \
    do {                                                      \
        (dst) = PyObject_IsTrue(obj);                         \
        if ((dst) < 0) goto error;                            \
    } while (0)

#define DECLINE() goto decline

static int utf8_equals(PyObject *str, sw_str s) {
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(str, &n);
    if (u == NULL) {
        PyErr_Clear();  /* a str with surrogates matches no frame's string */
        return 0;
    }
    return (size_t)n == s.len && memcmp(u, s.ptr, s.len) == 0;
}

/* A Python int as long long; -1 with an error set if it is not an int or too large. */
static int as_ll(PyObject *o, long long *out) {
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "abcast._lane: expected an int, got %R", o);
        return -1;
    }
    *out = PyLong_AsLongLong(o);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int set_int(PyObject *obj, PyObject *name, long long value) {
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL) return -1;
    int rc = PyObject_SetAttr(obj, name, v);
    Py_DECREF(v);
    return rc;
}

/* MsgId(origin, seq): tuple.__new__'s work for a tuple subclass, without its argument
   tuple. Steals nothing; NULL with an error set. */
static PyObject *new_msgid(PyObject *origin, long long seq) {
    PyObject *s = PyLong_FromLongLong(seq);
    if (s == NULL) return NULL;
    PyObject *mid = MsgIdType->tp_alloc(MsgIdType, 2);
    if (mid == NULL) {
        Py_DECREF(s);
        return NULL;
    }
    Py_INCREF(origin);
    PyTuple_SET_ITEM(mid, 0, origin);
    PyTuple_SET_ITEM(mid, 1, s);
    return mid;
}

/* Packet((header,), payload or b"") (new), or NULL with an error set. */
static PyObject *one_header_packet(PyObject *header, PyObject *payload) {
    PyObject *headers = PyTuple_Pack(1, header);
    PyObject *body = payload ? Py_NewRef(payload) : PyBytes_FromStringAndSize(NULL, 0);
    PyObject *packet = NULL;
    if (headers != NULL && body != NULL) {
        PyObject *args[2] = {headers, body};
        packet = PyObject_Vectorcall(PacketType, args, 2, NULL);
    }
    Py_XDECREF(headers);
    Py_XDECREF(body);
    return packet;
}

/* The id's node as a str: the view's own object when it is a member (no new string). */
static PyObject *node_str(PyObject *members, sw_str node) {
    Py_ssize_t n = PyTuple_GET_SIZE(members);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = PyTuple_GET_ITEM(members, i);
        if (PyUnicode_Check(m) && utf8_equals(m, node)) {
            Py_INCREF(m);
            return m;
        }
    }
    return PyUnicode_DecodeUTF8(node.ptr, (Py_ssize_t)node.len, NULL);
}

/* Is the MsgId `known` the id (node, seq)? -1 with an error set. */
static int same_id(PyObject *known, sw_id id) {
    if (!PyTuple_Check(known) || PyTuple_GET_SIZE(known) != 2) {
        PyErr_Format(PyExc_TypeError, "abcast._lane: a number's id is %R", known);
        return -1;
    }
    PyObject *origin = PyTuple_GET_ITEM(known, 0);
    long long seq;
    if (as_ll(PyTuple_GET_ITEM(known, 1), &seq) < 0) return -1;
    return PyUnicode_Check(origin) && utf8_equals(origin, id.node)
           && (unsigned long long)seq == id.seq;
}

/* The channel's `_on_ack(peer, ack, [], now)` for an ack `pass_up` lets through (below
   next_seq, nothing waiting): its result is [] there and ignored. */
static int channel_on_ack(PyObject *out, unsigned long long ack, PyObject *now_obj,
                          long long now) {
    held_refs h = {.n = 0}, *hp = &h;
    PyObject *unacked, *timed = NULL;
    GET(unacked, out, unacked);
    if (!PyDict_Check(unacked)) {
        PyErr_SetString(PyExc_TypeError, "abcast._lane: unacked is not a dict");
        goto error;
    }
    /* Keys were inserted in increasing order: the acked ones are a prefix. */
    Py_ssize_t pos = 0, acked = 0;
    PyObject *key, *pending;
    while (PyDict_Next(unacked, &pos, &key, &pending)) {
        long long seq;
        if (as_ll(key, &seq) < 0) goto error;
        if ((unsigned long long)seq > ack) break;
        acked++;
        if (timed == NULL) {
            PyObject *tries = PyObject_GetAttr(pending, N.tries);
            if (tries == NULL) goto error;
            int tried = PyObject_IsTrue(tries);
            Py_DECREF(tries);
            if (tried < 0) goto error;
            if (!tried) timed = hold(&h, Py_NewRef(pending));
            if (!tried && timed == NULL) goto error;
        }
    }
    if (acked) {
        if (plant != PLANT_NO_PROGRESS && PyObject_SetAttr(out, N.progress_at, now_obj) < 0)
            goto error;
        PyObject *keys = hold(&h, PyList_New(acked));
        if (keys == NULL) goto error;
        pos = 0;
        for (Py_ssize_t i = 0; i < acked; i++) {
            if (!PyDict_Next(unacked, &pos, &key, &pending)) break;
            PyList_SET_ITEM(keys, i, Py_NewRef(key));
        }
        for (Py_ssize_t i = 0; i < acked; i++)
            if (PyDict_DelItem(unacked, PyList_GET_ITEM(keys, i)) < 0) goto error;
    }
    if (timed != NULL) {
        PyObject *sent, *timer;
        long long sent_at;
        GET(sent, timed, sent);
        if (as_ll(sent, &sent_at) < 0) goto error;
        GET(timer, out, timer);
        PyObject *rtt = hold(&h, PyLong_FromLongLong(now - sent_at));
        if (rtt == NULL) goto error;
        if (hold(&h, PyObject_CallMethodOneArg(timer, N.sample, rtt)) == NULL) goto error;
    }
    if (PyDict_GET_SIZE(unacked) == 0) {
        PyObject *armed;
        GET(armed, out, rto_armed_at);
        if (armed != Py_None && PyObject_SetAttr(out, N.rto_armed_at, Py_None) < 0) goto error;
    }
    release(&h);
    return 0;
error:
    release(&h);
    return -1;
}


/* sequencer_numbering.deliver_ready (not SAFE: no limit): what holds number and body, in
   number order, appended to `outputs` as Deliver; 0, or -1 with an error set. */
static int deliver_ready(PyObject *st, PyObject *numbers, PyObject *bodies,
                         PyObject *delivered, PyObject *log, PyObject *deps_of,
                         long long next_delivery, PyObject *outputs) {
    long long at = next_delivery;
    for (;; at++) {
        PyObject *at_obj = PyLong_FromLongLong(at);
        if (at_obj == NULL) return -1;
        PyObject *mid = PyDict_GetItemWithError(numbers, at_obj);
        if (mid == NULL) {
            Py_DECREF(at_obj);
            if (PyErr_Occurred()) return -1;
            break;
        }
        int has = PyDict_Contains(bodies, mid);
        if (has <= 0) {
            Py_DECREF(at_obj);
            if (has < 0) return -1;
            break;
        }
        Py_INCREF(mid);
        PyObject *body = NULL, *deliver = NULL, *entry_ = NULL;
        int rc = -1;
        if (plant != PLANT_KEEP_NUMBER && PyDict_DelItem(numbers, at_obj) < 0) goto step_end;
        if (!PyTuple_Check(mid) || PyTuple_GET_SIZE(mid) != 2) {
            PyErr_SetString(PyExc_TypeError, "abcast._lane: a number's id is not a MsgId");
            goto step_end;
        }
        PyObject *origin = PyTuple_GET_ITEM(mid, 0), *seq = PyTuple_GET_ITEM(mid, 1);
        if (PyDict_SetItem(delivered, origin, seq) < 0) goto step_end;
        body = PyDict_GetItemWithError(bodies, mid);
        if (body == NULL) goto step_end;
        Py_INCREF(body);
        if (PyDict_DelItem(bodies, mid) < 0) goto step_end;
        PyObject *fields[3] = {origin, seq, body};
        deliver = PyObject_Vectorcall(DeliverType, fields, 3, NULL);
        if (deliver == NULL || PyList_Append(outputs, deliver) < 0) goto step_end;
        entry_ = PyTuple_Pack(2, mid, body);
        if (entry_ == NULL || PyDict_SetItem(log, at_obj, entry_) < 0) goto step_end;
        if (PyDict_GET_SIZE(deps_of)) {  /* deps_of.pop(mid, None) */
            int had = PyDict_Contains(deps_of, mid);
            if (had < 0 || (had && PyDict_DelItem(deps_of, mid) < 0)) goto step_end;
        }
        rc = 0;
    step_end:
        Py_XDECREF(entry_);
        Py_XDECREF(deliver);
        Py_XDECREF(body);
        Py_DECREF(mid);
        Py_DECREF(at_obj);
        if (rc < 0) return -1;
    }
    return set_int(st, N.next_delivery, at);
}

/* --- multicasts to the others: the channel's pass_down_each, the detector's pass_down ---- */

#define MAX_OTHERS 16
/* len(encode_header(SOrder(first, [(node, seq)], []))) is below this: a one-id order
   fits a frame whose room is at least this (the channel's size gate) */
#define ONE_ID_ORDER_MAX 1024

/* The links a multicast to `st.others` goes down, read before any change. */
typedef struct {
    Py_ssize_t n;
    PyObject *dests[MAX_OTHERS];  /* (held: `others` is) */
    PyObject *links[MAX_OTHERS];  /* the channel's out-link to each */
    PyObject *in_links, *peers, *group, *me;
    int piggyback;
} links_out;

/* The channel's size gate for a packet of one `header_type` header and `payload_len`
   bytes: 1 fits, 0 not known to fit (or the type not seen yet: the Python path measures
   it and notes its bound), -1 error. */
static int size_fits(held_refs *hp, PyObject *channel, PyObject *header_type,
                     Py_ssize_t payload_len) {
    PyObject *bounds, *v;
    long long bound, room;
    GET(bounds, channel, _bounds);
    if (!PyDict_Check(bounds)) return 0;
    v = PyDict_GetItemWithError(bounds, header_type);  /* (not __missing__: no fill) */
    if (v == NULL) return PyErr_Occurred() ? -1 : 0;
    if (as_ll(v, &bound) < 0) goto error;
    GET(v, channel, _room);
    if (as_ll(v, &room) < 0) goto error;
    if (bound == 0 && header_type != SOrderType) return 0;  /* measured: not here */
    return payload_len + (bound ? bound : ONE_ID_ORDER_MAX) <= room;
error:
    return -1;
}

/* Will `packets` packets in a row to each of `others` go down by pass_down_each (each a
   member with a link, in the steady set, nothing waiting, room in its window)? 1 (and
   `o` filled, its references held by `hp`), 0 if not, -1 with an error set. */
static int check_links(links_out *o, held_refs *hp, PyObject *stack, PyObject *detector,
                       PyObject *channel, PyObject *others, int packets) {
    PyObject *v, *config, *out_links, *steady, *ds;
    int truth;
    long long window;
    if (!PyTuple_Check(others) || PyTuple_GET_SIZE(others) == 0
        || PyTuple_GET_SIZE(others) > MAX_OTHERS)
        return 0;
    GET(config, channel, config);
    GET(v, config, window);
    if (as_ll(v, &window) < 0) goto error;
    GET(out_links, channel, _out);
    GET(steady, channel, _steady);
    if (!PyDict_Check(out_links)) return 0;
    o->n = PyTuple_GET_SIZE(others);
    for (Py_ssize_t i = 0; i < o->n; i++) {
        PyObject *dest = PyTuple_GET_ITEM(others, i), *link, *unacked;
        link = PyDict_GetItemWithError(out_links, dest);
        if (link == NULL) return PyErr_Occurred() ? -1 : 0;
        truth = PySequence_Contains(steady, dest);
        if (truth <= 0) return truth;
        GET(v, link, waiting);
        TRUTH(truth, v);
        if (truth) return 0;
        GET(unacked, link, unacked);
        GET(v, link, next_seq);
        long long next_seq, oldest = -1;
        if (!PyDict_Check(unacked) || as_ll(v, &next_seq) < 0) {
            if (PyErr_Occurred()) goto error;
            return 0;
        }
        if (PyDict_GET_SIZE(unacked)) {
            Py_ssize_t pos = 0;
            PyObject *key, *pending;
            PyDict_Next(unacked, &pos, &key, &pending);
            if (as_ll(key, &oldest) < 0) goto error;
        }
        for (int k = 0; k < packets; k++) {  /* the k-th packet of this step */
            long long first = oldest >= 0 ? oldest : k ? next_seq : -1;
            if (first >= 0 && next_seq + k - first >= window) return 0;
        }
        o->dests[i] = dest;
        o->links[i] = hold(hp, Py_NewRef(link));
        if (o->links[i] == NULL) goto error;
    }
    GET(v, channel, _piggyback);
    TRUTH(o->piggyback, v);
    GET(o->in_links, channel, _in);
    GET(ds, detector, _s);
    GET(o->peers, ds, peers);
    GET(o->group, stack, group);
    GET(o->me, stack, node);
    if (!PyDict_Check(o->in_links) || !PyDict_Check(o->peers) || !PyUnicode_Check(o->group)
        || !PyUnicode_Check(o->me))
        return 0;
    return 1;
error:
    return -1;
}

/* pass_down_each's state change (`_number`) for `packet` on each link: its seq there,
   kept until acked, the ack owed to that peer piggybacked (rseq, rack). 0, or -1. */
static int number_links(links_out *o, PyObject *packet, PyObject *now_obj, long long now,
                        unsigned long long *rseq, unsigned long long *rack) {
    held_refs h = {.n = 0}, *hp = &h;
    PyObject *v;
    for (Py_ssize_t i = 0; i < o->n; i++) {
        PyObject *link = o->links[i], *timer, *unacked, *inbound;
        long long next_seq, rto;
        GET(v, link, next_seq);
        if (as_ll(v, &next_seq) < 0 || set_int(link, N.next_seq, next_seq + 1) < 0)
            goto error;
        GET(timer, link, timer);
        GET(v, timer, rto);
        if (as_ll(v, &rto) < 0) goto error;
        PyObject *deadline = hold(hp, PyLong_FromLongLong(now + rto));
        PyObject *key = hold(hp, PyLong_FromLongLong(next_seq));
        if (deadline == NULL || key == NULL) goto error;
        PyObject *pending_args[3] = {packet, now_obj, deadline};
        PyObject *pending = hold(hp, PyObject_Vectorcall(PendingType, pending_args, 3, NULL));
        GET(unacked, link, unacked);
        if (pending == NULL || PyDict_SetItem(unacked, key, pending) < 0) goto error;
        release(&h);
        rseq[i] = (unsigned long long)next_seq;
        rack[i] = 0;
        if (!o->piggyback) continue;
        inbound = PyDict_GetItemWithError(o->in_links, o->dests[i]);
        if (inbound == NULL) {
            if (PyErr_Occurred()) goto error;
            continue;
        }
        int armed, above;
        long long high;
        GET(v, inbound, ack_armed);
        TRUTH(armed, v);
        if (!armed) continue;
        GET(v, inbound, above);
        TRUTH(above, v);
        if (!above && plant != PLANT_ACK_KEPT_OWED
            && PyObject_SetAttr(inbound, N.ack_armed, Py_False) < 0)
            goto error;
        GET(v, inbound, high);
        if (as_ll(v, &high) < 0) goto error;
        rack[i] = (unsigned long long)high;
        release(&h);
    }
    release(&h);
    return 0;
error:
    release(&h);
    return -1;
}

static const uint8_t NO_PAYLOAD[1] = {0};

/* The frames of one multicast, appended to `frames` in the others' order, each after the
   detector's pass_down stamped its send: a data frame (`id` NULL: SData(seq) and
   `payload`) or a one-id order (SOrder(seq, [id])). 0, or -1 with an error set. */
static int add_frames(links_out *o, PyObject *frames, const unsigned long long *rseq,
                      const unsigned long long *rack, unsigned long long seq,
                      const sw_id *id, const char *payload, Py_ssize_t payload_len,
                      PyObject *now_obj) {
    Py_ssize_t me_len, group_len;
    const char *me = PyUnicode_AsUTF8AndSize(o->me, &me_len);
    const char *group = PyUnicode_AsUTF8AndSize(o->group, &group_len);
    if (me == NULL || group == NULL) return -1;
    for (Py_ssize_t i = 0; i < o->n; i++) {
        PyObject *dest = o->dests[i];
        PyObject *pst = PyDict_GetItemWithError(o->peers, dest);
        if (pst == NULL && PyErr_Occurred()) return -1;
        if (pst != NULL && plant != PLANT_NO_LAST_SENT
            && PyObject_SetAttr(pst, N.last_sent, now_obj) < 0)
            return -1;
        sw_out out = {
            .group = {group, (size_t)group_len}, .sender = {me, (size_t)me_len}, .flags = 0,
            .rdata_seq = rseq[i], .rdata_ack = rack[i], .seq = seq, .ids = id,
            .n_ids = id ? 1 : 0, .payload = payload_len ? (const uint8_t *)payload : NO_PAYLOAD,
            .payload_len = (size_t)payload_len,
        };
        size_t size = id ? sw_order_frame_size(&out) : sw_data_frame_size(&out);
        if (size == 0) {
            PyErr_SetString(PyExc_OverflowError, "abcast._lane: frame too large for msgpack");
            return -1;
        }
        PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
        if (data == NULL) return -1;
        uint8_t *start = (uint8_t *)PyBytes_AS_STRING(data);
        uint8_t *end = id ? sw_write_order_frame(start, &out) : sw_write_data_frame(start, &out);
        PyObject *to = (size_t)(end - start) == size ? PyTuple_Pack(1, dest) : NULL;
        if (to == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_SystemError, "abcast._lane: frame size mismatch");
            Py_DECREF(data);
            return -1;
        }
        PyObject *transmit_args[3] = {to, data, Py_False};
        PyObject *transmit = PyObject_Vectorcall(TransmitType, transmit_args, 3, NULL);
        Py_DECREF(to);
        Py_DECREF(data);
        if (transmit == NULL || PyList_Append(frames, transmit) < 0) {
            Py_XDECREF(transmit);
            return -1;
        }
        Py_DECREF(transmit);
    }
    return 0;
}

/* --- the sequencer's admission and numbering of one message ----------------------------- */

typedef struct {
    PyObject *released, *numbers;
    long long next_number;
} numbering;

/* Will `admit(st, origin, seq, {})` number this one message at once (in origin order,
   nothing held or waiting, no order interval, within max_unstable)? 1/0/-1. */
static int check_admit(numbering *nb, held_refs *hp, PyObject *st, PyObject *origin,
                       unsigned long long seq) {
    PyObject *v, *adm, *waiting, *held_ids;
    int truth;
    long long stable, max_unstable, done = 0;
    GET(v, st, relay);
    TRUTH(truth, v);
    if (truth) return 0;
    GET(v, st, order_interval_us);
    TRUTH(truth, v);
    if (truth) return 0;
    GET(v, st, interval_ids);
    TRUTH(truth, v);
    if (truth) return 0;
    GET(v, st, next_number);
    if (as_ll(v, &nb->next_number) < 0) goto error;
    GET(v, st, stable);
    if (as_ll(v, &stable) < 0) goto error;
    GET(v, st, max_unstable);
    if (as_ll(v, &max_unstable) < 0) goto error;
    if (nb->next_number - stable > max_unstable) return 0;  /* held for the order timer */
    GET(adm, st, admission);
    GET(nb->released, adm, _released);
    GET(waiting, adm, _waiting);
    GET(held_ids, adm, _held);
    GET(nb->numbers, st, numbers);
    if (!PyDict_Check(nb->released) || !PyDict_Check(waiting) || !PyDict_Check(held_ids)
        || !PyDict_Check(nb->numbers) || PyDict_GET_SIZE(waiting) || PyDict_GET_SIZE(held_ids))
        return 0;
    v = PyDict_GetItemWithError(nb->released, origin);
    if (v == NULL && PyErr_Occurred()) goto error;
    if (v != NULL && as_ll(v, &done) < 0) goto error;
    return (unsigned long long)done + 1 == seq;  /* else held, or offered twice */
error:
    return -1;
}

/* admit + announce for one message: released, numbered, one order packet counted.
   Packet((SOrder(first, [(origin, seq)], []),), b"") (new), its number in `*first`. */
static PyObject *announce_one(numbering *nb, PyObject *st, PyObject *origin,
                              unsigned long long seq, long long *first) {
    held_refs h = {.n = 0}, *hp = &h;
    PyObject *v, *packet = NULL;
    long long packets;
    *first = nb->next_number;
    PyObject *seq_obj = hold(hp, PyLong_FromUnsignedLongLong(seq));
    PyObject *first_obj = hold(hp, PyLong_FromLongLong(*first));
    PyObject *mid = hold(hp, new_msgid(origin, (long long)seq));
    if (seq_obj == NULL || first_obj == NULL || mid == NULL
        || PyDict_SetItem(nb->released, origin, seq_obj) < 0  /* CausalHoldback.offer */
        || PyDict_SetItem(nb->numbers, first_obj, mid) < 0
        || set_int(st, N.next_number, *first + 1) < 0)
        goto error;
    GET(v, st, order_packets);
    if (as_ll(v, &packets) < 0 || set_int(st, N.order_packets, packets + 1) < 0) goto error;
    PyObject *pair = hold(hp, PyTuple_Pack(2, origin, seq_obj));
    PyObject *ids = hold(hp, PyList_New(1));
    PyObject *carried = hold(hp, PyList_New(0));
    if (pair == NULL || ids == NULL || carried == NULL) goto error;
    PyList_SET_ITEM(ids, 0, Py_NewRef(pair));
    PyObject *order_args[3] = {first_obj, ids, carried};
    PyObject *order = hold(hp, PyObject_Vectorcall(SOrderType, order_args, 3, NULL));
    packet = order ? one_header_packet(order, NULL) : NULL;
error:
    release(&h);
    return packet;
}

static PyObject *lane_receive(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
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

    /* the failure detector's pass_up */
    PyObject *ds, *peers, *pst;
    GET(ds, detector, _s);
    GET(peers, ds, peers);
    if (!PyDict_Check(peers)) DECLINE();
    pst = PyDict_GetItemWithError(peers, peer);
    if (pst == NULL) {
        if (PyErr_Occurred()) goto error;
        DECLINE();
    }
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
    link = PyDict_GetItemWithError(in_links, peer);
    if (link == NULL) {
        if (PyErr_Occurred()) goto error;
        DECLINE();
    }
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
        out = PyDict_GetItemWithError(out_links, peer);
        if (out == NULL && PyErr_Occurred()) goto error;
        if (out != NULL) {
            long long next_seq;
            GET(o, out, next_seq);
            if (as_ll(o, &next_seq) < 0) goto error;
            if (f.rdata_ack >= (unsigned long long)next_seq) DECLINE();
            GET(o, out, waiting);
            TRUTH(truth, o);
            if (truth) DECLINE();
        }
    }

    /* the membership layer's steady check */
    PyObject *ms, *status, *mview, *core, *st, *sview, *smembers;
    GET(ms, membership, s);
    GET(status, ms, status);
    if (!PyUnicode_Check(status)
        || (PyUnicode_Compare(status, N.member) != 0
            && PyUnicode_Compare(status, N.leaving) != 0)) {
        if (PyErr_Occurred()) goto error;
        DECLINE();
    }
    GET(o, ms, frozen);
    TRUTH(truth, o);
    if (truth) DECLINE();
    GET(mview, ms, view);
    if (mview == Py_None) DECLINE();
    GET(o, mview, members);
    truth = PySequence_Contains(o, peer);
    if (truth < 0) goto error;
    if (!truth) DECLINE();

    /* the sequencer's steady order */
    GET(core, membership, ordering);
    GET(st, core, st);
    GET(o, st, optimistic);
    if (o != Py_None) DECLINE();
    GET(o, st, safe);
    TRUTH(truth, o);
    if (truth) DECLINE();
    GET(o, st, causal);
    TRUTH(truth, o);
    if (truth) DECLINE();
    GET(sview, st, view);
    if (sview == Py_None) DECLINE();
    GET(smembers, sview, members);
    if (!PyTuple_Check(smembers) || PyTuple_GET_SIZE(smembers) == 0) DECLINE();
    PyObject *leader = PyTuple_GET_ITEM(smembers, 0), *me;  /* view.leader, st.node */
    int at_leader = 0;
    GET(me, st, node);
    if (!PyUnicode_Check(me) || !PyUnicode_Check(leader)) DECLINE();
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
    PyObject *numbers, *bodies, *delivered, *log, *deps_of;
    GET(numbers, st, numbers);
    GET(bodies, st, bodies);
    GET(delivered, st, delivered);
    GET(log, st, log);
    GET(deps_of, st, deps_of);
    if (!PyDict_Check(numbers) || !PyDict_Check(bodies) || !PyDict_Check(delivered)
        || !PyDict_Check(log) || !PyDict_Check(deps_of))
        DECLINE();
    long long next_delivery;
    GET(o, st, next_delivery);
    if (as_ll(o, &next_delivery) < 0) goto error;
    const uint8_t *cursor = f.ids;
    sw_id id;
    PyObject *data_id = NULL;  /* a member's data: its MsgId, if its body is new here */
    if (f.kind == SW_KIND_DATA) {
        long long done = 0;
        PyObject *seen = PyDict_GetItemWithError(delivered, peer);
        if (seen == NULL && PyErr_Occurred()) goto error;
        if (seen != NULL && as_ll(seen, &done) < 0) goto error;
        if (f.seq > (unsigned long long)done) {
            data_id = hold(&h, new_msgid(peer, (long long)f.seq));
            if (data_id == NULL) goto error;
            truth = PyDict_Contains(bodies, data_id);
            if (truth < 0) goto error;
            if (truth) data_id = NULL;  /* sent again: idempotent (still held by h) */
        }
    }
    links_out order = {.n = 0};  /* at the sequencer: the order this data causes */
    numbering nb = {.released = NULL};
    if (at_leader && data_id != NULL) {
        truth = check_admit(&nb, hp, st, peer, f.seq);
        if (truth > 0) truth = size_fits(hp, channel, SOrderType, 0);
        if (truth > 0) {
            GET(o, st, others);
            truth = check_links(&order, hp, stack, detector, channel, o, 1);
        }
        if (truth < 0) goto error;
        if (!truth) DECLINE();
    }
    if (f.seq + f.n_ids > ((uint64_t)1 << 62) + SW_MAX_ORDER_IDS) DECLINE();  /* (bounded) */
    for (size_t i = 0; i < f.n_ids; i++) {
        if (!sw_next_id(&cursor, f.ids_end, &id)) DECLINE();
        long long at = (long long)(f.seq + i);
        if (at < next_delivery || plant == PLANT_ACCEPT_CONFLICT) continue;
        PyObject *at_obj = PyLong_FromLongLong(at);
        if (at_obj == NULL) goto error;
        PyObject *known = PyDict_GetItemWithError(numbers, at_obj);
        Py_DECREF(at_obj);
        int same = 1;
        if (known == NULL) {
            if (PyErr_Occurred()) goto error;
        } else if ((same = same_id(known, id)) < 0) {
            goto error;
        }
        if (!same) DECLINE();  /* the Python path refuses it */
    }

    /* --- the changes, in the Python path's order -------------------------------------- */
    if (plant != PLANT_NO_STAMP && PyObject_SetAttr(pst, N.last_heard, now_obj) < 0)
        goto error;
    if (out != NULL && channel_on_ack(out, f.rdata_ack, now_obj, now) < 0) goto error;
    if (set_int(link, N.high, high + 1) < 0) goto error;
    if (!ack_armed) {
        if (plant != PLANT_NO_ACK_OWED && PyObject_SetAttr(link, N.ack_armed, Py_True) < 0)
            goto error;
        if (PyObject_SetAttr(link, N.ack_aged, Py_False) < 0) goto error;
    }
    if (PyObject_SetAttr(ms, N.now, now_obj) < 0) goto error;
    if (PyObject_SetAttr(st, N.now, now_obj) < 0) goto error;

    /* sequencer_numbering.on_data at a member: the body kept */
    if (data_id != NULL && plant != PLANT_DATA_DROPPED) {
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
        PyObject *origin = node_str(smembers, id.node);
        if (origin == NULL) goto error;
        PyObject *mid = new_msgid(origin, (long long)id.seq);
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
        PyObject *packet = hold(hp, announce_one(&nb, st, peer, f.seq, &first));
        frames = hold(hp, PyList_New(0));
        if (packet == NULL || frames == NULL
            || number_links(&order, packet, now_obj, now, rseq, rack) < 0
            || add_frames(&order, frames, rseq, rack, (unsigned long long)first, &ordered, NULL,
                          0, now_obj) < 0)
            goto error;
    }
    if (f.kind == SW_KIND_DATA && data_id == NULL) goto done;  /* on_data: [] */

    if (deliver_ready(st, numbers, bodies, delivered, log, deps_of, next_delivery, outputs)
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
    PyObject *outputs = NULL, *o, *layers, *ms, *core, *st, *sview, *smembers, *me, *others;
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
    GET(o, channel, _tick_set);  /* pass_down_each's first test (else _transmit sets it) */
    TRUTH(truth, o);
    if (!truth) DECLINE();
    GET(o, stack, _next_seq);
    if (as_ll(o, &seq) < 0) goto error;
    /* the membership layer's steady check */
    GET(ms, membership, s);
    GET(o, ms, status);
    if (!PyUnicode_Check(o)
        || (PyUnicode_Compare(o, N.member) != 0 && PyUnicode_Compare(o, N.leaving) != 0)) {
        if (PyErr_Occurred()) goto error;
        DECLINE();
    }
    GET(o, ms, frozen);
    TRUTH(truth, o);
    if (truth) DECLINE();
    /* the sequencer's broadcast */
    GET(core, membership, ordering);
    GET(st, core, st);
    GET(o, st, optimistic);
    if (o != Py_None) DECLINE();
    GET(o, st, safe);
    TRUTH(truth, o);
    if (truth) DECLINE();
    GET(o, st, causal);
    TRUTH(truth, o);
    if (truth) DECLINE();
    GET(o, st, relay);
    TRUTH(truth, o);
    if (truth) DECLINE();
    GET(sview, st, view);
    if (sview == Py_None) DECLINE();
    GET(smembers, sview, members);
    GET(me, st, node);
    if (!PyTuple_Check(smembers) || PyTuple_GET_SIZE(smembers) == 0 || !PyUnicode_Check(me))
        DECLINE();
    truth = PyUnicode_Compare(PyTuple_GET_ITEM(smembers, 0), me);
    if (truth == -1 && PyErr_Occurred()) goto error;
    int at_leader = truth == 0;
    GET(others, st, others);
    PyObject *numbers, *bodies, *delivered, *log, *deps_of;
    GET(numbers, st, numbers);
    GET(bodies, st, bodies);
    GET(delivered, st, delivered);
    GET(log, st, log);
    GET(deps_of, st, deps_of);
    if (!PyDict_Check(numbers) || !PyDict_Check(bodies) || !PyDict_Check(delivered)
        || !PyDict_Check(log) || !PyDict_Check(deps_of))
        DECLINE();
    long long next_delivery;
    GET(o, st, next_delivery);
    if (as_ll(o, &next_delivery) < 0) goto error;
    links_out down = {.n = 0};
    numbering nb = {.released = NULL};
    truth = size_fits(hp, channel, SDataType, PyBytes_GET_SIZE(payload));
    if (truth > 0 && at_leader) {
        truth = check_admit(&nb, hp, st, me, (unsigned long long)seq);
        if (truth > 0) truth = size_fits(hp, channel, SOrderType, 0);
    }
    if (truth > 0) truth = check_links(&down, hp, stack, detector, channel, others,
                                       at_leader ? 2 : 1);
    if (truth > 0) truth = !PySequence_Contains(others, down.me);  /* `me not in dests` */
    if (truth < 0) goto error;
    if (!truth) DECLINE();

    /* --- the changes, in the Python path's order ------------------------------------ */
    unsigned long long rseq[MAX_OTHERS], rack[MAX_OTHERS];
    PyObject *seq_obj = hold(hp, PyLong_FromLongLong(seq));
    PyObject *mid = hold(hp, new_msgid(me, seq));
    if (seq_obj == NULL || mid == NULL || set_int(stack, N._next_seq, seq + 1) < 0
        || PyObject_SetAttr(ms, N.now, now_obj) < 0 || PyObject_SetAttr(st, N.now, now_obj) < 0
        || PyObject_SetAttr(st, N.sent, seq_obj) < 0
        || PyDict_SetItem(bodies, mid, payload) < 0)
        goto error;
    PyObject *data = hold(hp, PyObject_Vectorcall(SDataType, &seq_obj, 1, NULL));
    PyObject *data_packet = data ? hold(hp, one_header_packet(data, payload)) : NULL;
    if (data_packet == NULL) goto error;
    PyObject *order_packet = NULL;
    long long first = 0;
    outputs = PyList_New(0);
    if (outputs == NULL) goto error;
    if (at_leader) {  /* admit + number: its order, and its delivery here */
        order_packet = hold(hp, announce_one(&nb, st, me, (unsigned long long)seq, &first));
        if (order_packet == NULL
            || deliver_ready(st, numbers, bodies, delivered, log, deps_of, next_delivery,
                             outputs) < 0)
            goto error;
    }
    if (number_links(&down, data_packet, now_obj, now, rseq, rack) < 0
        || add_frames(&down, outputs, rseq, rack, (unsigned long long)seq, NULL,
                      PyBytes_AS_STRING(payload), PyBytes_GET_SIZE(payload), now_obj) < 0)
        goto error;
    if (order_packet != NULL) {
        Py_ssize_t me_len;
        const char *me_utf8 = PyUnicode_AsUTF8AndSize(me, &me_len);
        if (me_utf8 == NULL) goto error;
        sw_id ordered = {.node = {me_utf8, (size_t)me_len}, .seq = (uint64_t)seq};
        if (number_links(&down, order_packet, now_obj, now, rseq, rack) < 0
            || add_frames(&down, outputs, rseq, rack, (unsigned long long)first, &ordered,
                          NULL, 0, now_obj) < 0)
            goto error;
    }
    release(&h);
    broadcasts_taken++;
    return outputs;

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
    plant = (int)k;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"receive", (PyCFunction)(void (*)(void))lane_receive, METH_FASTCALL,
     "receive(frame, peer, lanes, now) -> (tag, outputs) | None: a sequencer's steady "
     "frame at a member, its whole stack step (see the module's source for the rules)"},
    {"broadcast", (PyCFunction)(void (*)(void))lane_broadcast, METH_FASTCALL,
     "broadcast(stack, payload, now) -> outputs | None: a steady broadcast's whole stack "
     "step (see the module's source for the rules)"},
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

static int intern_names(void) {
#define NAME(x) if ((N.x = PyUnicode_InternFromString(#x)) == NULL) return -1;
    NAME(_pass_up) NAME(_pass_up2) NAME(_pass_down_each) NAME(layers)
    NAME(_s) NAME(peers) NAME(suspected) NAME(claim) NAME(last_heard)
    NAME(_tick_set) NAME(_tick_at) NAME(_tick_period) NAME(_steady) NAME(_in) NAME(_out)
    NAME(above) NAME(high) NAME(ack_armed) NAME(ack_aged)
    NAME(next_seq) NAME(waiting) NAME(unacked) NAME(tries) NAME(sent) NAME(progress_at)
    NAME(timer) NAME(sample) NAME(rto_armed_at)
    NAME(s) NAME(status) NAME(frozen) NAME(view) NAME(members) NAME(now) NAME(ordering)
    NAME(st) NAME(optimistic) NAME(safe) NAME(causal) NAME(node) NAME(numbers) NAME(bodies)
    NAME(delivered) NAME(log) NAME(deps_of) NAME(next_delivery)
    NAME(member) NAME(leaving)
    NAME(relay) NAME(order_interval_us) NAME(interval_ids) NAME(next_number) NAME(stable)
    NAME(max_unstable) NAME(admission) NAME(_released) NAME(_waiting) NAME(_held)
    NAME(others) NAME(order_packets)
    NAME(_bounds) NAME(_room) NAME(config) NAME(window) NAME(_piggyback) NAME(rto)
    NAME(last_sent) NAME(group) NAME(_pass_down) NAME(_next_seq)
#undef NAME
    return 0;
}

static PyObject *import_attr(const char *module, const char *name) {
    PyObject *m = PyImport_ImportModule(module);
    if (m == NULL) return NULL;
    PyObject *a = PyObject_GetAttrString(m, name);
    Py_DECREF(m);
    return a;
}

PyMODINIT_FUNC PyInit__lane(void) {
    if (intern_names() < 0) return NULL;
    PyObject *msgid = import_attr("abcast.ids", "MsgId");
    if (msgid == NULL) return NULL;
    if (!PyType_Check(msgid) || !PyType_IsSubtype((PyTypeObject *)msgid, &PyTuple_Type)) {
        Py_DECREF(msgid);
        PyErr_SetString(PyExc_ImportError, "abcast._lane: abcast.ids.MsgId is not a tuple");
        return NULL;
    }
    MsgIdType = (PyTypeObject *)msgid;
    if ((DeliverType = import_attr("abcast.effects", "Deliver")) == NULL
        || (TransmitType = import_attr("abcast.effects", "Transmit")) == NULL
        || (PacketType = import_attr("abcast.codec", "Packet")) == NULL
        || (SOrderType = import_attr("abcast.ordering.sequencer_wire", "SOrder")) == NULL
        || (SDataType = import_attr("abcast.ordering.sequencer_wire", "SData")) == NULL
        || (PendingType = import_attr("abcast.reliability.channel", "_Pending")) == NULL)
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
