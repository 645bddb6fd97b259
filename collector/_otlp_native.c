/* OTLP ExportTraceServiceRequest protobuf -> the column buffers of otel_traces, in one pass in C.
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
#include <stdint.h>
#include <string.h>

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
    char *data = PyMem_Realloc(b->data, cap);
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
    PyMem_Free(b->data);
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

PyDoc_STRVAR(decode_doc,
"decode(data) -> tuple | None\n\n"
"The columns of a serialized ExportTraceServiceRequest as buffers (see proto_columns.py for their\n"
"order), or None when the message needs the Python decoder (anything but a valid message of\n"
"scalar attribute values).");

static PyObject *decode(PyObject *module, PyObject *arg) {
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Decoder *d = PyMem_Calloc(1, sizeof *d);
    if (d == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    PyObject *result = NULL;
    int rc;
    if (columns_init(&d->c) < 0) {
        rc = NOMEM;
    } else {
        Reader r = {(const uint8_t *)view.buf, (const uint8_t *)view.buf + view.len};
        rc = request(d, &r);
    }
    if (rc == NOMEM) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
    } else if (rc == UNSUPPORTED) {
        PyErr_Clear();
        result = Py_NewRef(Py_None);
    } else {
        Columns *c = &d->c;
        result = Py_BuildValue(
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
    columns_free(&d->c);
    buf_free(&d->span_attrs.values);
    buf_free(&d->event_attrs.values);
    buf_free(&d->link_attrs.values);
    buf_free(&d->resource_attrs.values);
    buf_free(&d->scratch_attrs.values);
    PyMem_Free(d);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_O, decode_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_otlp_native",
    .m_doc = "OTLP protobuf traces to column buffers: the receiver's fast path (see proto_columns.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__otlp_native(void) { return PyModule_Create(&module); }
