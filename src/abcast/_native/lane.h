/* What abcast._lane's files share (the rules are at the top of lane_module.c):

   - lane_module.c: the module — its rules, `receive`, `broadcast`, the counts and the
     planted bugs, the module's definition and init;
   - lane_objects.c: the interned attribute names and the imported types (set at import),
     and the helpers that build and compare the Python objects the lane handles;
   - lane_steps.c: the layers' steps that `receive` and `broadcast` share (the channel's
     ack, the sequencer's delivery, a multicast's checks and frames, the admission of one
     message and its order);
   - lane_pump.c, lane_write.c: the runtime's glue around the steps (a tcp:// read's
     frames to `receive`; a step's packets written, its deliveries handed over).

   Shared symbols are prefixed `lane_`; the tiny helpers every step calls are here,
   `static inline`. */

#ifndef ABCAST_LANE_H
#define ABCAST_LANE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

#include "steady_wire.h"

/* The planted bugs for the differential test (lane_module.c's `plant(k)`). */
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

extern int lane_planted;  /* the planted bug, PLANT_NONE for none (lane_module.c) */

/* Interned attribute names and the types the lane builds (set at import, lane_objects.c). */
struct lane_names {
    PyObject *_pass_up, *_pass_up2, *_pass_down_each, *layers;
    PyObject *_s, *peers, *suspected, *claim, *last_heard;
    PyObject *_tick_set, *_tick_at, *_tick_period, *_steady, *_in, *_out;
    PyObject *above, *high, *ack_armed, *ack_aged;
    PyObject *next_seq, *waiting, *unacked, *tries, *sent, *progress_at, *timer,
        *rto_armed_at;
    PyObject *s, *status, *frozen, *view, *members, *now, *ordering;
    PyObject *st, *optimistic, *safe, *causal, *node, *numbers, *bodies, *delivered, *log,
        *deps_of, *next_delivery;
    PyObject *member, *leaving;
    PyObject *relay, *order_interval_us, *interval_ids, *next_number, *stable, *max_unstable,
        *admission, *_released, *_waiting, *_held, *others, *order_packets;
    PyObject *_bounds, *_room, *config, *window, *_piggyback, *rto, *last_sent, *group;
    PyObject *_pass_down, *_next_seq;
    PyObject *srtt, *rttvar, *min_us, *max_us, *samples, *base, *backoff, *packet, *deadline;
};
extern struct lane_names lane_names;

extern PyTypeObject *lane_MsgIdType;  /* abcast.ids.MsgId: a NamedTuple (a tuple subclass) */
extern PyObject *lane_DeliverType;    /* abcast.effects.Deliver */
extern PyObject *lane_TransmitType;   /* abcast.effects.Transmit */
extern PyObject *lane_PacketType;     /* abcast.codec.Packet */
extern PyObject *lane_SOrderType;     /* abcast.ordering.sequencer_wire.SOrder */
extern PyObject *lane_SDataType;      /* abcast.ordering.sequencer_wire.SData */
extern PyObject *lane_PendingType;    /* abcast.reliability.channel._Pending */
extern PyObject *lane_LocalProtocolError;  /* abcast.errors.LocalProtocolError */
extern long long lane_granularity_us;      /* abcast.reliability.rto.GRANULARITY_US */
/* the layers of the one stack shape the lane steps (abcast.runtime.lane.eligible): a
   stack whose layers are not exactly these types is declined before any of its
   attributes is read (a pointer compare on objects the lane holds anyway) */
extern PyObject *lane_OpenDetectorType;   /* abcast.ordering._open_detector.OpenDetector */
extern PyObject *lane_OpenChannelType;    /* abcast.ordering._open_channel.OpenChannel */
extern PyObject *lane_MembershipType;     /* abcast.membership.layer.Membership */
extern PyObject *lane_SequencerType;      /* abcast.ordering.sequencer.Sequencer */

/* The three layers are the runtime's: OpenDetector, OpenChannel, Membership (exactly:
   `type(x) is`, as `eligible` has it; the ordering's type is lane_sequencer_plain's). */
static inline int lane_layers_shaped(PyObject *detector, PyObject *channel,
                                     PyObject *membership) {
    return (PyObject *)Py_TYPE(detector) == lane_OpenDetectorType
           && (PyObject *)Py_TYPE(channel) == lane_OpenChannelType
           && (PyObject *)Py_TYPE(membership) == lane_MembershipType;
}

/* The names interned and the types imported: 0, or -1 with an error set. */
int lane_objects_init(void);
/* `module.name`, a new reference; NULL with an error set */
PyObject *lane_import_attr(const char *module, const char *name);
/* obj.name += delta for an int attribute: 0, or -1 with an error set */
int lane_add_int(PyObject *obj, PyObject *name, Py_ssize_t delta);

