/* OTLP ExportTraceServiceRequest protobuf -> the column buffers of otel_traces, in one pass in C.
 * (The Collector's JSON lines -> the same columns: the section "OTLP JSON lines" below.)
 *
 * The receiver's CPU went mostly to walking upb's message objects from Python (16-20 us per span).
 * This reads the wire format directly and writes Arrow-layout buffers (int32 offsets + UTF-8 data
 * for strings, little-endian int64/uint64 for times, int8 codes for kind and status) that
 * proto_columns.py wraps into Arrow arrays without touching a Python object per value.
 *
 * It is a fast path, not a second statement of the mapping: it handles the valid messages that
 * exporters send (scalar attribute values, well-formed ids and times) and returns None for anything
 * else -- malformed wire data, invalid UTF-8, an id of the wrong length or all zeros, a time beyond
 * 2^63-1 ns, an unknown kind or status code, array or kvlist values, very long attribute lists --
 * and then the Python decoder (proto_columns.py over upb) does the message, with its exact rows,
 * rejections and reasons. tests/collector/test_otlp_native.py holds the two to the same tables.
 *
 * Protobuf semantics kept: fields in any order; a repeated field's elements may be interleaved
 * with other fields; the last value of a singular scalar wins; a singular message given twice is
 * merged (its repeated fields concatenate); a oneof takes the last member set. Attribute lists
 * become maps as Python's dict would make them: a repeated key keeps its first position and takes
 * its last value. Unknown fields are skipped.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __APPLE__
#include <xlocale.h>
#endif

/* Attribute lists longer than this go to the Python decoder: dedupe here is quadratic. */
#define MAX_ATTRIBUTES 128

/* ---- growable buffers --------------------------------------------------------------------- */

typedef struct {
    char *data;
    size_t len;
    size_t cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    char *data = PyMem_RawRealloc(b->data, cap); /* raw: the JSON decoder runs without the GIL */
    if (data == NULL) return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *p, size_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static int buf_i64(Buf *b, int64_t v) { return buf_put(b, &v, sizeof v); }
static int buf_u64(Buf *b, uint64_t v) { return buf_put(b, &v, sizeof v); }
static int buf_i8(Buf *b, int8_t v) { return buf_put(b, &v, sizeof v); }

/* Arrow's int32 offsets: a column past 2 GiB is refused (the Python path copes or says why). */
static int buf_offset(Buf *b, size_t offset) {
    if (offset > INT32_MAX) return -1;
    int32_t v = (int32_t)offset;
    return buf_put(b, &v, sizeof v);
}

static void buf_free(Buf *b) {
    PyMem_RawFree(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* A string column: offsets (n + 1 int32) and data. */
typedef struct {
    Buf offsets;
    Buf data;
} Strings;

static int strings_init(Strings *s) { return buf_offset(&s->offsets, 0); }

static int strings_put(Strings *s, const char *p, size_t n) {
    if (buf_put(&s->data, p, n) < 0) return -1;
    return buf_offset(&s->offsets, s->data.len);
}

static const char HEX[] = "0123456789abcdef";

static int strings_put_hex(Strings *s, const uint8_t *p, size_t n) {
    if (buf_reserve(&s->data, 2 * n) < 0) return -1;
    char *out = s->data.data + s->data.len;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = HEX[p[i] >> 4];
        out[2 * i + 1] = HEX[p[i] & 15];
    }
    s->data.len += 2 * n;
    return buf_offset(&s->offsets, s->data.len);
}

static void strings_free(Strings *s) {
    buf_free(&s->offsets);
    buf_free(&s->data);
}

/* A map<string, string> column: keys, values and one int32 offset per map (n + 1). */
typedef struct {
    Strings keys;
    Strings values;
    Buf offsets;
} Maps;

static int maps_init(Maps *m) {
    if (strings_init(&m->keys) < 0 || strings_init(&m->values) < 0) return -1;
    return buf_offset(&m->offsets, 0);
}

static size_t maps_entries(const Maps *m) { return m->keys.offsets.len / sizeof(int32_t) - 1; }

static void maps_free(Maps *m) {
    strings_free(&m->keys);
    strings_free(&m->values);
    buf_free(&m->offsets);
}

/* ---- the columns of one message ----------------------------------------------------------- */

typedef struct {
    Buf start;          /* int64 ns */
    Strings trace_id, span_id, parent_id, trace_state, name;
    Buf kind;           /* int8, OTLP SpanKind number */
    Buf resource_index; /* int32 */
    Buf scope_index;    /* int32 */
    Buf duration;       /* uint64 ns */
    Buf status_code;    /* int8, OTLP StatusCode number */
    Strings status_message;
    Maps attributes;
    Buf event_offsets;  /* int32 per span (n + 1) */
    Buf event_time;     /* int64 ns */
    Strings event_name;
    Maps event_attributes;
    Buf link_offsets;   /* int32 per span (n + 1) */
    Strings link_trace_id, link_span_id, link_trace_state;
    Maps link_attributes;
    Maps resource_attributes;
    Strings service_name;
    Strings scope_name, scope_version;
    size_t spans, events, links, resources, scopes;
} Columns;

static int columns_init(Columns *c) {
    memset(c, 0, sizeof *c);
    Strings *strings[] = {&c->trace_id, &c->span_id, &c->parent_id, &c->trace_state, &c->name,
                          &c->status_message, &c->event_name, &c->link_trace_id, &c->link_span_id,
                          &c->link_trace_state, &c->service_name, &c->scope_name, &c->scope_version};
    for (size_t i = 0; i < sizeof strings / sizeof *strings; i++)
        if (strings_init(strings[i]) < 0) return -1;
    Maps *maps[] = {&c->attributes, &c->event_attributes, &c->link_attributes, &c->resource_attributes};
    for (size_t i = 0; i < sizeof maps / sizeof *maps; i++)
        if (maps_init(maps[i]) < 0) return -1;
    if (buf_offset(&c->event_offsets, 0) < 0 || buf_offset(&c->link_offsets, 0) < 0) return -1;
    return 0;
}

static void columns_free(Columns *c) {
    Buf *bufs[] = {&c->start, &c->kind, &c->resource_index, &c->scope_index, &c->duration,
                   &c->status_code, &c->event_offsets, &c->event_time, &c->link_offsets};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) buf_free(bufs[i]);
    Strings *strings[] = {&c->trace_id, &c->span_id, &c->parent_id, &c->trace_state, &c->name,
                          &c->status_message, &c->event_name, &c->link_trace_id, &c->link_span_id,
                          &c->link_trace_state, &c->service_name, &c->scope_name, &c->scope_version};
    for (size_t i = 0; i < sizeof strings / sizeof *strings; i++) strings_free(strings[i]);
    Maps *maps[] = {&c->attributes, &c->event_attributes, &c->link_attributes, &c->resource_attributes};
    for (size_t i = 0; i < sizeof maps / sizeof *maps; i++) maps_free(maps[i]);
}

/* ---- wire format -------------------------------------------------------------------------- */

/* Results of the parse functions: OK, or hand the message to the Python decoder (UNSUPPORTED),
 * or out of memory (NOMEM, a Python exception is set). */
enum { OK = 0, UNSUPPORTED = 1, NOMEM = 2 };

#define TRY(expr)                    \
    do {                             \
        int rc_ = (expr);            \
        if (rc_ != OK) return rc_;   \
    } while (0)
/* A buffer that cannot grow (no memory, or an Arrow offset past 2 GiB): the Python decoder takes
 * the message and raises MemoryError itself if memory is really short. */
#define MEM(expr)                              \
    do {                                       \
        if ((expr) < 0) return UNSUPPORTED;    \
    } while (0)

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} Reader;

static int read_varint(Reader *r, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->p >= r->end) return UNSUPPORTED;
        uint8_t byte = *r->p++;
        if (shift == 63 && byte > 1) return UNSUPPORTED; /* more than 64 bits */
        v |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = v;
            return OK;
        }
    }
    return UNSUPPORTED;
}

static int read_fixed64(Reader *r, uint64_t *out) {
    if (r->end - r->p < 8) return UNSUPPORTED;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | r->p[i];
    r->p += 8;
    *out = v;
    return OK;
}

