/* The steady subset of abcast's wire format: parser and encoder (rules in steady_wire.h). */

#include "steady_wire.h"

#include <string.h>

/* --- reading ------------------------------------------------------------------------- */

/* A cursor over the frame; every read checks `end` before it touches a byte. */
typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} cur;

static inline size_t left(const cur *c) { return (size_t)(c->end - c->p); }

static inline uint64_t be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* An array header: its element count. */
static int read_array(cur *c, uint64_t *n) {
    if (!left(c)) return 0;
    uint8_t b = *c->p;
    if ((b & 0xf0) == 0x90) {
        *n = b & 0x0f;
        c->p += 1;
        return 1;
    }
    int w = b == 0xdc ? 2 : b == 0xdd ? 4 : 0;
    if (!w || left(c) < (size_t)(1 + w)) return 0;
    *n = be(c->p + 1, w);
    c->p += 1 + w;
    return 1;
}

/* A non-negative int, in any encoding (a negative one is refused: no field here takes
   one). */
static int read_uint(cur *c, uint64_t *v) {
    if (!left(c)) return 0;
    uint8_t b = *c->p;
    if (b <= 0x7f) {
        *v = b;
        c->p += 1;
        return 1;
    }
    int w;
    int is_signed = 0;
    switch (b) {
    case 0xcc: w = 1; break;
    case 0xcd: w = 2; break;
    case 0xce: w = 4; break;
    case 0xcf: w = 8; break;
    case 0xd0: w = 1; is_signed = 1; break;
    case 0xd1: w = 2; is_signed = 1; break;
    case 0xd2: w = 4; is_signed = 1; break;
    case 0xd3: w = 8; is_signed = 1; break;
    default: return 0;  /* negative fixint, or not an int */
    }
    if (left(c) < (size_t)(1 + w)) return 0;
    if (is_signed && (c->p[1] & 0x80)) return 0;  /* negative */
    *v = be(c->p + 1, w);
    c->p += 1 + w;
    return 1;
}

/* A str's bytes (not yet checked as UTF-8). */
static int read_str(cur *c, const uint8_t **s, size_t *n) {
    if (!left(c)) return 0;
    uint8_t b = *c->p;
    size_t len;
    int w;
    if ((b & 0xe0) == 0xa0) {
        len = b & 0x1f;
        w = 0;
    } else {
        w = b == 0xd9 ? 1 : b == 0xda ? 2 : b == 0xdb ? 4 : 0;
        if (!w || left(c) < (size_t)(1 + w)) return 0;
        len = (size_t)be(c->p + 1, w);
    }
    if (left(c) - (size_t)(1 + w) < len) return 0;
    *s = c->p + 1 + w;
    *n = len;
    c->p += (size_t)(1 + w) + len;
    return 1;
}

/* A bin's bytes. */
static int read_bin(cur *c, const uint8_t **s, size_t *n) {
    if (!left(c)) return 0;
    uint8_t b = *c->p;
    int w = b == 0xc4 ? 1 : b == 0xc5 ? 2 : b == 0xc6 ? 4 : 0;
    if (!w || left(c) < (size_t)(1 + w)) return 0;
    size_t len = (size_t)be(c->p + 1, w);
    if (left(c) - (size_t)(1 + w) < len) return 0;
    *s = c->p + 1 + w;
    *n = len;
    c->p += (size_t)(1 + w) + len;
    return 1;
}