/* lane_module.c's `receive` (also called by the pump) */
PyObject *lane_receive(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
/* lane_pump.c: a tcp:// read's frames to `receive` without the Python glue */
int lane_pump_init(void);
PyObject *lane_pump(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *lane_pump_counts(PyObject *module, PyObject *unused);
void lane_pump_reset(void);
/* lane_write.c: a lane step's packets written where tcp:// would write them at once */
int lane_write_init(void);
int lane_carry_out(PyObject *driver, PyObject *outputs, PyObject *now);
PyObject *lane_carry_out_py(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *lane_write_counts(PyObject *module, PyObject *unused);
PyObject *lane_backpressured(PyObject *module, PyObject *stack);
void lane_write_reset(void);

/* New references taken during one call, released at its end. */
#define MAX_HELD 256  /* (a call holds ~40, and ~5 per destination) */
typedef struct {
    PyObject *items[MAX_HELD];
    int n;
} held_refs;

static inline PyObject *hold(held_refs *h, PyObject *o) {
    if (o == NULL) return NULL;
    if (h->n == MAX_HELD) {
        Py_DECREF(o);
        PyErr_SetString(PyExc_SystemError, "abcast._lane: too many references held");
        return NULL;
    }
    h->items[h->n++] = o;
    return o;
}

static inline void release(held_refs *h) {
    while (h->n) Py_DECREF(h->items[--h->n]);
}

/* dict[key] as a reference held by `hp` in `*item`: 1, 0 if absent, -1 with an error set
   (a dict lends its items; Python code may run before the caller is done with one). */
static inline int held_item(held_refs *hp, PyObject *dict, PyObject *key, PyObject **item) {
    *item = PyDict_GetItemWithError(dict, key);
    if (*item == NULL) return PyErr_Occurred() ? -1 : 0;
    return hold(hp, Py_NewRef(*item)) == NULL ? -1 : 1;
}

/* --- the layers' attributes: a slot read and written at its offset ------------------------

   The lane reads and writes the layers' attributes by name (GET, lane_setattr, set_int).
   Where the object's type keeps the name in a slot (`__slots__`: a writable object member
   of it or of a base) and has the generic getattr and setattr, the slot is read or written
   at its offset, as its member descriptor would, without CPython's lookup by name; anything
   else (an attribute in an instance dict, a property, a class attribute) goes through
   PyObject_GetAttr/SetAttr. The offset is cached per name for two types, keyed by the
   type's version tag, which CPython changes whenever the type or a base changes (a class
   attribute set: the cache misses and looks again). ATTR(x) names an interned name. */

#define ATTR(x) (offsetof(struct lane_names, x) / sizeof(PyObject *)), lane_names.x
#define N_NAMES (sizeof(struct lane_names) / sizeof(PyObject *))

typedef struct {
    PyTypeObject *type;  /* (not held: a type's version tag is never reused by another) */
    unsigned int version;
    Py_ssize_t offset;   /* 0: the name is not such a slot of this type */
} slot_way;
extern slot_way lane_slots[N_NAMES][2];  /* (lane_objects.c) */

/* The miss: the type's slot for `name` looked up, cached in `ways` (lane_objects.c). */
Py_ssize_t lane_slot_lookup(slot_way *ways, PyTypeObject *tp, PyObject *name);

static inline Py_ssize_t slot_offset(size_t ix, PyObject *name, PyTypeObject *tp) {
    slot_way *ways = lane_slots[ix];
    if (ways[0].type == tp && ways[0].version == tp->tp_version_tag) return ways[0].offset;
    if (ways[1].type == tp && ways[1].version == tp->tp_version_tag) return ways[1].offset;
    return lane_slot_lookup(ways, tp, name);
}

/* getattr(obj, name), new; NULL with an error set */
static inline PyObject *lane_getattr(PyObject *obj, size_t ix, PyObject *name) {
    Py_ssize_t offset = slot_offset(ix, name, Py_TYPE(obj));
    if (offset) {
        PyObject *v = *(PyObject **)((char *)obj + offset);
        if (v != NULL) return Py_NewRef(v);  /* (unset: getattr raises AttributeError) */
    }
    return PyObject_GetAttr(obj, name);
}

/* setattr(obj, name, v): 0, or -1 with an error set */
static inline int lane_setattr(PyObject *obj, size_t ix, PyObject *name, PyObject *v) {
    Py_ssize_t offset = slot_offset(ix, name, Py_TYPE(obj));
    if (offset) {
        PyObject **slot = (PyObject **)((char *)obj + offset), *old = *slot;
        *slot = Py_NewRef(v);
        Py_XDECREF(old);
        return 0;
    }
    return PyObject_SetAttr(obj, name, v);
}

/* getattr(obj, name) as a reference held until the call ends; NULL with an error set. */
#define GET(dst, obj, name)                                             \
    do {                                                                \
        (dst) = hold(hp, lane_getattr((obj), ATTR(name)));              \
        if ((dst) == NULL) goto error;                                  \
    } while (0)

/* truthiness, or -1 with an error set */
#define TRUTH(dst, obj)                                       \
    do {                                                      \
        (dst) = PyObject_IsTrue(obj);                         \
        if ((dst) < 0) goto error;                            \
    } while (0)

#define DECLINE() goto decline

/* --- the small helpers on Python objects (the rest are in lane_objects.c) ---------------- */

static inline int utf8_equals(PyObject *str, sw_str s) {
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(str, &n);
    if (u == NULL) {
        PyErr_Clear();  /* a str with surrogates matches no frame's string */
        return 0;
    }
    return (size_t)n == s.len && memcmp(u, s.ptr, s.len) == 0;
}

/* A Python int as long long; -1 with an error set if it is not an int or too large. */
static inline int as_ll(PyObject *o, long long *out) {
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "abcast._lane: expected an int, got %R", o);
        return -1;
    }
    *out = PyLong_AsLongLong(o);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static inline int set_int(PyObject *obj, size_t ix, PyObject *name, long long value) {
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL) return -1;
    int rc = lane_setattr(obj, ix, name, v);
    Py_DECREF(v);
    return rc;
}

PyObject *lane_new_msgid(PyObject *origin, long long seq);
PyObject *lane_one_header_packet(PyObject *header, PyObject *payload);
PyObject *lane_node_str(PyObject *members, sw_str node);
int lane_same_id(PyObject *known, sw_id id);

/* --- the layers' steps (lane_steps.c) ---------------------------------------------------- */

int lane_channel_on_ack(PyObject *out, unsigned long long ack, PyObject *now_obj,
                        long long now);
int lane_deliver_ready(PyObject *st, PyObject *numbers, PyObject *bodies,
                       PyObject *delivered, PyObject *log, PyObject *deps_of,
                       long long next_delivery, PyObject *outputs);

/* multicasts to the others: the channel's pass_down_each, the detector's pass_down */

#define MAX_OTHERS 16

/* The links a multicast to `st.others` goes down, read before any change. */
typedef struct {
    Py_ssize_t n;
    PyObject *dests[MAX_OTHERS];  /* (held: `others` is) */
    PyObject *links[MAX_OTHERS];  /* the channel's out-link to each */
    PyObject *in_links, *peers, *group, *me;
    int piggyback;
} links_out;

int lane_size_fits(held_refs *hp, PyObject *channel, PyObject *header_type,
                   Py_ssize_t payload_len);
int lane_check_links(links_out *o, held_refs *hp, PyObject *stack, PyObject *detector,
                     PyObject *channel, PyObject *others, int packets);
int lane_number_links(links_out *o, PyObject *packet, PyObject *now_obj, long long now,
                      unsigned long long *rseq, unsigned long long *rack);
int lane_add_frames(links_out *o, PyObject *frames, const unsigned long long *rseq,
                    const unsigned long long *rack, unsigned long long seq, const sw_id *id,
                    const char *payload, Py_ssize_t payload_len, PyObject *now_obj);

/* the membership layer's steady check: a member (or leaving), not frozen; `*ms` its
   state (held). 1, 0 if not, -1 with an error set. */
int lane_member_steady(held_refs *hp, PyObject *membership, PyObject **ms);

/* The sequencer under the membership layer in its plain steady state: a `Sequencer`
   (exactly), no optimistic, safe or causal option, a view; its state's parts the steps
   use (held). 1/0/-1. */
typedef struct {
    PyObject *st, *members, *me, *numbers, *bodies, *delivered, *log, *deps_of;
    long long next_delivery;
} lane_seq;
int lane_sequencer_plain(held_refs *hp, PyObject *membership, lane_seq *q);

/* the sequencer's admission and numbering of one message */

typedef struct {
    PyObject *released, *numbers;
    long long next_number;
} numbering;

int lane_check_admit(numbering *nb, held_refs *hp, PyObject *st, PyObject *origin,
                     unsigned long long seq);
PyObject *lane_announce_one(numbering *nb, PyObject *st, PyObject *origin,
                            unsigned long long seq, long long *first);

#endif