static int read_len(Reader *r, Reader *sub) {
    uint64_t n;
    TRY(read_varint(r, &n));
    if (n > (uint64_t)(r->end - r->p)) return UNSUPPORTED;
    sub->p = r->p;
    sub->end = r->p + n;
    r->p += n;
    return OK;
}

/* The next field's number and wire type; *done at the end of the message. */
static int read_tag(Reader *r, uint32_t *field, uint32_t *wire, int *done) {
    if (r->p >= r->end) {
        *done = 1;
        return OK;
    }
    uint64_t tag;
    TRY(read_varint(r, &tag));
    *field = (uint32_t)(tag >> 3);
    *wire = (uint32_t)(tag & 7);
    if (tag >> 3 == 0 || tag >> 32) return UNSUPPORTED;
    *done = 0;
    return OK;
}

/* A field this decoder does not read. Numbers skip; a length-delimited one goes to the Python
 * decoder, because it may be a string or message of a newer schema that upb checks (UTF-8). */
static int skip_field(Reader *r, uint32_t wire) {
    uint64_t ignored;
    switch (wire) {
        case 0: return read_varint(r, &ignored);
        case 1: return read_fixed64(r, &ignored);
        case 5:
            if (r->end - r->p < 4) return UNSUPPORTED;
            r->p += 4;
            return OK;
        default: return UNSUPPORTED; /* length-delimited, and groups */
    }
}

