/* abcast._lane's Python objects: the attribute names it interns and the types it imports
   (both at import, by `lane_objects_init`), and the helpers that build and compare the
   objects it hands to and reads from the layers (lane.h has the tiniest, inline). */

#include "lane.h"

#include <structmember.h>  /* (T_OBJECT_EX, READONLY: a slot's member) */

struct lane_names lane_names;
slot_way lane_slots[N_NAMES][2];

PyTypeObject *lane_MsgIdType;
PyObject *lane_LocalProtocolError;
long long lane_granularity_us;
PyObject *lane_DeliverType, *lane_TransmitType, *lane_PacketType, *lane_SOrderType,
    *lane_SDataType, *lane_PendingType;
PyObject *lane_OpenDetectorType, *lane_OpenChannelType, *lane_MembershipType,
    *lane_SequencerType;

/* MsgId(origin, seq): tuple.__new__'s work for a tuple subclass, without its argument
   tuple. Steals nothing; NULL with an error set. */
PyObject *lane_new_msgid(PyObject *origin, long long seq) {
    PyObject *s = PyLong_FromLongLong(seq);
    if (s == NULL) return NULL;
    PyObject *mid = lane_MsgIdType->tp_alloc(lane_MsgIdType, 2);
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
PyObject *lane_one_header_packet(PyObject *header, PyObject *payload) {
    PyObject *headers = PyTuple_Pack(1, header);
    PyObject *body = payload ? Py_NewRef(payload) : PyBytes_FromStringAndSize(NULL, 0);
    PyObject *packet = NULL;
    if (headers != NULL && body != NULL) {
        PyObject *args[2] = {headers, body};
        packet = PyObject_Vectorcall(lane_PacketType, args, 2, NULL);
    }
    Py_XDECREF(headers);
    Py_XDECREF(body);
    return packet;
}

/* The id's node as a str: the view's own object when it is a member (no new string). */
PyObject *lane_node_str(PyObject *members, sw_str node) {
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
int lane_same_id(PyObject *known, sw_id id) {
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

/* The cache's miss (lane.h): the offset of `name`'s slot in `tp`'s instances, or 0 where
   it is not a writable object slot found by the generic getattr and setattr; cached in
   the first of `ways` (the other keeps the previous type) when the type has a version tag
   (CPython gives it one at its first lookup, and takes it away when the type changes). */
Py_ssize_t lane_slot_lookup(slot_way *ways, PyTypeObject *tp, PyObject *name) {
    Py_ssize_t offset = 0;
    if (tp->tp_getattro == PyObject_GenericGetAttr
        && tp->tp_setattro == PyObject_GenericSetAttr) {
        PyObject *descr = _PyType_Lookup(tp, name);  /* (borrowed; no error set) */
        if (descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
            if (member->type == T_OBJECT_EX && !(member->flags & READONLY))
                offset = member->offset;
        }
    }
    if (PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG)) {
        ways[1] = ways[0];
        ways[0] = (slot_way){.type = tp, .version = tp->tp_version_tag, .offset = offset};
    }
    return offset;
}

static int intern_names(void) {
#define NAME(x) if ((lane_names.x = PyUnicode_InternFromString(#x)) == NULL) return -1;
    NAME(srtt) NAME(rttvar) NAME(min_us) NAME(max_us) NAME(samples) NAME(base)
    NAME(backoff) NAME(packet) NAME(deadline)
    NAME(_pass_up) NAME(_pass_up2) NAME(_pass_down_each) NAME(layers)
    NAME(_s) NAME(peers) NAME(suspected) NAME(claim) NAME(last_heard)
    NAME(_tick_set) NAME(_tick_at) NAME(_tick_period) NAME(_steady) NAME(_in) NAME(_out)
    NAME(above) NAME(high) NAME(ack_armed) NAME(ack_aged)
    NAME(next_seq) NAME(waiting) NAME(unacked) NAME(tries) NAME(sent) NAME(progress_at)
    NAME(timer) NAME(rto_armed_at)
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

PyObject *lane_import_attr(const char *module, const char *name) {
    PyObject *m = PyImport_ImportModule(module);
    if (m == NULL) return NULL;
    PyObject *a = PyObject_GetAttrString(m, name);
    Py_DECREF(m);
    return a;
}

int lane_add_int(PyObject *obj, PyObject *name, Py_ssize_t delta) {
    PyObject *o = PyObject_GetAttr(obj, name);
    if (o == NULL) return -1;
    PyObject *d = PyLong_FromSsize_t(delta);
    PyObject *sum = d ? PyNumber_Add(o, d) : NULL;
    Py_DECREF(o);
    Py_XDECREF(d);
    if (sum == NULL) return -1;
    int rc = PyObject_SetAttr(obj, name, sum);
    Py_DECREF(sum);
    return rc;
}

/* The names interned and the types imported: 0, or -1 with an error set. */
int lane_objects_init(void) {
    if (intern_names() < 0) return -1;
    PyObject *msgid = lane_import_attr("abcast.ids", "MsgId");
    if (msgid == NULL) return -1;
    if (!PyType_Check(msgid) || !PyType_IsSubtype((PyTypeObject *)msgid, &PyTuple_Type)) {
        Py_DECREF(msgid);
        PyErr_SetString(PyExc_ImportError, "abcast._lane: abcast.ids.MsgId is not a tuple");
        return -1;
    }
    lane_MsgIdType = (PyTypeObject *)msgid;
    if ((lane_DeliverType = lane_import_attr("abcast.effects", "Deliver")) == NULL
        || (lane_TransmitType = lane_import_attr("abcast.effects", "Transmit")) == NULL
        || (lane_PacketType = lane_import_attr("abcast.codec", "Packet")) == NULL
        || (lane_SOrderType = lane_import_attr("abcast.ordering.sequencer_wire", "SOrder")) == NULL
        || (lane_SDataType = lane_import_attr("abcast.ordering.sequencer_wire", "SData")) == NULL
        || (lane_PendingType = lane_import_attr("abcast.reliability.channel", "_Pending")) == NULL
        || (lane_LocalProtocolError = lane_import_attr("abcast.errors", "LocalProtocolError"))
               == NULL
        || (lane_OpenDetectorType = lane_import_attr("abcast.ordering._open_detector",
                                                "OpenDetector")) == NULL
        || (lane_OpenChannelType = lane_import_attr("abcast.ordering._open_channel",
                                               "OpenChannel")) == NULL
        || (lane_MembershipType = lane_import_attr("abcast.membership.layer", "Membership"))
               == NULL
        || (lane_SequencerType = lane_import_attr("abcast.ordering.sequencer", "Sequencer"))
               == NULL)
        return -1;
    if (!PyType_Check(lane_PendingType)) {
        PyErr_SetString(PyExc_ImportError, "abcast._lane: _Pending is not a class");
        return -1;
    }
    PyObject *granularity = lane_import_attr("abcast.reliability.rto", "GRANULARITY_US");
    if (granularity == NULL) return -1;
    int rc = as_ll(granularity, &lane_granularity_us);
    Py_DECREF(granularity);
    return rc;
}
