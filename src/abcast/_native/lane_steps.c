/* abcast._lane's steps of the Python layers that `receive` and `broadcast` share (the
   rules are at the top of lane_module.c): the channel's `_on_ack` for a carried ack, the
   sequencer's `deliver_ready`, a multicast down the channel's links (its size gate, its
   checks, its numbering, its frames), and the sequencer's admission and order of one
   message. `size_fits` and the `check_*` only read; the others change state, so their
   callers run them only after every check has passed. */

#include "lane.h"

/* The channel's `_on_ack(peer, ack, [], now)` for an ack `pass_up` lets through (below
   next_seq, nothing waiting): its result is [] there and ignored. */
/* RtoEstimator.sample(rtt_us) (abcast.reliability.rto; the same integer arithmetic): 0,
   or -1 with an error set (LocalProtocolError for a negative round trip, as it raises). */
static int rto_sample(held_refs *hp, PyObject *timer, long long rtt) {
    PyObject *v;
    long long srtt, rttvar, samples, min_us, max_us;
    if (rtt < 0) {
        PyErr_Format(lane_LocalProtocolError, "negative round trip %lld us", rtt);
        return -1;
    }
    GET(v, timer, srtt);
    if (v == Py_None) {
        srtt = rtt;
        rttvar = rtt >> 1;
    } else {
        long long old, delta;
        if (as_ll(v, &old) < 0) goto error;
        GET(v, timer, rttvar);
        if (as_ll(v, &rttvar) < 0) goto error;
        delta = old - rtt;
        rttvar = (3 * rttvar + (delta >= 0 ? delta : -delta)) >> 2;
        srtt = (7 * old + rtt) >> 3;
    }
    GET(v, timer, samples);
    if (as_ll(v, &samples) < 0) goto error;
    GET(v, timer, min_us);
    if (as_ll(v, &min_us) < 0) goto error;
    GET(v, timer, max_us);
    if (as_ll(v, &max_us) < 0) goto error;
    long long spread = rttvar << 2;
    long long base = srtt + (spread > lane_granularity_us ? spread : lane_granularity_us);
    if (base < min_us)
        base = min_us;
    else if (base > max_us)
        base = max_us;
    PyObject *base_obj = hold(hp, PyLong_FromLongLong(base));
    if (base_obj == NULL || set_int(timer, ATTR(srtt), srtt) < 0
        || set_int(timer, ATTR(rttvar), rttvar) < 0
        || set_int(timer, ATTR(samples), samples + 1) < 0
        || lane_setattr(timer, ATTR(base), base_obj) < 0
        || lane_setattr(timer, ATTR(rto), base_obj) < 0
        || set_int(timer, ATTR(backoff), 0) < 0)
        goto error;
    return 0;
error:
    return -1;
}

int lane_channel_on_ack(PyObject *out, unsigned long long ack, PyObject *now_obj,
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
            PyObject *tries = lane_getattr(pending, ATTR(tries));
            if (tries == NULL) goto error;
            int tried = PyObject_IsTrue(tries);
            Py_DECREF(tries);
            if (tried < 0) goto error;
            if (!tried) timed = hold(&h, Py_NewRef(pending));
            if (!tried && timed == NULL) goto error;
        }
    }
    if (acked) {
        if (lane_planted != PLANT_NO_PROGRESS
            && lane_setattr(out, ATTR(progress_at), now_obj) < 0)
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
        if (rto_sample(hp, timer, now - sent_at) < 0) goto error;
    }
    if (PyDict_GET_SIZE(unacked) == 0) {
        PyObject *armed;
        GET(armed, out, rto_armed_at);
        if (armed != Py_None && lane_setattr(out, ATTR(rto_armed_at), Py_None) < 0)
            goto error;
    }
    release(&h);
    return 0;
error:
    release(&h);
    return -1;
}


/* sequencer_numbering.deliver_ready (not SAFE: no limit): what holds number and body, in
   number order, appended to `outputs` as Deliver; 0, or -1 with an error set. */
int lane_deliver_ready(PyObject *st, PyObject *numbers, PyObject *bodies,
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
        if (lane_planted != PLANT_KEEP_NUMBER && PyDict_DelItem(numbers, at_obj) < 0)
            goto step_end;
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
        deliver = PyObject_Vectorcall(lane_DeliverType, fields, 3, NULL);
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
    return set_int(st, ATTR(next_delivery), at);
}