long sw_utf8_chars(const uint8_t *s, size_t n) {
    long chars = 0;
    size_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        if (b < 0x80) {
            i += 1;
        } else if (b >= 0xc2 && b <= 0xdf) {
            if (n - i < 2 || (s[i + 1] & 0xc0) != 0x80) return -1;
            i += 2;
        } else if (b >= 0xe0 && b <= 0xef) {
            if (n - i < 3) return -1;
            uint8_t b1 = s[i + 1];
            uint8_t lo = b == 0xe0 ? 0xa0 : 0x80;  /* overlong */
            uint8_t hi = b == 0xed ? 0x9f : 0xbf;  /* surrogates */
            if (b1 < lo || b1 > hi || (s[i + 2] & 0xc0) != 0x80) return -1;
            i += 3;
        } else if (b >= 0xf0 && b <= 0xf4) {
            if (n - i < 4) return -1;
            uint8_t b1 = s[i + 1];
            uint8_t lo = b == 0xf0 ? 0x90 : 0x80;  /* overlong */
            uint8_t hi = b == 0xf4 ? 0x8f : 0xbf;  /* above U+10FFFF */
            if (b1 < lo || b1 > hi || (s[i + 2] & 0xc0) != 0x80
                || (s[i + 3] & 0xc0) != 0x80)
                return -1;
            i += 4;
        } else {
            return -1;  /* a continuation byte, an overlong lead (c0, c1), or f5..ff */
        }
        chars += 1;
    }
    return chars;
}

/* A str of 1..max_chars code points of strict UTF-8. */
static int read_text(cur *c, sw_str *out, long max_chars) {
    const uint8_t *s;
    size_t n;
    if (!read_str(c, &s, &n)) return 0;
    /* a code point is 1..4 bytes: rule out most of the bad ones before counting */
    if (n == 0 || n > (size_t)max_chars * 4) return 0;
    long chars = sw_utf8_chars(s, n);
    if (chars < 1 || chars > max_chars) return 0;
    out->ptr = (const char *)s;
    out->len = n;
    return 1;
}

/* A str equal to `tag` (a struct's tag: compared as bytes, as msgspec does). */
static int read_tag(cur *c, const char *tag, size_t tag_len) {
    const uint8_t *s;
    size_t n;
    return read_str(c, &s, &n) && n == tag_len && memcmp(s, tag, n) == 0;
}

static inline int read_seq(cur *c, uint64_t *v) {   /* abcast.codec.Seq */
    return read_uint(c, v) && *v >= 1 && *v <= SW_SEQ_MAX;
}

static inline int read_count(cur *c, uint64_t *v) { /* abcast.codec.Count */
    return read_uint(c, v) && *v <= SW_SEQ_MAX;
}

/* The tag of the top layer's header: which one, and the array's length. */
static int read_top_tag(cur *c, enum sw_kind *kind) {
    const uint8_t *s;
    size_t n;
    if (!read_str(c, &s, &n)) return 0;
    if (n == 5 && memcmp(s, "SData", 5) == 0) {
        *kind = SW_KIND_DATA;
        return 1;
    }
    if (n == 6 && memcmp(s, "SOrder", 6) == 0) {
        *kind = SW_KIND_ORDER;
        return 1;
    }
    return 0;
}

/* One id of an order: [node, seq], exactly two elements (a fixed tuple in msgspec). */
static int read_id(cur *c, sw_id *id) {
    uint64_t n;
    return read_array(c, &n) && n == 2 && read_text(c, &id->node, SW_NODE_MAX_CHARS)
           && read_seq(c, &id->seq);
}

