/* The steady subset of abcast's wire format (abcast.codec), in C, without Python objects.

   Rules: this is the native lane's codec (docs/performance.md §5, step 2). It knows two
   frame shapes, the two a lone message's frames have in a default sequencer stack
   [failure detector, reliable channel, membership(sequencer)], bottom layer first:

       data   [1, group, sender, flags, [["Fd"], ["RData", seq, ack], ["SData", seq]], payload]
       order  [1, group, sender, flags, [["Fd"], ["RData", seq, ack],
                                         ["SOrder", first, [[node, seq], ...], []]], payload]

   `sw_parse` reads a frame into an `sw_frame` of pointers into the caller's buffer and
   plain integers, and answers 0 ("not mine") for anything else: another shape, a value
   outside the bounds abcast.codec's and the layers' msgspec decoders enforce, a malformed
   or truncated byte, trailing bytes. It never accepts a frame those decoders refuse, and
   what it accepts it reads as they do, so a caller may hand every 0 to the Python path,
   which decodes and refuses it as before. It also answers 0 for a few frames msgspec
   would accept but no abcast node sends, so that it never has to skip arbitrary msgpack:
   extra trailing elements in the envelope or in a header (msgspec ignores them), and an
   `SOrder` with bodies (relay mode). What it accepts, exactly as msgspec does:

   - any msgpack encoding of an array (fix/16/32), an int (fix, [u]int8..64; bounds
     checked on the value), a str (fix/8/16/32) and a bin (8/16/32), minimal or not;
   - strings that are strict UTF-8 (as CPython's decoder: no surrogates, no overlongs,
     nothing above U+10FFFF), their length bounds counted in code points;
   - `RData` without its `ack` (0) and `SOrder` without its `bodies` (empty): msgspec
     fills both from their defaults.

   The encoder writes the bytes msgspec's Encoder writes for the same values (abcast.codec
   .encode_frame): minimal encodings throughout, every default field present. Callers
   size the buffer with `sw_*_frame_size` and fill it with `sw_write_*_frame`; values are
   the caller's to check (`sw_check_*` say whether a peer's decoder would take them).

   The Python module abcast._steady_codec (steady_codec_module.c) wraps both; its tests
   (tests/unit/test_steady_codec.py) hold this file to msgspec, byte for byte. */

#ifndef ABCAST_STEADY_WIRE_H
#define ABCAST_STEADY_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define SW_WIRE_VERSION 1
#define SW_SEQ_MAX (((uint64_t)1) << 62)  /* abcast.codec.Seq: 1..2**62, Count: 0..2**62 */
#define SW_GROUP_MAX_CHARS 128             /* abcast.codec.GroupField */
#define SW_NODE_MAX_CHARS 64               /* abcast.codec.NodeField */
#define SW_FLAGS_MAX 255
#define SW_MAX_ORDER_IDS 4096              /* abcast.ordering.sequencer_wire.MAX_ORDER_IDS */

enum sw_kind { SW_KIND_DATA = 1, SW_KIND_ORDER = 2 };

/* A string of the frame: `len` bytes of strict UTF-8 at `ptr` (inside the frame). */
typedef struct {
    const char *ptr;
    size_t len;
} sw_str;

/* One id of an order: a node and its seq. */
typedef struct {
    sw_str node;
    uint64_t seq;
} sw_id;

/* A parsed steady frame; every pointer points into the parsed buffer. */
typedef struct {
    sw_str group;
    sw_str sender;
    unsigned flags;
    enum sw_kind kind;
    uint64_t rdata_seq;
    uint64_t rdata_ack;
    uint64_t seq;              /* SData.seq, or SOrder.first */
    size_t n_ids;              /* SOrder: how many ids (0 for data) */
    const uint8_t *ids;        /* SOrder: the first id's bytes; read them with sw_next_id */
    const uint8_t *ids_end;
    const uint8_t *payload;
    size_t payload_len;
} sw_frame;

/* 1 and `out` filled if `buf[0:len]` is a steady frame; 0 (and `out` undefined) if not. */
int sw_parse(const uint8_t *buf, size_t len, sw_frame *out);

/* The id at `*cursor` (start at frame->ids, n_ids times); advances the cursor. Only for a
   cursor over the ids of a frame sw_parse accepted: 1, or 0 past the end. */
int sw_next_id(const uint8_t **cursor, const uint8_t *end, sw_id *out);

/* Code points in strict UTF-8 `s[0:n]`, or -1 if it is not strict UTF-8. */
long sw_utf8_chars(const uint8_t *s, size_t n);

/* --- encoding ------------------------------------------------------------------------ */

/* What `sw_write_*` needs: the strings as UTF-8 bytes (not checked here). */
typedef struct {
    sw_str group;
    sw_str sender;
    unsigned flags;
    uint64_t rdata_seq;
    uint64_t rdata_ack;
    uint64_t seq;              /* SData.seq, or SOrder.first */
    const sw_id *ids;          /* SOrder */
    size_t n_ids;
    const uint8_t *payload;
    size_t payload_len;
} sw_out;

/* Bytes of the encoded frame, or 0 if a length does not fit msgpack (> 2**32 - 1). */
size_t sw_data_frame_size(const sw_out *f);
size_t sw_order_frame_size(const sw_out *f);
/* Write the frame to `dst` (sized by the matching sw_*_frame_size); returns the end. */
uint8_t *sw_write_data_frame(uint8_t *dst, const sw_out *f);
uint8_t *sw_write_order_frame(uint8_t *dst, const sw_out *f);

#endif