/* --- multicasts to the others: the channel's pass_down_each, the detector's pass_down ---- */

/* len(encode_header(SOrder(first, [(node, seq)], []))) is below this: a one-id order
   fits a frame whose room is at least this (the channel's size gate) */
#define ONE_ID_ORDER_MAX 1024

/* The channel's size gate for a packet of one `header_type` header and `payload_len`
   bytes: 1 fits, 0 not known to fit (or the type not seen yet: the Python path measures
   it and notes its bound), -1 error. */
int lane_size_fits(held_refs *hp, PyObject *channel, PyObject *header_type,
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
    if (bound == 0 && header_type != lane_SOrderType) return 0;  /* measured: not here */
    return payload_len + (bound ? bound : ONE_ID_ORDER_MAX) <= room;
error:
    return -1;
}

/* Will `packets` packets in a row to each of `others` go down by pass_down_each (each a
   member with a link, in the steady set, nothing waiting, room in its window)? 1 (and
   `o` filled, its references held by `hp`), 0 if not, -1 with an error set. */
int lane_check_links(links_out *o, held_refs *hp, PyObject *stack, PyObject *detector,
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

/* _Pending(packet, sent, deadline) (tries 0) without its Python __init__: the instance
   made as object.__new__ makes it, its slots set as __init__ sets them. */
static PyObject *new_pending(PyObject *packet, PyObject *sent, PyObject *deadline) {
    static PyObject *no_args;
    if (no_args == NULL && (no_args = PyTuple_New(0)) == NULL) return NULL;
    PyTypeObject *type = (PyTypeObject *)lane_PendingType;
    PyObject *pending = type->tp_new(type, no_args, NULL);
    if (pending == NULL) return NULL;
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL || lane_setattr(pending, ATTR(packet), packet) < 0
        || lane_setattr(pending, ATTR(sent), sent) < 0
        || lane_setattr(pending, ATTR(deadline), deadline) < 0
        || lane_setattr(pending, ATTR(tries), zero) < 0) {
        Py_XDECREF(zero);
        Py_DECREF(pending);
        return NULL;
    }
    Py_DECREF(zero);
    return pending;
}

/* pass_down_each's state change (`_number`) for `packet` on each link: its seq there,
   kept until acked, the ack owed to that peer piggybacked (rseq, rack). 0, or -1. */