int sw_parse(const uint8_t *buf, size_t len, sw_frame *out) {
    cur c = {buf, buf + len};
    uint64_t n, v;
    /* the envelope (abcast.codec.Envelope; decode_envelope checks the version) */
    if (!read_array(&c, &n) || n != 6) return 0;
    if (!read_uint(&c, &v) || v != SW_WIRE_VERSION) return 0;
    if (!read_text(&c, &out->group, SW_GROUP_MAX_CHARS)) return 0;
    if (!read_text(&c, &out->sender, SW_NODE_MAX_CHARS)) return 0;
    if (!read_uint(&c, &v) || v > SW_FLAGS_MAX) return 0;
    out->flags = (unsigned)v;
    if (!read_array(&c, &n) || n != 3) return 0;
    /* the failure detector's Fd: no fields */
    if (!read_array(&c, &n) || n != 1 || !read_tag(&c, "Fd", 2)) return 0;
    /* the channel's RData(seq, ack=0) */
    if (!read_array(&c, &n) || n < 2 || n > 3 || !read_tag(&c, "RData", 5)) return 0;
    if (!read_seq(&c, &out->rdata_seq)) return 0;
    out->rdata_ack = 0;
    if (n == 3 && !read_count(&c, &out->rdata_ack)) return 0;
    /* the sequencer's SData(seq) or SOrder(first, ids, bodies=[]) */
    if (!read_array(&c, &n) || !read_top_tag(&c, &out->kind)) return 0;
    if (out->kind == SW_KIND_DATA) {
        if (n != 2 || !read_seq(&c, &out->seq)) return 0;
        out->n_ids = 0;
        out->ids = out->ids_end = c.p;
    } else {
        if (n < 3 || n > 4 || !read_seq(&c, &out->seq)) return 0;
        uint64_t ids;
        if (!read_array(&c, &ids) || ids > SW_MAX_ORDER_IDS) return 0;
        out->n_ids = (size_t)ids;
        out->ids = c.p;
        sw_id id;
        for (uint64_t i = 0; i < ids; i++)
            if (!read_id(&c, &id)) return 0;
        out->ids_end = c.p;
        /* bodies: absent or empty (a relay-mode order goes the Python way) */
        if (n == 4 && (!read_array(&c, &v) || v != 0)) return 0;
    }
    const uint8_t *payload;
    if (!read_bin(&c, &payload, &out->payload_len)) return 0;
    out->payload = payload;
    return c.p == c.end;  /* msgspec refuses trailing bytes */
}

int sw_next_id(const uint8_t **cursor, const uint8_t *end, sw_id *out) {
    cur c = {*cursor, end};
    if (!read_id(&c, out)) return 0;
    *cursor = c.p;
    return 1;
}

/* --- writing (msgspec's choices: the smallest encoding of each value) ---------------- */

static size_t uint_size(uint64_t v) {
    return v <= 0x7f ? 1 : v <= 0xff ? 2 : v <= 0xffff ? 3 : v <= 0xffffffffu ? 5 : 9;
}

static inline uint8_t *put_be(uint8_t *o, uint64_t v, int w) {
    for (int i = w - 1; i >= 0; i--) {
        o[i] = (uint8_t)(v & 0xff);
        v >>= 8;
    }
    return o + w;
}

static uint8_t *put_uint(uint8_t *o, uint64_t v) {
    if (v <= 0x7f) {
        *o = (uint8_t)v;
        return o + 1;
    }
    if (v <= 0xff) { *o = 0xcc; return put_be(o + 1, v, 1); }
    if (v <= 0xffff) { *o = 0xcd; return put_be(o + 1, v, 2); }
    if (v <= 0xffffffffu) { *o = 0xce; return put_be(o + 1, v, 4); }
    *o = 0xcf;
    return put_be(o + 1, v, 8);
}

static size_t str_size(size_t n) {
    return n + (n < 32 ? 1 : n <= 0xff ? 2 : n <= 0xffff ? 3 : 5);
}

static uint8_t *put_str(uint8_t *o, const char *s, size_t n) {
    if (n < 32) {
        *o++ = (uint8_t)(0xa0 | n);
    } else if (n <= 0xff) {
        *o = 0xd9;
        o = put_be(o + 1, n, 1);
    } else if (n <= 0xffff) {
        *o = 0xda;
        o = put_be(o + 1, n, 2);
    } else {
        *o = 0xdb;
        o = put_be(o + 1, n, 4);
    }
    memcpy(o, s, n);
    return o + n;
}

static size_t bin_size(size_t n) {
    return n + (n <= 0xff ? 2 : n <= 0xffff ? 3 : 5);
}