/* Strict UTF-8 as Python decodes it: no overlong forms, no surrogates, nothing past U+10FFFF. */
static int valid_utf8(const uint8_t *p, size_t n) {
    const uint8_t *end = p + n;
    while (p < end) {
        uint8_t c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        size_t need;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf) {
            need = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            need = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if ((size_t)(end - p) <= need) return 0;
        for (size_t i = 1; i <= need; i++) {
            if ((p[i] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        if ((need == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (need == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return 0;
        p += need + 1;
    }
    return 1;
}

static int read_string(Reader *r, Reader *s) {
    TRY(read_len(r, s));
    return valid_utf8(s->p, (size_t)(s->end - s->p)) ? OK : UNSUPPORTED;
}

/* ---- attribute lists ---------------------------------------------------------------------- */

/* One attribute list being gathered: keys point into the message, values into ``values``. */
typedef struct {
    const uint8_t *key[MAX_ATTRIBUTES];
    size_t key_len[MAX_ATTRIBUTES];
    size_t value_start[MAX_ATTRIBUTES];
    size_t value_len[MAX_ATTRIBUTES];
    size_t n;
    Buf values;
} Attrs;

static void attrs_reset(Attrs *a) {
    a->n = 0;
    a->values.len = 0;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int put_base64(Buf *b, const uint8_t *p, size_t n) {
    if (buf_reserve(b, (n + 2) / 3 * 4) < 0) return -1;
    char *out = b->data + b->len;
    size_t i = 0, o = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = ((uint32_t)p[i] << 16) | ((uint32_t)p[i + 1] << 8) | p[i + 2];
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = B64[(v >> 6) & 63];
        out[o++] = B64[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (n - i == 2) {
        uint32_t v = ((uint32_t)p[i] << 16) | ((uint32_t)p[i + 1] << 8);
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = B64[(v >> 6) & 63];
        out[o++] = '=';
    }
    b->len += o;
    return 0;
}

/* An AnyValue as the stored string (rows.py's rules), appended to ``out``; the oneof's last
 * member wins, so the value is remembered and written once the message ends. */
static int any_value(Reader *r, int *which, Reader *last) {
    /* which: 0 unset, 1 string, 2 bool, 3 int, 4 double, 7 bytes */
    uint32_t field, wire;
    int done;
    for (;;) {
        TRY(read_tag(r, &field, &wire, &done));
        if (done) break;
        if (field >= 1 && field <= 7) {
            if (field == 5 || field == 6) return UNSUPPORTED; /* array and kvlist: the Python path */
            static const uint32_t wires[] = {0, 2, 0, 0, 1, 2, 2, 2};
            if (wire != wires[field]) return UNSUPPORTED;
            *which = (int)field;
            if (field == 1) {
                TRY(read_string(r, last));
            } else if (field == 7) {
                TRY(read_len(r, last));
            } else if (field == 4) {
                /* keep the 8 bytes */
                if (r->end - r->p < 8) return UNSUPPORTED;
                last->p = r->p;
                last->end = r->p + 8;
                r->p += 8;
            } else {
                last->p = r->p;
                uint64_t ignored;
                TRY(read_varint(r, &ignored));
                last->end = r->p;
            }
        } else {
            TRY(skip_field(r, wire));
        }
    }
    return OK;
}

static int write_value(Buf *out, int which, Reader *v) {
    char text[32];
    switch (which) {
        case 0: return OK;
        case 1: MEM(buf_put(out, v->p, (size_t)(v->end - v->p))); return OK;
        case 2: {
            Reader copy = *v;
            uint64_t x;
            TRY(read_varint(&copy, &x));
            if (x) MEM(buf_put(out, "true", 4));
            else MEM(buf_put(out, "false", 5));
            return OK;
        }
        case 3: {
            Reader copy = *v;
            uint64_t x;
            TRY(read_varint(&copy, &x));
            int n = snprintf(text, sizeof text, "%lld", (long long)(int64_t)x);
            MEM(buf_put(out, text, (size_t)n));
            return OK;
        }
        case 4: {
            Reader copy = *v;
            uint64_t bits;
            TRY(read_fixed64(&copy, &bits));
            double d;
            memcpy(&d, &bits, sizeof d);
            if (Py_IS_NAN(d)) {
                MEM(buf_put(out, "NaN", 3));
            } else if (Py_IS_INFINITY(d)) {
                if (d > 0) MEM(buf_put(out, "Infinity", 8));
                else MEM(buf_put(out, "-Infinity", 9));
            } else {
                /* repr(float): the shortest string that reads back as the same double */
                char *repr = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
                if (repr == NULL) return NOMEM;
                int rc = buf_put(out, repr, strlen(repr));
                PyMem_Free(repr);
                MEM(rc);
            }
            return OK;
        }
        case 7: MEM(put_base64(out, v->p, (size_t)(v->end - v->p))); return OK;
    }
    return UNSUPPORTED;
}

/* One KeyValue, added to ``a`` (a repeated key keeps its first place and takes the new value). */
static int key_value(Reader *r, Attrs *a) {
    uint32_t field, wire;
    int done;
    Reader key = {r->p, r->p};
    int which = 0;
    Reader value = {NULL, NULL};
    for (;;) {
        TRY(read_tag(r, &field, &wire, &done));
        if (done) break;
        if (field == 1) {
            if (wire != 2) return UNSUPPORTED;
            TRY(read_string(r, &key));
        } else if (field == 2) {
            if (wire != 2) return UNSUPPORTED;
            Reader sub;
            TRY(read_len(r, &sub));
            /* a second AnyValue merges into the first: its last member set wins */
            TRY(any_value(&sub, &which, &value));
        } else {
            TRY(skip_field(r, wire));
        }
    }
    size_t key_len = (size_t)(key.end - key.p);
    size_t slot = a->n;
    for (size_t i = 0; i < a->n; i++) {
        if (a->key_len[i] == key_len && memcmp(a->key[i], key.p, key_len) == 0) {
            slot = i;
            break;
        }
    }
    if (slot == a->n) {
        if (a->n == MAX_ATTRIBUTES) return UNSUPPORTED;
        a->key[slot] = key.p;
        a->key_len[slot] = key_len;
        a->n++;
    }
    size_t start = a->values.len;
    TRY(write_value(&a->values, which, &value));
    a->value_start[slot] = start; /* a replaced value's old bytes stay unused in the scratch */
    a->value_len[slot] = a->values.len - start;
    return OK;
}

static int attrs_add(Reader *r, Attrs *a) {
    Reader sub;
    TRY(read_len(r, &sub));
    return key_value(&sub, a);
}

/* Attribute i's value (the scratch buffer is unallocated while every value is empty). */
static const char *attr_value(const Attrs *a, size_t i) {
    return a->values.data ? a->values.data + a->value_start[i] : "";
}

static int attrs_emit(const Attrs *a, Maps *m) {
    for (size_t i = 0; i < a->n; i++) {
        MEM(strings_put(&m->keys, (const char *)a->key[i], a->key_len[i]));
        MEM(strings_put(&m->values, attr_value(a, i), a->value_len[i]));
    }
    MEM(buf_offset(&m->offsets, maps_entries(m)));
    return OK;
}

/* ---- messages ----------------------------------------------------------------------------- */

typedef struct {
    Columns c;
    Attrs span_attrs, event_attrs, link_attrs, resource_attrs, scratch_attrs;
} Decoder;

static int is_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

#define MAX_NS ((uint64_t)INT64_MAX)

static int event(Decoder *d, Reader *r) {
    uint32_t field, wire;
    int done;
    uint64_t time_ns = 0;
    Reader name = {r->p, r->p};
    attrs_reset(&d->event_attrs);
    for (;;) {
        TRY(read_tag(r, &field, &wire, &done));
        if (done) break;
        if (field == 1) {
            if (wire != 1) return UNSUPPORTED;
            TRY(read_fixed64(r, &time_ns));
        } else if (field == 2) {
            if (wire != 2) return UNSUPPORTED;
            TRY(read_string(r, &name));
        } else if (field == 3) {
            if (wire != 2) return UNSUPPORTED;
            TRY(attrs_add(r, &d->event_attrs));
        } else {
            TRY(skip_field(r, wire));
        }
    }
    if (time_ns > MAX_NS) return UNSUPPORTED;
    MEM(buf_i64(&d->c.event_time, (int64_t)time_ns));
    MEM(strings_put(&d->c.event_name, (const char *)name.p, (size_t)(name.end - name.p)));
    TRY(attrs_emit(&d->event_attrs, &d->c.event_attributes));
    d->c.events++;
    return OK;
}

static int span_link(Decoder *d, Reader *r) {
    uint32_t field, wire;
    int done;
    Reader trace_id = {r->p, r->p}, span_id = {r->p, r->p}, state = {r->p, r->p};
    attrs_reset(&d->link_attrs);
    for (;;) {
        TRY(read_tag(r, &field, &wire, &done));
        if (done) break;
        if (field >= 1 && field <= 4 && wire != 2) return UNSUPPORTED;
        if (field == 1) {
            TRY(read_len(r, &trace_id));
        } else if (field == 2) {
            TRY(read_len(r, &span_id));
        } else if (field == 3) {
            TRY(read_string(r, &state));
        } else if (field == 4) {
            TRY(attrs_add(r, &d->link_attrs));
        } else {
            TRY(skip_field(r, wire));
        }
    }
    if (trace_id.end - trace_id.p != 16 || is_zero(trace_id.p, 16)) return UNSUPPORTED;
    if (span_id.end - span_id.p != 8 || is_zero(span_id.p, 8)) return UNSUPPORTED;
    MEM(strings_put_hex(&d->c.link_trace_id, trace_id.p, 16));
    MEM(strings_put_hex(&d->c.link_span_id, span_id.p, 8));
    MEM(strings_put(&d->c.link_trace_state, (const char *)state.p, (size_t)(state.end - state.p)));
    TRY(attrs_emit(&d->link_attrs, &d->c.link_attributes));
    d->c.links++;
    return OK;
}

static int status(Reader *r, Reader *message, uint64_t *code) {
    uint32_t field, wire;
    int done;
    for (;;) {
        TRY(read_tag(r, &field, &wire, &done));
        if (done) break;
        if (field == 2) {
            if (wire != 2) return UNSUPPORTED;
            TRY(read_string(r, message));
        } else if (field == 3) {
            if (wire != 0) return UNSUPPORTED;
            TRY(read_varint(r, code));
        } else {
            TRY(skip_field(r, wire));
        }
    }
    return OK;
}

static int span(Decoder *d, Reader *r, int32_t resource_index, int32_t scope_index) {
    Columns *c = &d->c;
    uint32_t field, wire;
    int done;
    const uint8_t *here = r->p;
    Reader trace_id = {here, here}, span_id = {here, here}, parent = {here, here};
    Reader state = {here, here}, name = {here, here}, message = {here, here};
    uint64_t kind = 0, start = 0, end = 0, code = 0;
    attrs_reset(&d->span_attrs);
    for (;;) {
        TRY(read_tag(r, &field, &wire, &done));
        if (done) break;
        switch (field) {
            case 1: case 2: case 3: case 4: case 5: case 9: case 11: case 13: case 15:
                if (wire != 2) return UNSUPPORTED;
                break;
            case 6:
                if (wire != 0) return UNSUPPORTED;
                break;
            case 7: case 8:
                if (wire != 1) return UNSUPPORTED;
                break;
        }
        switch (field) {
            case 1: TRY(read_len(r, &trace_id)); break;
            case 2: TRY(read_len(r, &span_id)); break;
            case 3: TRY(read_string(r, &state)); break;
            case 4: TRY(read_len(r, &parent)); break;
            case 5: TRY(read_string(r, &name)); break;
            case 6: TRY(read_varint(r, &kind)); break;
            case 7: TRY(read_fixed64(r, &start)); break;
            case 8: TRY(read_fixed64(r, &end)); break;
            case 9: TRY(attrs_add(r, &d->span_attrs)); break;
            case 11: {
                Reader sub;
                TRY(read_len(r, &sub));
                TRY(event(d, &sub));
                break;
            }
            case 13: {
                Reader sub;
                TRY(read_len(r, &sub));
                TRY(span_link(d, &sub));
                break;
            }
            case 15: {
                Reader sub;
                TRY(read_len(r, &sub));
                TRY(status(&sub, &message, &code)); /* given twice, the two merge */
                break;
            }
            default: TRY(skip_field(r, wire));
        }
    }
    if (start > MAX_NS || end > MAX_NS) return UNSUPPORTED;
    if (trace_id.end - trace_id.p != 16 || is_zero(trace_id.p, 16)) return UNSUPPORTED;
    if (span_id.end - span_id.p != 8 || is_zero(span_id.p, 8)) return UNSUPPORTED;
    size_t parent_len = (size_t)(parent.end - parent.p);
    if (parent_len != 0 && parent_len != 8) return UNSUPPORTED;
    if (kind > 5 || code > 2) return UNSUPPORTED;
    MEM(buf_i64(&c->start, (int64_t)start));
    MEM(strings_put_hex(&c->trace_id, trace_id.p, 16));
    MEM(strings_put_hex(&c->span_id, span_id.p, 8));
    MEM(strings_put_hex(&c->parent_id, parent.p, parent_len));
    MEM(strings_put(&c->trace_state, (const char *)state.p, (size_t)(state.end - state.p)));
    MEM(strings_put(&c->name, (const char *)name.p, (size_t)(name.end - name.p)));
    MEM(buf_i8(&c->kind, (int8_t)kind));
    MEM(buf_put(&c->resource_index, &resource_index, sizeof resource_index));
    MEM(buf_put(&c->scope_index, &scope_index, sizeof scope_index));
    MEM(buf_u64(&c->duration, end > start ? end - start : 0));
    MEM(buf_i8(&c->status_code, (int8_t)code));
    MEM(strings_put(&c->status_message, (const char *)message.p, (size_t)(message.end - message.p)));
    TRY(attrs_emit(&d->span_attrs, &c->attributes));
    MEM(buf_offset(&c->event_offsets, c->events));
    MEM(buf_offset(&c->link_offsets, c->links));
    c->spans++;
    return OK;
}

static int scope(Decoder *d, Reader *r, Reader *name, Reader *version) {
    uint32_t field, wire;
    int done;
    for (;;) {
        TRY(read_tag(r, &field, &wire, &done));
        if (done) break;
        if (field == 1 || field == 2) {
            if (wire != 2) return UNSUPPORTED;
            TRY(read_string(r, field == 1 ? name : version));
        } else if (field == 3 && wire == 2) {
            /* not stored, but read: upb refuses the message if one of them is not UTF-8 */
            attrs_reset(&d->scratch_attrs);
            TRY(attrs_add(r, &d->scratch_attrs));
        } else {
            TRY(skip_field(r, wire));
        }
    }
    return OK;
}

static int scope_spans(Decoder *d, Reader *r, int32_t resource_index) {
    Columns *c = &d->c;
    uint32_t field, wire;
    int done;
    Reader name = {r->p, r->p}, version = {r->p, r->p};
    if (c->scopes >= INT32_MAX) return UNSUPPORTED;
    int32_t scope_index = (int32_t)c->scopes;
    for (;;) {
        TRY(read_tag(r, &field, &wire, &done));
        if (done) break;
        if (field == 1 || field == 2) {
            if (wire != 2) return UNSUPPORTED;
            Reader sub;
            TRY(read_len(r, &sub));
            if (field == 1) TRY(scope(d, &sub, &name, &version));
            else TRY(span(d, &sub, resource_index, scope_index));
        } else if (field == 3 && wire == 2) {
            Reader schema_url;
            TRY(read_string(r, &schema_url));
        } else {
            TRY(skip_field(r, wire));
        }
    }
    MEM(strings_put(&c->scope_name, (const char *)name.p, (size_t)(name.end - name.p)));
    MEM(strings_put(&c->scope_version, (const char *)version.p, (size_t)(version.end - version.p)));
    c->scopes++;
    return OK;
}

/* Each occurrence of length-delimited field ``wanted`` of the message in ``r``, handed to ``on``;
 * the other fields skipped. */
static int each_message(Decoder *d, Reader *r, uint32_t wanted, int (*on)(Decoder *, Reader *)) {
    uint32_t field, wire;
    int done;
    for (;;) {
        TRY(read_tag(r, &field, &wire, &done));
        if (done) return OK;
        if (field == wanted) {
            if (wire != 2) return UNSUPPORTED;
            Reader sub;
            TRY(read_len(r, &sub));
            TRY(on(d, &sub));
        } else {
            TRY(skip_field(r, wire));
        }
    }
}

static int resource_attribute(Decoder *d, Reader *r) { return key_value(r, &d->resource_attrs); }

/* Resource: its attributes (field 1). */
static int resource(Decoder *d, Reader *r) { return each_message(d, r, 1, resource_attribute); }

static int resource_spans(Decoder *d, Reader *r) {
    Columns *c = &d->c;
    uint32_t field, wire;
    int done;
    if (c->resources >= INT32_MAX) return UNSUPPORTED;
    int32_t resource_index = (int32_t)c->resources;
    attrs_reset(&d->resource_attrs);
    for (;;) {
        TRY(read_tag(r, &field, &wire, &done));
        if (done) break;
        if (field == 1 || field == 2) {
            if (wire != 2) return UNSUPPORTED;
            Reader sub;
            TRY(read_len(r, &sub));
            if (field == 1) TRY(resource(d, &sub)); /* given twice, its attribute lists concatenate */
            else TRY(scope_spans(d, &sub, resource_index));
        } else if (field == 3 && wire == 2) {
            Reader schema_url;
            TRY(read_string(r, &schema_url));
        } else {
            TRY(skip_field(r, wire));
        }
    }
    TRY(attrs_emit(&d->resource_attrs, &c->resource_attributes));
    /* service.name, as the map holds it after its repeated keys are merged */
    const Attrs *a = &d->resource_attrs;
    const char *service = "";
    size_t service_len = 0;
    for (size_t i = 0; i < a->n; i++) {
        if (a->key_len[i] == 12 && memcmp(a->key[i], "service.name", 12) == 0) {
            service = attr_value(a, i);
            service_len = a->value_len[i];
            break;
        }
    }
    MEM(strings_put(&c->service_name, service, service_len));
    c->resources++;
    return OK;
}

/* ExportTraceServiceRequest: its resource_spans (field 1). */
static int request(Decoder *d, Reader *r) { return each_message(d, r, 1, resource_spans); }

/* ---- OTLP JSON lines, as the Collector's file exporter writes them ---------------------------
 *
 * The loader's fast path for JSON-lines files (collector/fast_jsonl/). It takes exactly the shape the
 * Arrow reader there takes -- the keys of its explicit schema, hex ids, int64 times as strings,
 * integer enums, scalar attribute values -- and returns None for anything else (a key it does not
 * know, a key given twice, null, enum names, numbers for strings, a lone surrogate escape, \u0000,
 * invalid UTF-8, a blank line, a value with two members set), so the file goes to the Arrow reader
 * and, past that, to the lenient decoder, as before. It runs without the GIL. Doubles are left to
 * Python: their text must be Python's repr, which collector/fast_jsonl/ makes with DuckDB's cast for the
 * Arrow reader too, so each map column also returns a flag per value (1: a double) and the doubles.
 */

enum { T_SPAN, T_EVENT, T_LINK, T_RESOURCE, T_SCOPE, N_TARGETS };

static locale_t c_locale; /* made when the module loads */

typedef struct JDecoder {
    Columns c;
    Maps scope_attributes;    /* read (they must be valid) and dropped, as the Arrow path does */
    Buf flags[N_TARGETS];     /* int8 per map value: 1 when it is a double, written by Python */
    Buf doubles[N_TARGETS];   /* float64, one per flagged value */
    size_t n_doubles[N_TARGETS];
    Buf scratch;              /* a string being checked: an id, a time, an integer's text */
    size_t max_line_bytes;
} JDecoder;

static Maps *jmaps(JDecoder *d, int target) {
    switch (target) {
        case T_SPAN: return &d->c.attributes;
        case T_EVENT: return &d->c.event_attributes;
        case T_LINK: return &d->c.link_attributes;
        case T_RESOURCE: return &d->c.resource_attributes;
        default: return &d->scope_attributes;
    }
}

static void jws(Reader *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\r')) r->p++;
}

static int jpeek(Reader *r) {
    jws(r);
    return r->p < r->end ? *r->p : -1;
}

static int jexpect(Reader *r, char ch) {
    if (jpeek(r) != (unsigned char)ch) return UNSUPPORTED;
    r->p++;
    return OK;
}

static int hex_digit(uint8_t ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static int put_utf8(Buf *out, uint32_t cp) {
    uint8_t b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (uint8_t)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (uint8_t)(0xc0 | (cp >> 6));
        b[1] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (uint8_t)(0xe0 | (cp >> 12));
        b[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (uint8_t)(0xf0 | (cp >> 18));
        b[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
        b[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        b[3] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return buf_put(out, b, n);
}

static int read_u4(Reader *r, uint32_t *out) {
    if (r->end - r->p < 4) return UNSUPPORTED;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex_digit(r->p[i]);
        if (h < 0) return UNSUPPORTED;
        v = (v << 4) | (uint32_t)h;
    }
    r->p += 4;
    *out = v;
    return OK;
}

/* A JSON string, unescaped and appended to ``out``. */
static int jstring(Reader *r, Buf *out) {
    TRY(jexpect(r, '"'));
    for (;;) {
        const uint8_t *run = r->p;
        while (r->p < r->end && *r->p != '"' && *r->p != '\\' && *r->p >= 0x20) r->p++;
        size_t n = (size_t)(r->p - run);
        if (!valid_utf8(run, n)) return UNSUPPORTED;
        MEM(buf_put(out, run, n));
        if (r->p >= r->end || *r->p < 0x20) return UNSUPPORTED;
        if (*r->p == '"') {
            r->p++;
            return OK;
        }
        r->p++; /* the backslash */
        if (r->p >= r->end) return UNSUPPORTED;
        uint8_t e = *r->p++;
        char ch;
        switch (e) {
            case '"': ch = '"'; break;
            case '\\': ch = '\\'; break;
            case '/': ch = '/'; break;
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case 'n': ch = '\n'; break;
            case 'r': ch = '\r'; break;
            case 't': ch = '\t'; break;
            case 'u': {
                uint32_t cp;
                TRY(read_u4(r, &cp));
                if (cp >= 0xdc00 && cp <= 0xdfff) return UNSUPPORTED; /* a lone low surrogate */
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    uint32_t low;
                    if (r->end - r->p < 2 || r->p[0] != '\\' || r->p[1] != 'u') return UNSUPPORTED;
                    r->p += 2;
                    TRY(read_u4(r, &low));
                    if (low < 0xdc00 || low > 0xdfff) return UNSUPPORTED;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
                }
                if (cp == 0) return UNSUPPORTED;
                MEM(put_utf8(out, cp));
                continue;
            }
            default: return UNSUPPORTED;
        }
        MEM(buf_put(out, &ch, 1));
    }
}

/* A string appended to a string column. */
static int jcolumn(Reader *r, Strings *s) {
    TRY(jstring(r, &s->data));
    MEM(buf_offset(&s->offsets, s->data.len));
    return OK;
}

/* A member's key (no escapes: every key this reads is plain ASCII) and its colon. */
static int jkey(Reader *r, const uint8_t **key, size_t *len) {
    TRY(jexpect(r, '"'));
    const uint8_t *start = r->p;
    while (r->p < r->end && *r->p != '"' && *r->p != '\\' && *r->p >= 0x20) r->p++;
    if (r->p >= r->end || *r->p != '"') return UNSUPPORTED;
    *key = start;
    *len = (size_t)(r->p - start);
    r->p++;
    return jexpect(r, ':');
}

/* The next member of an object whose '{' was read: *has = 0 at its '}'. */
static int jmember(Reader *r, int *first, const uint8_t **key, size_t *len, int *has) {
    int ch = jpeek(r);
    if (ch == '}') {
        r->p++;
        *has = 0;
        return OK;
    }
    if (!*first) {
        if (ch != ',') return UNSUPPORTED;
        r->p++;
    }
    *first = 0;
    *has = 1;
    return jkey(r, key, len);
}

/* The next element of an array whose '[' was read: *has = 0 at its ']'. */
static int jelement(Reader *r, int *first, int *has) {
    int ch = jpeek(r);
    if (ch == ']') {
        r->p++;
        *has = 0;
        return OK;
    }
    if (!*first) {
        if (ch != ',') return UNSUPPORTED;
        r->p++;
    }
    *first = 0;
    *has = 1;
    return OK;
}

/* Each element of the array in ``r``, handed to ``on`` with ``where`` (the row indexes the
 * elements refer to: the resource, and the scope). */
typedef int (*JElement)(JDecoder *, Reader *, const int32_t *where);

static int jeach(JDecoder *d, Reader *r, JElement on, const int32_t *where) {
    int first = 1, has;
    TRY(jexpect(r, '['));
    for (;;) {
        TRY(jelement(r, &first, &has));
        if (!has) return OK;
        TRY(on(d, r, where));
    }
}

#define IS(key, len, name) ((len) == sizeof(name) - 1 && memcmp((key), (name), sizeof(name) - 1) == 0)
/* Each known member once: a key given twice goes to the Arrow reader, whatever it makes of it. */
#define ONCE(seen, bit)                        \
    do {                                       \
        if ((seen) & (bit)) return UNSUPPORTED; \
        (seen) |= (bit);                       \
    } while (0)

/* A JSON integer (as Arrow's int32/int64 fields take it), within +-10^18. */
static int jint(Reader *r, int64_t *out) {
    jws(r);
    int negative = 0;
    if (r->p < r->end && *r->p == '-') {
        negative = 1;
        r->p++;
    }
    const uint8_t *digits = r->p;
    int64_t v = 0;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
        if (r->p - digits >= 18) return UNSUPPORTED;
        v = v * 10 + (*r->p - '0');
        r->p++;
    }
    size_t n = (size_t)(r->p - digits);
    if (n == 0 || (n > 1 && digits[0] == '0')) return UNSUPPORTED;
    if (r->p < r->end && (*r->p == '.' || *r->p == 'e' || *r->p == 'E')) return UNSUPPORTED;
    *out = negative ? -v : v;
    return OK;
}

/* A JSON number as a double. */
static int jdouble(Reader *r, double *out) {
    jws(r);
    const uint8_t *start = r->p;
    if (r->p < r->end && *r->p == '-') r->p++;
    const uint8_t *digits = r->p;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') r->p++;
    if (r->p == digits || (r->p - digits > 1 && digits[0] == '0')) return UNSUPPORTED;
    if (r->p < r->end && *r->p == '.') {
        r->p++;
        const uint8_t *fraction = r->p;
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9') r->p++;
        if (r->p == fraction) return UNSUPPORTED;
    }
    int has_exponent = 0;
    if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
        r->p++;
        if (r->p < r->end && (*r->p == '+' || *r->p == '-')) r->p++;
        const uint8_t *exponent = r->p;
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9') r->p++;
        if (r->p == exponent) return UNSUPPORTED;
        has_exponent = 1;
    }
    char text[64];
    size_t n = (size_t)(r->p - start);
    if (n >= sizeof text) return UNSUPPORTED;
    memcpy(text, start, n);
    text[n] = 0;
    char *end = NULL;
    /* correctly rounded like Arrow's parser; in the C locale whatever the process set, and safe
     * without the GIL (Python's own parser is not) */
    double v = strtod_l(text, &end, c_locale);
    if (end != text + n || !isfinite(v)) return UNSUPPORTED;
    /* Arrow's reader refuses some zeros with an exponent ("0e400": "number too big"), and the
     * line then goes to the lenient decoder, which spells zeros its own way: declined */
    if (v == 0 && has_exponent) return UNSUPPORTED;
    *out = v;
    return OK;
}

static int jliteral(Reader *r, const char *word) {
    jws(r);
    size_t n = strlen(word);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0) return UNSUPPORTED;
    r->p += n;
    return OK;
}

/* A string of digits as the scratch holds it: 1 when canonical (0, or no leading zero), with at
 * most ``max_digits`` digits; a leading '-' allowed when ``sign``. */
static int canonical_integer(const Buf *b, int sign, size_t max_digits) {
    const char *p = b->data ? b->data : "";
    size_t n = b->len;
    if (sign && n && p[0] == '-') {
        p++;
        n--;
        if (n == 1 && p[0] == '0') return 0; /* "-0" */
    }
    if (n == 0 || n > max_digits || (n > 1 && p[0] == '0')) return 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9') return 0;
    return 1;
}

/* A canonical integer's text within int64 (as the lenient decoder and the protobuf path hold it). */
static int within_int64(const Buf *b) {
    const char *p = b->data;
    size_t n = b->len;
    const char *limit = "9223372036854775807";
    if (n && p[0] == '-') {
        p++;
        n--;
        limit = "9223372036854775808";
    }
    return n < 19 || (n == 19 && memcmp(p, limit, 19) <= 0);
}

/* A time as the Collector writes it: a decimal string of nanoseconds, at most 2^63 - 1. */
static int jnanos(JDecoder *d, Reader *r, int64_t *out) {
    d->scratch.len = 0;
    TRY(jstring(r, &d->scratch));
    if (!canonical_integer(&d->scratch, 0, 19)) return UNSUPPORTED;
    uint64_t v = 0;
    for (size_t i = 0; i < d->scratch.len; i++) v = v * 10 + (uint64_t)(d->scratch.data[i] - '0');
    if (v > MAX_NS) return UNSUPPORTED;
    *out = (int64_t)v;
    return OK;
}

/* A hex id of ``n_digits`` (any case; written lower-case) into ``out``. */
static int jhex(JDecoder *d, Reader *r, size_t n_digits, char *out, int *all_zero) {
    d->scratch.len = 0;
    TRY(jstring(r, &d->scratch));
    if (d->scratch.len != n_digits) return UNSUPPORTED;
    int zero = 1;
    for (size_t i = 0; i < n_digits; i++) {
        int h = hex_digit((uint8_t)d->scratch.data[i]);
        if (h < 0) return UNSUPPORTED;
        out[i] = HEX[h];
        zero &= h == 0;
    }
    *all_zero = zero;
    return OK;
}

/* A span's or a link's own id: ``n_digits`` hex digits, not all zeros. */
static int jid(JDecoder *d, Reader *r, size_t n_digits, char *out) {
    int zero;
    TRY(jhex(d, r, n_digits, out, &zero));
    return zero ? UNSUPPORTED : OK;
}

/* An AnyValue of exactly one scalar member, written as map ``target``'s next value. */
static int jany_value(JDecoder *d, Reader *r, int target) {
    Maps *m = jmaps(d, target);
    Buf *values = &m->values.data;
    int first = 1, has, members = 0;
    int8_t flag = 0;
    const uint8_t *key;
    size_t len;
    TRY(jexpect(r, '{'));
    for (;;) {
        TRY(jmember(r, &first, &key, &len, &has));
        if (!has) break;
        if (++members > 1) return UNSUPPORTED;
        if (IS(key, len, "stringValue")) {
            TRY(jstring(r, values));
        } else if (IS(key, len, "intValue")) {
            size_t start = values->len;
            TRY(jstring(r, values));
            if (values->len == start) return UNSUPPORTED;
            Buf text = {values->data + start, values->len - start, values->len - start};
            if (!canonical_integer(&text, 1, 19) || !within_int64(&text)) return UNSUPPORTED;
        } else if (IS(key, len, "doubleValue")) {
            double v;
            TRY(jdouble(r, &v));
            MEM(buf_put(&d->doubles[target], &v, sizeof v));
            d->n_doubles[target]++;
            flag = 1;
        } else if (IS(key, len, "boolValue")) {
            int ch = jpeek(r);
            if (ch == 't') {
                TRY(jliteral(r, "true"));
                MEM(buf_put(values, "true", 4));
            } else {
                TRY(jliteral(r, "false"));
                MEM(buf_put(values, "false", 5));
            }
        } else {
            return UNSUPPORTED;
        }
    }
    if (members != 1) return UNSUPPORTED;
    MEM(buf_offset(&m->values.offsets, values->len));
    MEM(buf_i8(&d->flags[target], flag));
    return OK;
}

/* One {"key", "value"} of map ``target``, whose current map began at entry ``map_start``. */
static int jkey_value(JDecoder *d, Reader *r, int target, size_t map_start) {
    Maps *m = jmaps(d, target);
    int first = 1, has;
    unsigned seen = 0;
    const uint8_t *key;
    size_t len;
    TRY(jexpect(r, '{'));
    for (;;) {
        TRY(jmember(r, &first, &key, &len, &has));
        if (!has) break;
        if (IS(key, len, "key")) {
            ONCE(seen, 1);
            TRY(jstring(r, &m->keys.data));
        } else if (IS(key, len, "value")) {
            ONCE(seen, 2);
            TRY(jany_value(d, r, target));
        } else {
            return UNSUPPORTED;
        }
    }
    if (seen != 3) return UNSUPPORTED;
    /* the new key against the map's others: a repeated key goes to the Arrow reader */
    const int32_t *offsets = (const int32_t *)m->keys.offsets.data;
    size_t entry = maps_entries(m);
    if (entry - map_start >= MAX_ATTRIBUTES) return UNSUPPORTED;
    size_t new_start = (size_t)offsets[entry], new_len = m->keys.data.len - new_start;
    for (size_t i = map_start; i < entry; i++) {
        size_t at = (size_t)offsets[i], n = (size_t)offsets[i + 1] - at;
        if (n == new_len && (n == 0 || memcmp(m->keys.data.data + at, m->keys.data.data + new_start, n) == 0))
            return UNSUPPORTED;
    }
    MEM(buf_offset(&m->keys.offsets, m->keys.data.len));
    return OK;
}

/* An attribute list, appended to map ``target`` (its owner ends the map). */
static int jattributes(JDecoder *d, Reader *r, int target) {
    size_t map_start = maps_entries(jmaps(d, target));
    int first = 1, has;
    TRY(jexpect(r, '['));
    for (;;) {
        TRY(jelement(r, &first, &has));
        if (!has) return OK;
        TRY(jkey_value(d, r, target, map_start));
    }
}

static int jend_map(JDecoder *d, int target) {
    Maps *m = jmaps(d, target);
    MEM(buf_offset(&m->offsets, maps_entries(m)));
    return OK;
}

static int jcount(Reader *r) {
    int64_t ignored;
    return jint(r, &ignored);
}

static int jevent(JDecoder *d, Reader *r, const int32_t *where) {
    (void)where;
    Columns *c = &d->c;
    int first = 1, has;
    unsigned seen = 0;
    const uint8_t *key;
    size_t len;
    int64_t time_ns = 0;
    TRY(jexpect(r, '{'));
    for (;;) {
        TRY(jmember(r, &first, &key, &len, &has));
        if (!has) break;
        if (IS(key, len, "timeUnixNano")) {
            ONCE(seen, 1);
            TRY(jnanos(d, r, &time_ns));
        } else if (IS(key, len, "name")) {
            ONCE(seen, 2);
            TRY(jcolumn(r, &c->event_name));
        } else if (IS(key, len, "attributes")) {
            ONCE(seen, 4);
            TRY(jattributes(d, r, T_EVENT));
        } else if (IS(key, len, "droppedAttributesCount")) {
            ONCE(seen, 8);
            TRY(jcount(r));
        } else {
            return UNSUPPORTED;
        }
    }
    if (!(seen & 2)) MEM(buf_offset(&c->event_name.offsets, c->event_name.data.len));
    MEM(buf_i64(&c->event_time, time_ns));
    TRY(jend_map(d, T_EVENT));
    c->events++;
    return OK;
}

static int jlink(JDecoder *d, Reader *r, const int32_t *where) {
    (void)where;
    Columns *c = &d->c;
    int first = 1, has;
    unsigned seen = 0;
    const uint8_t *key;
    size_t len;
    char trace_id[32], span_id[16];
    TRY(jexpect(r, '{'));
    for (;;) {
        TRY(jmember(r, &first, &key, &len, &has));
        if (!has) break;
        if (IS(key, len, "traceId")) {
            ONCE(seen, 1);
            TRY(jid(d, r, 32, trace_id));
        } else if (IS(key, len, "spanId")) {
            ONCE(seen, 2);
            TRY(jid(d, r, 16, span_id));
        } else if (IS(key, len, "traceState")) {
            ONCE(seen, 4);
            TRY(jcolumn(r, &c->link_trace_state));
        } else if (IS(key, len, "attributes")) {
            ONCE(seen, 8);
            TRY(jattributes(d, r, T_LINK));
        } else if (IS(key, len, "droppedAttributesCount")) {
            ONCE(seen, 16);
            TRY(jcount(r));
        } else if (IS(key, len, "flags")) {
            ONCE(seen, 32);
            TRY(jcount(r));
        } else {
            return UNSUPPORTED;
        }
    }
    if ((seen & 3) != 3) return UNSUPPORTED;
    if (!(seen & 4)) MEM(buf_offset(&c->link_trace_state.offsets, c->link_trace_state.data.len));
    MEM(strings_put(&c->link_trace_id, trace_id, 32));
    MEM(strings_put(&c->link_span_id, span_id, 16));
    TRY(jend_map(d, T_LINK));
    c->links++;
    return OK;
}

static int jstatus(Reader *r, Columns *c, int64_t *code, int *has_message) {
    int first = 1, has;
    unsigned seen = 0;
    const uint8_t *key;
    size_t len;
    TRY(jexpect(r, '{'));
    for (;;) {
        TRY(jmember(r, &first, &key, &len, &has));
        if (!has) return OK;
        if (IS(key, len, "code")) {
            ONCE(seen, 1);
            TRY(jint(r, code));
        } else if (IS(key, len, "message")) {
            ONCE(seen, 2);
            TRY(jcolumn(r, &c->status_message));
            *has_message = 1;
        } else {
            return UNSUPPORTED;
        }
    }
}

/* A span; ``where`` holds its resource's and its scope's indexes. */
static int jspan(JDecoder *d, Reader *r, const int32_t *where) {
    Columns *c = &d->c;
    int32_t resource_index = where[0], scope_index = where[1];
    int first = 1, has, zero;
    unsigned seen = 0;
    const uint8_t *key;
    size_t len;
    char trace_id[32], span_id[16], parent[16];
    int64_t kind = 0, start = 0, end = 0, code = 0;
    int has_message = 0;
    size_t parent_len = 0;
    TRY(jexpect(r, '{'));
    for (;;) {
        TRY(jmember(r, &first, &key, &len, &has));
        if (!has) break;
        if (IS(key, len, "traceId")) {
            ONCE(seen, 1);
            TRY(jid(d, r, 32, trace_id));
        } else if (IS(key, len, "spanId")) {
            ONCE(seen, 2);
            TRY(jid(d, r, 16, span_id));
        } else if (IS(key, len, "parentSpanId")) {
            ONCE(seen, 4);
            /* "" (a root) or 16 hex digits, zeros allowed, as the Arrow path reads it */
            if (jpeek(r) == '"' && r->end - r->p >= 2 && r->p[1] == '"') {
                r->p += 2;
            } else {
                TRY(jhex(d, r, 16, parent, &zero));
                parent_len = 16;
            }
        } else if (IS(key, len, "traceState")) {
            ONCE(seen, 8);
            TRY(jcolumn(r, &c->trace_state));
        } else if (IS(key, len, "flags")) {
            ONCE(seen, 16);
            TRY(jcount(r));
        } else if (IS(key, len, "name")) {
            ONCE(seen, 32);
            TRY(jcolumn(r, &c->name));
        } else if (IS(key, len, "kind")) {
            ONCE(seen, 64);
            TRY(jint(r, &kind));
        } else if (IS(key, len, "startTimeUnixNano")) {
            ONCE(seen, 128);
            TRY(jnanos(d, r, &start));
        } else if (IS(key, len, "endTimeUnixNano")) {
            ONCE(seen, 256);
            TRY(jnanos(d, r, &end));
        } else if (IS(key, len, "attributes")) {
            ONCE(seen, 512);
            TRY(jattributes(d, r, T_SPAN));
        } else if (IS(key, len, "droppedAttributesCount")) {
            ONCE(seen, 1024);
            TRY(jcount(r));
        } else if (IS(key, len, "events")) {
            ONCE(seen, 2048);
            TRY(jeach(d, r, jevent, NULL));
        } else if (IS(key, len, "droppedEventsCount")) {
            ONCE(seen, 4096);
            TRY(jcount(r));
        } else if (IS(key, len, "links")) {
            ONCE(seen, 8192);
            TRY(jeach(d, r, jlink, NULL));
        } else if (IS(key, len, "droppedLinksCount")) {
            ONCE(seen, 16384);
            TRY(jcount(r));
        } else if (IS(key, len, "status")) {
            ONCE(seen, 32768);
            TRY(jstatus(r, c, &code, &has_message));
        } else {
            return UNSUPPORTED;
        }
    }
    if ((seen & 3) != 3) return UNSUPPORTED;
    if (kind < 0 || kind > 5 || code < 0 || code > 2) return UNSUPPORTED;
    MEM(buf_i64(&c->start, start));
    MEM(strings_put(&c->trace_id, trace_id, 32));
    MEM(strings_put(&c->span_id, span_id, 16));
    MEM(strings_put(&c->parent_id, parent, parent_len));
    if (!(seen & 8)) MEM(buf_offset(&c->trace_state.offsets, c->trace_state.data.len));
    if (!(seen & 32)) MEM(buf_offset(&c->name.offsets, c->name.data.len));
    MEM(buf_i8(&c->kind, (int8_t)kind));
    MEM(buf_put(&c->resource_index, &resource_index, sizeof resource_index));
    MEM(buf_put(&c->scope_index, &scope_index, sizeof scope_index));
    MEM(buf_u64(&c->duration, end > start ? (uint64_t)(end - start) : 0));
    MEM(buf_i8(&c->status_code, (int8_t)code));
    if (!has_message) MEM(buf_offset(&c->status_message.offsets, c->status_message.data.len));
    TRY(jend_map(d, T_SPAN));
    MEM(buf_offset(&c->event_offsets, c->events));
    MEM(buf_offset(&c->link_offsets, c->links));
    c->spans++;
    return OK;
}

static int jscope(JDecoder *d, Reader *r, unsigned *seen_fields) {
    Columns *c = &d->c;
    int first = 1, has;
    unsigned seen = 0;
    const uint8_t *key;
    size_t len;
    TRY(jexpect(r, '{'));
    for (;;) {
        TRY(jmember(r, &first, &key, &len, &has));
        if (!has) break;
        if (IS(key, len, "name")) {
            ONCE(seen, 1);
            TRY(jcolumn(r, &c->scope_name));
        } else if (IS(key, len, "version")) {
            ONCE(seen, 2);
            TRY(jcolumn(r, &c->scope_version));
        } else if (IS(key, len, "attributes")) {
            ONCE(seen, 4);
            TRY(jattributes(d, r, T_SCOPE));
        } else if (IS(key, len, "droppedAttributesCount")) {
            ONCE(seen, 8);
            TRY(jcount(r));
        } else {
            return UNSUPPORTED;
        }
    }
    *seen_fields = seen;
    return OK;
}

/* A ScopeSpans; ``where`` holds its resource's index. */
static int jscope_spans(JDecoder *d, Reader *r, const int32_t *where) {
    Columns *c = &d->c;
    int first = 1, has;
    unsigned seen = 0, scope_seen = 0;
    const uint8_t *key;
    size_t len;
    if (c->scopes >= INT32_MAX) return UNSUPPORTED;
    const int32_t indexes[2] = {where[0], (int32_t)c->scopes};
    TRY(jexpect(r, '{'));
    for (;;) {
        TRY(jmember(r, &first, &key, &len, &has));
        if (!has) break;
        if (IS(key, len, "scope")) {
            ONCE(seen, 1);
            TRY(jscope(d, r, &scope_seen));
        } else if (IS(key, len, "spans")) {
            ONCE(seen, 2);
            TRY(jeach(d, r, jspan, indexes));
        } else if (IS(key, len, "schemaUrl")) {
            ONCE(seen, 4);
            d->scratch.len = 0;
            TRY(jstring(r, &d->scratch));
        } else {
            return UNSUPPORTED;
        }
    }
    if (!(scope_seen & 1)) MEM(buf_offset(&c->scope_name.offsets, c->scope_name.data.len));
    if (!(scope_seen & 2)) MEM(buf_offset(&c->scope_version.offsets, c->scope_version.data.len));
    /* scope attributes are not stored: emptied so they cost no memory */
    Maps *scope = &d->scope_attributes;
    scope->keys.data.len = scope->values.data.len = 0;
    scope->keys.offsets.len = scope->values.offsets.len = scope->offsets.len = 0;
    MEM(buf_offset(&scope->keys.offsets, 0));
    MEM(buf_offset(&scope->values.offsets, 0));
    MEM(buf_offset(&scope->offsets, 0));
    d->flags[T_SCOPE].len = d->doubles[T_SCOPE].len = 0;
    d->n_doubles[T_SCOPE] = 0;
    c->scopes++;
    return OK;
}

static int jresource(JDecoder *d, Reader *r) {
    int first = 1, has;
    unsigned seen = 0;
    const uint8_t *key;
    size_t len;
    TRY(jexpect(r, '{'));
    for (;;) {
        TRY(jmember(r, &first, &key, &len, &has));
        if (!has) return OK;
        if (IS(key, len, "attributes")) {
            ONCE(seen, 1);
            TRY(jattributes(d, r, T_RESOURCE));
        } else if (IS(key, len, "droppedAttributesCount")) {
            ONCE(seen, 2);
            TRY(jcount(r));
        } else {
            return UNSUPPORTED;
        }
    }
}

static int jresource_spans(JDecoder *d, Reader *r, const int32_t *where) {
    (void)where;
    Columns *c = &d->c;
    Maps *m = &c->resource_attributes;
    int first = 1, has;
    unsigned seen = 0;
    const uint8_t *key;
    size_t len;
    if (c->resources >= INT32_MAX) return UNSUPPORTED;
    int32_t resource_index = (int32_t)c->resources;
    size_t map_start = maps_entries(m);
    TRY(jexpect(r, '{'));
    for (;;) {
        TRY(jmember(r, &first, &key, &len, &has));
        if (!has) break;
        if (IS(key, len, "resource")) {
            ONCE(seen, 1);
            TRY(jresource(d, r));
        } else if (IS(key, len, "scopeSpans")) {
            ONCE(seen, 2);
            TRY(jeach(d, r, jscope_spans, &resource_index));
        } else if (IS(key, len, "schemaUrl")) {
            ONCE(seen, 4);
            d->scratch.len = 0;
            TRY(jstring(r, &d->scratch));
        } else {
            return UNSUPPORTED;
        }
    }
    /* service.name from the resource's map (a double there would need Python's text: Arrow's turn) */
    size_t entries = maps_entries(m);
    const int32_t *key_at = (const int32_t *)m->keys.offsets.data;
    const int32_t *value_at = (const int32_t *)m->values.offsets.data;
    const char *service = "";
    size_t service_len = 0;
    for (size_t i = map_start; i < entries; i++) {
        size_t at = (size_t)key_at[i], n = (size_t)key_at[i + 1] - at;
        if (n == 12 && memcmp(m->keys.data.data + at, "service.name", 12) == 0) {
            if (d->flags[T_RESOURCE].data[i]) return UNSUPPORTED;
            service_len = (size_t)(value_at[i + 1] - value_at[i]);
            if (service_len) service = m->values.data.data + value_at[i];
            break;
        }
    }
    MEM(strings_put(&c->service_name, service, service_len));
    TRY(jend_map(d, T_RESOURCE));
    c->resources++;
    return OK;
}

/* One line: {"resourceSpans": [...]} and nothing after it. */
static int jline(JDecoder *d, Reader *r) {
    int first = 1, has;
    unsigned seen = 0;
    const uint8_t *key;
    size_t len;
    TRY(jexpect(r, '{'));
    for (;;) {
        TRY(jmember(r, &first, &key, &len, &has));
        if (!has) break;
        if (!IS(key, len, "resourceSpans")) return UNSUPPORTED;
        ONCE(seen, 1);
        TRY(jeach(d, r, jresource_spans, NULL));
    }
    return jpeek(r) == -1 ? OK : UNSUPPORTED;
}

/* Every line of ``data`` (the last may lack its newline); a blank line, or one longer than
 * ``max_line_bytes``, is declined. */
static int jlines(JDecoder *d, const uint8_t *data, size_t n) {
    const uint8_t *p = data, *end = data + n;
    while (p < end) {
        const uint8_t *eol = memchr(p, '\n', (size_t)(end - p));
        if (eol == NULL) eol = end;
        if ((size_t)(eol - p) > d->max_line_bytes) return UNSUPPORTED;
        Reader line = {p, eol};
        TRY(jline(d, &line));
        p = eol + 1;
    }
    return OK;
}

/* ---- Python ------------------------------------------------------------------------------- */

static PyObject *bytes_of(const Buf *b) {
    return PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len);
}

/* (offsets, data) of a string column. */
static PyObject *strings_of(const Strings *s) {
    return Py_BuildValue("(NN)", bytes_of(&s->offsets), bytes_of(&s->data));
}

static PyObject *maps_of(const Maps *m) {
    return Py_BuildValue("(NNN)", bytes_of(&m->offsets), strings_of(&m->keys), strings_of(&m->values));
}

/* The columns in proto_columns.py's order. */
static PyObject *columns_tuple(const Columns *c) {
    return Py_BuildValue(
        "(nNNNNNNNNNNNNNNNNNNNNNNNNNN)", (Py_ssize_t)c->spans,
        bytes_of(&c->start), strings_of(&c->trace_id), strings_of(&c->span_id), strings_of(&c->parent_id),
        strings_of(&c->trace_state), strings_of(&c->name), bytes_of(&c->kind), bytes_of(&c->resource_index),
        bytes_of(&c->scope_index), bytes_of(&c->duration), bytes_of(&c->status_code),
        strings_of(&c->status_message), maps_of(&c->attributes), bytes_of(&c->event_offsets),
        bytes_of(&c->event_time), strings_of(&c->event_name), maps_of(&c->event_attributes),
        bytes_of(&c->link_offsets), strings_of(&c->link_trace_id), strings_of(&c->link_span_id),
        strings_of(&c->link_trace_state), maps_of(&c->link_attributes), maps_of(&c->resource_attributes),
        strings_of(&c->service_name), strings_of(&c->scope_name), strings_of(&c->scope_version));
}

PyDoc_STRVAR(decode_doc,
"decode(data) -> tuple | None\n\n"
"The columns of a serialized ExportTraceServiceRequest as buffers (see proto_columns.py for their\n"
"order), or None when the message needs the Python decoder (anything but a valid message of\n"
"scalar attribute values).");

/* What the two entry points differ in: the decoder's size, how it starts, runs over the bytes,
 * answers and lets go. */
typedef struct {
    size_t size;
    int (*init)(void *decoder, size_t max_line_bytes);
    int (*run)(void *decoder, const uint8_t *data, size_t n);
    PyObject *(*answer)(void *decoder);
    void (*release)(void *decoder);
    int without_gil; /* run may not touch Python */
} Entry;

/* Decode the bytes of ``arg`` with ``e``: its answer, None when the input needs Python's decoder,
 * or NULL with MemoryError. */
static PyObject *run_entry(const Entry *e, PyObject *arg, size_t max_line_bytes) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    void *d = PyMem_Calloc(1, e->size);
    if (d == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    PyObject *result = NULL;
    int rc;
    if (e->init(d, max_line_bytes) < 0) {
        rc = NOMEM;
    } else if (e->without_gil) {
        Py_BEGIN_ALLOW_THREADS
        rc = e->run(d, (const uint8_t *)view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    } else {
        rc = e->run(d, (const uint8_t *)view.buf, (size_t)view.len);
    }
    if (rc == NOMEM) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
    } else if (rc == UNSUPPORTED) {
        PyErr_Clear();
        result = Py_NewRef(Py_None);
    } else {
        result = e->answer(d);
    }
    e->release(d);
    PyMem_Free(d);
    PyBuffer_Release(&view);
    return result;
}

static int proto_init(void *decoder, size_t unused) {
    (void)unused;
    return columns_init(&((Decoder *)decoder)->c);
}

static int proto_run(void *decoder, const uint8_t *data, size_t n) {
    Reader r = {data, data + n};
    return request(decoder, &r);
}

static PyObject *proto_answer(void *decoder) { return columns_tuple(&((Decoder *)decoder)->c); }

static void proto_release(void *decoder) {
    Decoder *d = decoder;
    columns_free(&d->c);
    Attrs *lists[] = {&d->span_attrs, &d->event_attrs, &d->link_attrs, &d->resource_attrs, &d->scratch_attrs};
    for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) buf_free(&lists[i]->values);
}

static const Entry PROTO = {sizeof(Decoder), proto_init, proto_run, proto_answer, proto_release, 0};

static PyObject *decode(PyObject *module, PyObject *arg) {
    (void)module;
    return run_entry(&PROTO, arg, 0);
}

/* A map column's doubles: None when it has none, else (int8 flag per value, float64 values). */
static PyObject *doubles_of(const JDecoder *d, int target) {
    if (!d->n_doubles[target]) return Py_NewRef(Py_None);
    return Py_BuildValue("(NN)", bytes_of(&d->flags[target]), bytes_of(&d->doubles[target]));
}

PyDoc_STRVAR(decode_json_doc,
"decode_json(data, max_line_bytes) -> (columns, doubles) | None\n\n"
"The columns of OTLP JSON lines (whole lines, none longer than max_line_bytes; the last may lack\n"
"its newline) as decode() gives\n"
"them, with each double attribute value left empty, and per map column (span, event, link,\n"
"resource) None or (int8 flag per value, float64 doubles) for Python to write; None when the\n"
"lines are not exactly in the Collector's shape (collector/fast_jsonl/ reads them then).");

static int json_init(void *decoder, size_t max_line_bytes) {
    JDecoder *d = decoder;
    d->max_line_bytes = max_line_bytes;
    return columns_init(&d->c) < 0 || maps_init(&d->scope_attributes) < 0 ? -1 : 0;
}

static int json_run(void *decoder, const uint8_t *data, size_t n) { return jlines(decoder, data, n); }

static PyObject *json_answer(void *decoder) {
    JDecoder *d = decoder;
    return Py_BuildValue("(N(NNNN))", columns_tuple(&d->c), doubles_of(d, T_SPAN), doubles_of(d, T_EVENT),
                         doubles_of(d, T_LINK), doubles_of(d, T_RESOURCE));
}

static void json_release(void *decoder) {
    JDecoder *d = decoder;
    columns_free(&d->c);
    maps_free(&d->scope_attributes);
    for (int i = 0; i < N_TARGETS; i++) {
        buf_free(&d->flags[i]);
        buf_free(&d->doubles[i]);
    }
    buf_free(&d->scratch);
}

static const Entry JSON = {sizeof(JDecoder), json_init, json_run, json_answer, json_release, 1};

static PyObject *decode_json(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *data;
    Py_ssize_t max_line_bytes;
    if (!PyArg_ParseTuple(args, "On:decode_json", &data, &max_line_bytes)) return NULL;
    if (max_line_bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "max_line_bytes must not be negative");
        return NULL;
    }
    return run_entry(&JSON, data, (size_t)max_line_bytes);
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_O, decode_doc},
    {"decode_json", decode_json, METH_VARARGS, decode_json_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_otlp_native",
    .m_doc = "OTLP traces to column buffers: protobuf (the receiver's fast path, proto_columns.py) and "
             "the Collector's JSON lines (the loader's, collector/fast_jsonl/).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__otlp_native(void) {
    if (c_locale == (locale_t)0) {
        c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
        if (c_locale == (locale_t)0) return PyErr_NoMemory();
    }
    return PyModule_Create(&module);
}