int lane_number_links(links_out *o, PyObject *packet, PyObject *now_obj, long long now,
                      unsigned long long *rseq, unsigned long long *rack) {
    held_refs h = {.n = 0}, *hp = &h;
    PyObject *v;
    for (Py_ssize_t i = 0; i < o->n; i++) {
        PyObject *link = o->links[i], *timer, *unacked, *inbound;
        long long next_seq, rto;
        GET(v, link, next_seq);
        if (as_ll(v, &next_seq) < 0 || set_int(link, ATTR(next_seq), next_seq + 1) < 0)
            goto error;
        GET(timer, link, timer);
        GET(v, timer, rto);
        if (as_ll(v, &rto) < 0) goto error;
        PyObject *deadline = hold(hp, PyLong_FromLongLong(now + rto));
        PyObject *key = hold(hp, PyLong_FromLongLong(next_seq));
        if (deadline == NULL || key == NULL) goto error;
        PyObject *pending = hold(hp, new_pending(packet, now_obj, deadline));
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
        if (hold(hp, Py_NewRef(inbound)) == NULL) goto error;
        int armed, above;
        long long high;
        GET(v, inbound, ack_armed);
        TRUTH(armed, v);
        if (!armed) continue;
        GET(v, inbound, above);
        TRUTH(above, v);
        if (!above && lane_planted != PLANT_ACK_KEPT_OWED
            && lane_setattr(inbound, ATTR(ack_armed), Py_False) < 0)
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
int lane_add_frames(links_out *o, PyObject *frames, const unsigned long long *rseq,
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
        if (pst != NULL && lane_planted != PLANT_NO_LAST_SENT
            && lane_setattr(pst, ATTR(last_sent), now_obj) < 0)
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
        PyObject *transmit = PyObject_Vectorcall(lane_TransmitType, transmit_args, 3, NULL);
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

/* Will `admit(st, origin, seq, {})` number this one message at once (in origin order,
   nothing held or waiting, no order interval, within max_unstable)? 1/0/-1. */
int lane_check_admit(numbering *nb, held_refs *hp, PyObject *st, PyObject *origin,
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
PyObject *lane_announce_one(numbering *nb, PyObject *st, PyObject *origin,
                            unsigned long long seq, long long *first) {
    held_refs h = {.n = 0}, *hp = &h;
    PyObject *v, *packet = NULL;
    long long packets;
    *first = nb->next_number;
    PyObject *seq_obj = hold(hp, PyLong_FromUnsignedLongLong(seq));
    PyObject *first_obj = hold(hp, PyLong_FromLongLong(*first));
    PyObject *mid = hold(hp, lane_new_msgid(origin, (long long)seq));
    if (seq_obj == NULL || first_obj == NULL || mid == NULL
        || PyDict_SetItem(nb->released, origin, seq_obj) < 0  /* CausalHoldback.offer */
        || PyDict_SetItem(nb->numbers, first_obj, mid) < 0
        || set_int(st, ATTR(next_number), *first + 1) < 0)
        goto error;
    GET(v, st, order_packets);
    if (as_ll(v, &packets) < 0 || set_int(st, ATTR(order_packets), packets + 1) < 0)
        goto error;
    PyObject *pair = hold(hp, PyTuple_Pack(2, origin, seq_obj));
    PyObject *ids = hold(hp, PyList_New(1));
    PyObject *carried = hold(hp, PyList_New(0));
    if (pair == NULL || ids == NULL || carried == NULL) goto error;
    PyList_SET_ITEM(ids, 0, Py_NewRef(pair));
    PyObject *order_args[3] = {first_obj, ids, carried};
    PyObject *order = hold(hp, PyObject_Vectorcall(lane_SOrderType, order_args, 3, NULL));
    packet = order ? lane_one_header_packet(order, NULL) : NULL;
error:
    release(&h);
    return packet;
}

/* --- the membership layer's and the sequencer's steady checks ---------------------------- */

int lane_member_steady(held_refs *hp, PyObject *membership, PyObject **ms) {
    PyObject *status, *o;
    int truth;
    GET(*ms, membership, s);
    GET(status, *ms, status);
    if (!PyUnicode_Check(status)
        || (PyUnicode_Compare(status, lane_names.member) != 0
            && PyUnicode_Compare(status, lane_names.leaving) != 0))
        return PyErr_Occurred() ? -1 : 0;
    GET(o, *ms, frozen);
    TRUTH(truth, o);
    return !truth;
error:
    return -1;
}

int lane_sequencer_plain(held_refs *hp, PyObject *membership, lane_seq *q) {
    PyObject *core, *o, *view;
    int truth;
    GET(core, membership, ordering);
    if ((PyObject *)Py_TYPE(core) != lane_SequencerType) return 0;  /* another ordering */
    GET(q->st, core, st);
    GET(o, q->st, optimistic);
    if (o != Py_None) return 0;
    GET(o, q->st, safe);
    TRUTH(truth, o);
    if (truth) return 0;
    GET(o, q->st, causal);
    TRUTH(truth, o);
    if (truth) return 0;
    GET(view, q->st, view);
    if (view == Py_None) return 0;
    GET(q->members, view, members);
    GET(q->me, q->st, node);
    if (!PyTuple_Check(q->members) || PyTuple_GET_SIZE(q->members) == 0
        || !PyUnicode_Check(q->me))
        return 0;
    GET(q->numbers, q->st, numbers);
    GET(q->bodies, q->st, bodies);
    GET(q->delivered, q->st, delivered);
    GET(q->log, q->st, log);
    GET(q->deps_of, q->st, deps_of);
    if (!PyDict_Check(q->numbers) || !PyDict_Check(q->bodies) || !PyDict_Check(q->delivered)
        || !PyDict_Check(q->log) || !PyDict_Check(q->deps_of))
        return 0;
    GET(o, q->st, next_delivery);
    return as_ll(o, &q->next_delivery) < 0 ? -1 : 1;
error:
    return -1;
}