static uint8_t *put_bin(uint8_t *o, const uint8_t *s, size_t n) {
    if (n <= 0xff) {
        *o = 0xc4;
        o = put_be(o + 1, n, 1);
    } else if (n <= 0xffff) {
        *o = 0xc5;
        o = put_be(o + 1, n, 2);
    } else {
        *o = 0xc6;
        o = put_be(o + 1, n, 4);
    }
    if (n) memcpy(o, s, n);
    return o + n;
}

static size_t array_size(size_t n) { return n < 16 ? 1 : n <= 0xffff ? 3 : 5; }

static uint8_t *put_array(uint8_t *o, size_t n) {
    if (n < 16) {
        *o = (uint8_t)(0x90 | n);
        return o + 1;
    }
    if (n <= 0xffff) {
        *o = 0xdc;
        return put_be(o + 1, n, 2);
    }
    *o = 0xdd;
    return put_be(o + 1, n, 4);
}

/* What both frames share before the top header: the envelope's first five elements'
   start, the detector's and the channel's headers. */
#define FD_HEADER "\x91\xa2" "Fd"
#define FD_HEADER_LEN 4

static int lengths_fit(const sw_out *f) {
    const size_t max = 0xffffffffu;
    return f->group.len <= max && f->sender.len <= max && f->payload_len <= max;
}

static size_t common_size(const sw_out *f) {
    return 1 + uint_size(SW_WIRE_VERSION) + str_size(f->group.len) + str_size(f->sender.len)
           + uint_size(f->flags) + 1 /* [h0, h1, h2] */ + FD_HEADER_LEN
           + 1 + 6 /* ["RData" */ + uint_size(f->rdata_seq) + uint_size(f->rdata_ack)
           + bin_size(f->payload_len);
}

static uint8_t *put_common(uint8_t *o, const sw_out *f) {
    o = put_array(o, 6);
    o = put_uint(o, SW_WIRE_VERSION);
    o = put_str(o, f->group.ptr, f->group.len);
    o = put_str(o, f->sender.ptr, f->sender.len);
    o = put_uint(o, f->flags);
    o = put_array(o, 3);
    memcpy(o, FD_HEADER, FD_HEADER_LEN);
    o += FD_HEADER_LEN;
    o = put_array(o, 3);
    o = put_str(o, "RData", 5);
    o = put_uint(o, f->rdata_seq);
    return put_uint(o, f->rdata_ack);
}

size_t sw_data_frame_size(const sw_out *f) {
    if (!lengths_fit(f)) return 0;
    return common_size(f) + 1 + 6 /* ["SData" */ + uint_size(f->seq);
}

uint8_t *sw_write_data_frame(uint8_t *o, const sw_out *f) {
    o = put_common(o, f);
    o = put_array(o, 2);
    o = put_str(o, "SData", 5);
    o = put_uint(o, f->seq);
    return put_bin(o, f->payload, f->payload_len);
}

size_t sw_order_frame_size(const sw_out *f) {
    if (!lengths_fit(f) || f->n_ids > 0xffffffffu) return 0;
    size_t size = common_size(f) + 1 + 7 /* ["SOrder" */ + uint_size(f->seq)
                  + array_size(f->n_ids) + 1 /* bodies: [] */;
    for (size_t i = 0; i < f->n_ids; i++) {
        if (f->ids[i].node.len > 0xffffffffu) return 0;
        size += 1 + str_size(f->ids[i].node.len) + uint_size(f->ids[i].seq);
    }
    return size;
}

uint8_t *sw_write_order_frame(uint8_t *o, const sw_out *f) {
    o = put_common(o, f);
    o = put_array(o, 4);
    o = put_str(o, "SOrder", 6);
    o = put_uint(o, f->seq);
    o = put_array(o, f->n_ids);
    for (size_t i = 0; i < f->n_ids; i++) {
        o = put_array(o, 2);
        o = put_str(o, f->ids[i].node.ptr, f->ids[i].node.len);
        o = put_uint(o, f->ids[i].seq);
    }
    o = put_array(o, 0);
    return put_bin(o, f->payload, f->payload_len);
}
