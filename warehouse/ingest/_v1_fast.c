/*
 * Remote write 1.0 in C: prometheus.WriteRequests of float samples, as columns.
 *
 * columns(bodies, min_timestamp, limits, requests, max_timestamp, tenant, known) parses
 * decompressed WriteRequests, each on its own, in one pass without the GIL, into one set
 * of the columns
 * warehouse.ingest.remote_write_tables builds its tables from: every series' labels
 * checked, sorted by name and hashed into its id. A body this fast path does not take
 * is left out whole and its index returned, for the Python decoder to decode alone:
 * anything the fast path does not handle (metadata, exemplars, histograms, a wire type
 * it does not expect), anything the decoder refuses (corrupt protobuf, invalid UTF-8,
 * an empty or duplicate label name, no __name__), a sample outside [min_timestamp,
 * max_timestamp] (what the store keeps: warehouse/ingest/time_window.py), per-request
 * parts included, and a body over one of the receiver's limits (series per body,
 * labels per series, bytes per label name or value). The Python decoder then gives the
 * same rows or the error message, so this module never has to agree with it on a
 * message, only on rows. Its limit checks may only be stricter than Python's: it counts
 * series entries, Python distinct series.
 *
 * The series id is the one remote_write_tables defines: the first 8 bytes of the MD5
 * digest of S(metric) S(name_1) S(value_1) ... with S(s) = "<len>:" s and the labels
 * sorted by name (bytewise), then the first 8 bytes of the MD5 digest of the same
 * S(name) S(value) of its target labels alone (__tenant__, instance, job), each half in
 * reversed byte order as ClickHouse lays out a UUID. Labels whose value is empty are
 * dropped first.
 *
 * Per-request metrics. Given a `requests` spec (see parse_spec), a series whose metric
 * the mapping names and which carries the request-id label is a part of that request,
 * not a series: its samples become parts, and the parts of one request (tenant, request
 * id) across the whole call are pivoted into one row (see the "parts" section). Such a
 * series is left out of the series and sample columns unless the spec keeps it. The
 * Python reference of the
 * pivot is warehouse/ingest/request_pivot.py; both must give the same rows.
 *
 * Series already written. Given a KnownSeries (_known_series.h), a series whose label
 * fields an earlier call wrote is mapped from those bytes to its id without reading a
 * label, and gets a row only when its samples reach past what the rows written cover;
 * the caller files the rows once committed (KnownSeries.remember). Without one, every
 * series gets a row.
 *
 * Returns (columns, refused, parts): refused lists the indices of the bodies left out,
 * parts is None without a spec (see parts_result for its layout), and columns is,
 * every column as bytes in native byte order:
 *   (n_series, ids[16 n], metric_offsets i32[R+1], metric_data,
 *    label_offsets i32[R+1], name_offsets i32[L+1], name_data,
 *    value_offsets i32[L+1], value_data,
 *    sample_owner i64[S], sample_timestamps i64[S], sample_values f64[S],
 *    row_series i64[R], row_min i64[R], row_max i64[R], key_offsets i32[R+1], key_data)
 * where R rows are the series that get a `series` row: row r is series row_series[r],
 * with metric metric_offsets[r].., labels label_offsets[r]..label_offsets[r+1] (without
 * __name__), its samples' time range row_min..row_max (empty, min above max, when it
 * has none), and the key to file it under (empty: not filed); sample_owner is each
 * sample's series index.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* ---- growable byte buffers -------------------------------------------------------- */

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t more) {
    if (b->len + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *src, size_t n) {
    if (buf_reserve(b, n)) return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static int buf_i32(Buf *b, int32_t v) { return buf_put(b, &v, sizeof v); }
static int buf_i64(Buf *b, int64_t v) { return buf_put(b, &v, sizeof v); }

/* ---- MD5 (RFC 1321) ------------------------------------------------------------------ */

static const uint32_t MD5_K[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613,
    0xfd469501, 0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193,
    0xa679438e, 0x49b40821, 0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d,
    0x02441453, 0xd8a1e681, 0xe7d3fbc8, 0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
    0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a, 0xfffa3942, 0x8771f681, 0x6d9d6122,
    0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70, 0x289b7ec6, 0xeaa127fa,
    0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665, 0xf4292244,
    0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb,
    0xeb86d391};
static const uint8_t MD5_S[64] = {7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
                                  5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
                                  4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
                                  6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};

static uint32_t load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#define MD5_F(x, y, z) (((x) & (y)) | (~(x) & (z)))
#define MD5_G(x, y, z) (((x) & (z)) | ((y) & ~(z)))
#define MD5_H(x, y, z) ((x) ^ (y) ^ (z))
#define MD5_I(x, y, z) ((y) ^ ((x) | ~(z)))
#define MD5_STEP(f, a, b, c, d, i, g)                                  \
    a += f(b, c, d) + MD5_K[i] + m[g];                                 \
    a = (a << MD5_S[i] | a >> (32 - MD5_S[i])) + b;
#define MD5_ROUND(f, i, g0, g1, g2, g3)         \
    MD5_STEP(f, a, b, c, d, i, g0)              \
    MD5_STEP(f, d, a, b, c, i + 1, g1)          \
    MD5_STEP(f, c, d, a, b, i + 2, g2)          \
    MD5_STEP(f, b, c, d, a, i + 3, g3)

static void md5_block(uint32_t h[4], const uint8_t *block) {
    uint32_t m[16];
    for (int i = 0; i < 16; i++) m[i] = load_le32(block + 4 * i);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
    MD5_ROUND(MD5_F, 0, 0, 1, 2, 3)
    MD5_ROUND(MD5_F, 4, 4, 5, 6, 7)
    MD5_ROUND(MD5_F, 8, 8, 9, 10, 11)
    MD5_ROUND(MD5_F, 12, 12, 13, 14, 15)
    MD5_ROUND(MD5_G, 16, 1, 6, 11, 0)
    MD5_ROUND(MD5_G, 20, 5, 10, 15, 4)
    MD5_ROUND(MD5_G, 24, 9, 14, 3, 8)
    MD5_ROUND(MD5_G, 28, 13, 2, 7, 12)
    MD5_ROUND(MD5_H, 32, 5, 8, 11, 14)
    MD5_ROUND(MD5_H, 36, 1, 4, 7, 10)
    MD5_ROUND(MD5_H, 40, 13, 0, 3, 6)
    MD5_ROUND(MD5_H, 44, 9, 12, 15, 2)
    MD5_ROUND(MD5_I, 48, 0, 7, 14, 5)
    MD5_ROUND(MD5_I, 52, 12, 3, 10, 1)
    MD5_ROUND(MD5_I, 56, 8, 15, 6, 13)
    MD5_ROUND(MD5_I, 60, 4, 11, 2, 9)
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
}

static void md5(const uint8_t *msg, size_t len, uint8_t out[16]) {
    uint32_t h[4] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
    size_t whole = len & ~(size_t)63;
    for (size_t i = 0; i < whole; i += 64) md5_block(h, msg + i);
    uint8_t tail[128] = {0};
    size_t rest = len - whole;
    memcpy(tail, msg + whole, rest);
    tail[rest] = 0x80;
    size_t tail_len = rest + 9 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++) tail[tail_len - 8 + i] = (uint8_t)(bits >> (8 * i));
    md5_block(h, tail);
    if (tail_len == 128) md5_block(h, tail + 64);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) out[4 * i + j] = (uint8_t)(h[i] >> (8 * j));
}

/* ---- protobuf wire format --------------------------------------------------------- */

/* 0 on success; -1 on a truncated or over-long varint. */
static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*p >= end) return -1;
        uint8_t byte = *(*p)++;
        v |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* A field's tag, as the protobuf runtime accepts it: at most 5 bytes, at most 32 bits,
   and a field number above 0. */
static int read_tag(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    const uint8_t *start = *p;
    if (read_varint(p, end, out) || *p - start > 5 || *out > UINT32_MAX || (*out >> 3) == 0)
        return -1;
    return 0;
}

/* Reads a length-delimited field's bounds. */
static int read_bytes(const uint8_t **p, const uint8_t *end, const uint8_t **start, size_t *len) {
    uint64_t n;
    if (read_varint(p, end, &n) || n > (uint64_t)(end - *p)) return -1;
    *start = *p;
    *len = (size_t)n;
    *p += n;
    return 0;
}

/* Skips a field of an unknown number; groups (wire types 3, 4) are not accepted. */
static int skip_field(const uint8_t **p, const uint8_t *end, int wire_type) {
    uint64_t ignored;
    const uint8_t *s;
    size_t n;
    switch (wire_type) {
        case 0: return read_varint(p, end, &ignored);
        case 1:
            if (end - *p < 8) return -1;
            *p += 8;
            return 0;
        case 2: return read_bytes(p, end, &s, &n);
        case 5:
            if (end - *p < 4) return -1;
            *p += 4;
            return 0;
        default: return -1;
    }
}

/* Strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF). */
static int valid_utf8(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) { /* ASCII, 8 bytes at a time */
            uint64_t word;
            memcpy(&word, s + i, 8);
            if (!(word & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int more;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0) {
            more = 1, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            more = 2, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            more = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        if (i + more >= n) return 0;
        for (int k = 1; k <= more; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += more + 1;
    }
    return 1;
}

/* ---- series seen earlier in the same call ----------------------------------------------
 *
 * A body under backlog (a sender catching up), or a flush of several scrapes, repeats a
 * series' label fields byte for byte. The first time, they are parsed, checked, sorted
 * and hashed into an id; after that the same bytes map to the same series, whose row
 * the samples share. Only series that carry samples are remembered, so the series
 * come out in the order the Python decoder gives them.
 */

typedef struct {
    uint64_t hash;
    const uint8_t *fields;
    size_t length;
    int64_t series;
} SeenEntry;

typedef struct {
    SeenEntry *slots;
    size_t mask, count; /* mask + 1 slots, a power of two; empty while length == 0 */
} Seen;

/* A secret of this process (set when the module loads), so that a sender cannot craft
   label fields of equal hashes: every step mixes the bytes into a state it starts from. */
static uint64_t hash_key;

static uint64_t hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = (hash_key ^ n) * 0x9e3779b97f4a7c15ULL, w;
    h ^= h >> 32;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, s + i, n - i);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 29);
}

/* The entry for these label fields: a match, or the empty slot to fill; NULL past
   `probes` slots (a crowd of equal hashes: the series is read as a new one, its rows
   merge by id later). */
static SeenEntry *seen_slot(Seen *t, uint64_t hash, const uint8_t *fields, size_t length,
                            size_t probes) {
    size_t i = (size_t)hash & t->mask;
    for (size_t k = 0; k <= probes; k++, i = (i + 1) & t->mask) {
        SeenEntry *e = &t->slots[i];
        if (e->length == 0) return e;
        if (e->hash == hash && e->length == length && memcmp(e->fields, fields, length) == 0)
            return e;
    }
    return NULL;
}

enum { SEEN_MAX_PROBE = 64 };

static int seen_grow(Seen *t) {
    size_t size = t->slots ? 2 * (t->mask + 1) : 1024;
    SeenEntry *old = t->slots;
    size_t old_size = old ? t->mask + 1 : 0;
    t->slots = calloc(size, sizeof(SeenEntry));
    if (!t->slots) {
        t->slots = old;
        return -1;
    }
    t->mask = size - 1;
    for (size_t i = 0; i < old_size; i++)
        if (old[i].length) *seen_slot(t, old[i].hash, old[i].fields, old[i].length, SIZE_MAX) = old[i];
    free(old);
    return 0;
}

static void seen_clear(Seen *t) {
    if (t->slots) memset(t->slots, 0, (t->mask + 1) * sizeof(SeenEntry));
    t->count = 0;
}

enum { OK = 0, FALLBACK = 1, NO_MEMORY = 2, MISUSED = 3 };

#include "_known_series.h"

/* ---- per-request parts ----------------------------------------------------------------
 *
 * The spec names the mapped metrics (each with its target column and scale), the
 * request-id label, the dimension labels, the error classes that make a failure a
 * rejection, each target's largest valid value, which target is the error flag, the
 * tenant of the call (or None: the `tenant` label's) and whether mapped series are
 * also kept as series.
 *
 * A body's parts are collected apart (Scratch) and applied to the pivot only once the
 * whole body is taken, so that a body left out leaves nothing behind. Applying a part
 * to its request (the rules the Python reference follows too):
 *   first_ts       the earliest sample timestamp of its parts
 *   value[target]  the last part's (parts in call order), with a presence flag
 *   rank           the highest: 1 for a failure (error target, value > 0), 2 when its
 *                  error_class is a rejection
 *   error_class    the last failing part's error_class label
 *   labels         the labels of its series but __name__, the request id, tenant and
 *                  error_class, merged by name: a dimension takes the last part's
 *                  value, any other label the greatest value (bytewise), as the
 *                  store's anyLast and maxMap merge rows
 * A part whose value is not finite, negative or above its target's largest value
 * (staleness markers among them) is no measurement: it is counted as dropped.
 */

typedef struct {
    const uint8_t *s;
    size_t n;
} Slice;

static int compare_slices(Slice a, Slice b) {
    size_t n = a.n < b.n ? a.n : b.n;
    int c = n ? memcmp(a.s, b.s, n) : 0;
    if (c) return c;
    return (a.n > b.n) - (a.n < b.n);
}

static int slice_is(Slice a, const char *text) {
    size_t n = strlen(text);
    return a.n == n && memcmp(a.s, text, n) == 0;
}

typedef struct {
    Slice name;
    int target;
    double scale;
} Mapped;

#define MAX_TARGETS 32

typedef struct {
    Slice request_id_label, tenant;
    int has_tenant, keep_series, n_targets, error_target;
    double max[MAX_TARGETS];
    Mapped *metrics;
    size_t n_metrics;
    Slice *dims, *rejections;
    size_t n_dims, n_rejections;
} Spec;

typedef struct {
    Slice name, value;
    int dim;
} PartLabel;

typedef struct { /* a mapped series of the body being parsed */
    Slice tenant, request_id, error_class;
    int has_error_class, rejection;
    size_t labels, n_labels; /* into Scratch.labels */
} PartSeries;

typedef struct {
    size_t series; /* into Scratch.series */
    int target;
    double value;
    int64_t timestamp;
} Part;

typedef struct {
    uint64_t hash;
    Slice tenant, request_id, error_class;
    int has_error_class;
    int64_t first_ts;
    uint8_t rank;
    size_t labels, n_labels, cap; /* into Pivot.labels */
} Request;

typedef struct {
    Buf series, labels, parts; /* PartSeries, PartLabel, Part of the current body */
    int64_t dropped;
} Scratch;

typedef struct {
    Buf requests, values, present, labels, merged; /* Request, double, uint8, PartLabel x2 */
    int64_t *slots;                                 /* request index + 1; 0 is empty */
    size_t mask;
    int64_t taken, dropped;
} Pivot;

static uint64_t request_hash(Slice tenant, Slice request_id) {
    return hash_bytes(request_id.s, request_id.n) * 31 ^ hash_bytes(tenant.s, tenant.n);
}

static size_t n_requests(const Pivot *pv) { return pv->requests.len / sizeof(Request); }

static int pivot_grow(Pivot *pv) {
    size_t size = pv->slots ? 2 * (pv->mask + 1) : 1024;
    int64_t *slots = calloc(size, sizeof *slots);
    if (!slots) return -1;
    const Request *requests = (const Request *)pv->requests.data;
    for (size_t r = 0; r < n_requests(pv); r++) {
        size_t i = (size_t)requests[r].hash & (size - 1);
        while (slots[i]) i = (i + 1) & (size - 1);
        slots[i] = (int64_t)r + 1;
    }
    free(pv->slots);
    pv->slots = slots;
    pv->mask = size - 1;
    return 0;
}

/* The request of (tenant, request id), added when new; NULL when out of memory. */
static Request *pivot_request(Pivot *pv, Slice tenant, Slice request_id, int n_targets) {
    if (2 * (n_requests(pv) + 1) > (pv->slots ? pv->mask + 1 : 0) && pivot_grow(pv)) return NULL;
    uint64_t hash = request_hash(tenant, request_id);
    size_t i = (size_t)hash & pv->mask;
    Request *requests = (Request *)pv->requests.data;
    for (; pv->slots[i]; i = (i + 1) & pv->mask) {
        Request *r = &requests[pv->slots[i] - 1];
        if (r->hash == hash && compare_slices(r->tenant, tenant) == 0 &&
            compare_slices(r->request_id, request_id) == 0)
            return r;
    }
    Request fresh = {hash, tenant, request_id, {NULL, 0}, 0, INT64_MAX, 0, 0, 0, 0};
    size_t k = (size_t)n_targets;
    if (buf_put(&pv->requests, &fresh, sizeof fresh) || buf_reserve(&pv->values, k * 8) ||
        buf_reserve(&pv->present, k))
        return NULL;
    memset(pv->values.data + pv->values.len, 0, k * 8);
    memset(pv->present.data + pv->present.len, 0, k);
    pv->values.len += k * 8;
    pv->present.len += k;
    pv->slots[i] = (int64_t)n_requests(pv);
    return (Request *)pv->requests.data + n_requests(pv) - 1;
}

/* Merges a part's labels (sorted by name) into its request's (see the rules above). */
static int merge_labels(Pivot *pv, Request *r, const PartLabel *in, size_t n_in) {
    const PartLabel *have = (const PartLabel *)pv->labels.data + r->labels;
    size_t i = 0, j = 0;
    pv->merged.len = 0;
    while (i < r->n_labels || j < n_in) {
        PartLabel pick;
        if (j == n_in) {
            pick = have[i++];
        } else if (i == r->n_labels) {
            pick = in[j++];
        } else {
            int c = compare_slices(have[i].name, in[j].name);
            if (c < 0) {
                pick = have[i++];
            } else if (c > 0) {
                pick = in[j++];
            } else {
                pick = in[j].dim || compare_slices(in[j].value, have[i].value) > 0 ? in[j] : have[i];
                i++, j++;
            }
        }
        if (buf_put(&pv->merged, &pick, sizeof pick)) return NO_MEMORY;
    }
    size_t m = pv->merged.len / sizeof(PartLabel);
    if (m > r->cap) { /* a new label name: the request's labels move to the arena's end */
        size_t cap = m < 4 ? 8 : 2 * m;
        if (buf_reserve(&pv->labels, cap * sizeof(PartLabel))) return NO_MEMORY;
        r->labels = pv->labels.len / sizeof(PartLabel);
        r->cap = cap;
        pv->labels.len += cap * sizeof(PartLabel);
    }
    memcpy((PartLabel *)pv->labels.data + r->labels, pv->merged.data, pv->merged.len);
    r->n_labels = m;
    return OK;
}

/* Applies the parts of a body that was taken whole. */
static int apply_parts(Pivot *pv, Scratch *sc, const Spec *spec) {
    const Part *parts = (const Part *)sc->parts.data;
    size_t n = sc->parts.len / sizeof(Part);
    for (size_t k = 0; k < n; k++) {
        const Part *p = &parts[k];
        const PartSeries *s = (const PartSeries *)sc->series.data + p->series;
        Request *r = pivot_request(pv, s->tenant, s->request_id, spec->n_targets);
        if (!r) return NO_MEMORY;
        size_t index = (size_t)(r - (Request *)pv->requests.data) * (size_t)spec->n_targets;
        ((double *)pv->values.data)[index + (size_t)p->target] = p->value;
        ((uint8_t *)pv->present.data)[index + (size_t)p->target] = 1;
        if (p->timestamp < r->first_ts) r->first_ts = p->timestamp;
        if (p->target == spec->error_target && p->value > 0) {
            uint8_t rank = s->rejection ? 2 : 1;
            if (rank > r->rank) r->rank = rank;
            if (s->has_error_class) {
                r->error_class = s->error_class;
                r->has_error_class = 1;
            }
        }
        const PartLabel *labels = (const PartLabel *)sc->labels.data + s->labels;
        if (merge_labels(pv, r, labels, s->n_labels)) return NO_MEMORY;
    }
    pv->taken += (int64_t)n;
    pv->dropped += sc->dropped;
    sc->series.len = sc->labels.len = sc->parts.len = 0;
    sc->dropped = 0;
    return OK;
}

static void discard_parts(Scratch *sc) {
    sc->series.len = sc->labels.len = sc->parts.len = 0;
    sc->dropped = 0;
}

static int in_slices(Slice s, const Slice *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (compare_slices(s, list[i]) == 0) return 1;
    return 0;
}

/* ---- the pivot's output ---------------------------------------------------------------- */

#define N_PART_OUTPUTS 16

typedef struct {
    Buf tenant_offsets, tenant_data, id_offsets, id_data, first_ts, values, present, rank,
        class_offsets, class_data, class_valid, label_offsets, name_offsets, name_data,
        value_offsets, value_data;
} PartColumns;

static void part_outputs(PartColumns *c, Buf *list[N_PART_OUTPUTS]) {
    Buf *all[N_PART_OUTPUTS] = {&c->tenant_offsets, &c->tenant_data,   &c->id_offsets,
                                &c->id_data,        &c->first_ts,      &c->values,
                                &c->present,        &c->rank,          &c->class_offsets,
                                &c->class_data,     &c->class_valid,   &c->label_offsets,
                                &c->name_offsets,   &c->name_data,     &c->value_offsets,
                                &c->value_data};
    memcpy(list, all, sizeof all);
}

static int put_string(Buf *offsets, Buf *data, Slice s) {
    return buf_put(data, s.s, s.n) || buf_i32(offsets, (int32_t)data->len);
}

/* The pivot as columns: one row per request, in the order requests first appeared. */
static int pivot_columns(const Pivot *pv, PartColumns *c) {
    if (buf_i32(&c->tenant_offsets, 0) || buf_i32(&c->id_offsets, 0) ||
        buf_i32(&c->class_offsets, 0) || buf_i32(&c->label_offsets, 0) ||
        buf_i32(&c->name_offsets, 0) || buf_i32(&c->value_offsets, 0) ||
        buf_put(&c->values, pv->values.data, pv->values.len) ||
        buf_put(&c->present, pv->present.data, pv->present.len))
        return NO_MEMORY;
    const Request *requests = (const Request *)pv->requests.data;
    int32_t n_labels = 0;
    for (size_t r = 0; r < n_requests(pv); r++) {
        const Request *q = &requests[r];
        uint8_t valid = (uint8_t)q->has_error_class;
        Slice none = {(const uint8_t *)"", 0};
        if (put_string(&c->tenant_offsets, &c->tenant_data, q->tenant) ||
            put_string(&c->id_offsets, &c->id_data, q->request_id) ||
            buf_i64(&c->first_ts, q->first_ts) || buf_put(&c->rank, &q->rank, 1) ||
            put_string(&c->class_offsets, &c->class_data, valid ? q->error_class : none) ||
            buf_put(&c->class_valid, &valid, 1))
            return NO_MEMORY;
        const PartLabel *labels = (const PartLabel *)pv->labels.data + q->labels;
        for (size_t i = 0; i < q->n_labels; i++)
            if (put_string(&c->name_offsets, &c->name_data, labels[i].name) ||
                put_string(&c->value_offsets, &c->value_data, labels[i].value))
                return NO_MEMORY;
        n_labels += (int32_t)q->n_labels;
        if (buf_i32(&c->label_offsets, n_labels)) return NO_MEMORY;
    }
    return OK;
}

/* ---- one series ---------------------------------------------------------------------- */

typedef struct {
    const uint8_t *name, *value;
    size_t name_len, value_len;
} Label;

/* What the decoder keeps of each series while it reads a call's bodies. */
typedef struct {
    const KnownEntry *known; /* its entry in the known series, or NULL: a row is written */
    const uint8_t *fields;   /* its label fields, for a known series' row written late */
    size_t length;
} SeriesState;

typedef struct {
    Buf ids, metric_offsets, metric_data, label_offsets, name_offsets, name_data,
        value_offsets, value_data, owners, timestamps, values;
    /* Rows: the series whose `series` row this call writes, in the order of the row
       columns above (metric and labels); their time ranges (filled at the end); and the
       key remember() files each under (empty: never filed). */
    Buf row_series, row_min, row_max, key_offsets, key_data;
    Buf states; /* a SeriesState per series */
    const KnownSeries *known; /* NULL: every series gets a row */
    Buf scope;                /* the known series' scope of this call: its tenant */
    uint64_t scope_hash;
    Buf labels; /* scratch: the current series' Label array */
    Buf raw;    /* scratch: the current series' label fields, as (start, length) slices */
    Buf key;    /* scratch: the current series' key */
    Buf target; /* scratch: the current series' target key (its target labels) */
    Buf last_target;             /* the target key hashed last, and its hash's 8 bytes */
    uint8_t last_target_hash[8]; /* (a scrape's series share their target) */
    int64_t n_series, n_labels;
    Seen seen;
    /* The receiver's limits, 0 for none: series per body, labels per series (with
       __name__), bytes per label name and per label value (the metric name included). */
    uint64_t max_series, max_labels, max_name_len, max_value_len;
    const Spec *spec; /* NULL: per-request metrics are series like any other */
    /* When set, every series is this tenant's: its __tenant__ label (a sender's replaced),
       hashed into its id, as remote_write_tables.with_tenant does. */
    Label series_tenant;
    int has_series_tenant;
    Scratch scratch;
    Pivot pivot;
} Out;

static int compare_names(const Label *a, const Label *b) {
    size_t n = a->name_len < b->name_len ? a->name_len : b->name_len;
    int c = memcmp(a->name, b->name, n);
    if (c) return c;
    return (a->name_len > b->name_len) - (a->name_len < b->name_len);
}

static int compare_labels(const void *a, const void *b) { return compare_names(a, b); }

/* The index of a series' metric in the spec's mapping, or -1. */
static int mapped_metric(const Spec *spec, const Label *metric) {
    for (size_t i = 0; i < spec->n_metrics; i++) {
        const Slice *name = &spec->metrics[i].name;
        if (name->n == metric->value_len && memcmp(name->s, metric->value, name->n) == 0)
            return (int)i;
    }
    return -1;
}

/* Collects a mapped metric's series as parts of its request (into the body's scratch):
   1 when it is one (it carries the request-id label), 0 when it is a plain series,
   -1 when out of memory. */
static int take_parts(Out *o, const Label *labels, size_t count, const Label *metric, int which,
                      size_t first_sample, size_t samples) {
    const Spec *spec = o->spec;
    Scratch *sc = &o->scratch;
    PartSeries ps;
    memset(&ps, 0, sizeof ps);
    Slice tenant_label = {(const uint8_t *)"", 0};
    int has_id = 0;
    size_t first_label = sc->labels.len;
    ps.labels = first_label / sizeof(PartLabel);
    for (size_t i = 0; i < count; i++) {
        const Label *l = &labels[i];
        if (l == metric) continue;
        Slice name = {l->name, l->name_len}, value = {l->value, l->value_len};
        int reserved = 0;
        if (compare_slices(name, spec->request_id_label) == 0) {
            ps.request_id = value;
            has_id = reserved = 1;
        }
        if (slice_is(name, "tenant")) tenant_label = value, reserved = 1;
        if (slice_is(name, "error_class")) {
            ps.error_class = value;
            ps.has_error_class = reserved = 1;
        }
        if (reserved) continue;
        PartLabel part_label = {name, value, in_slices(name, spec->dims, spec->n_dims)};
        if (buf_put(&sc->labels, &part_label, sizeof part_label)) return -1;
    }
    if (!has_id) {
        sc->labels.len = first_label;
        return 0;
    }
    ps.n_labels = (sc->labels.len - first_label) / sizeof(PartLabel);
    ps.tenant = spec->has_tenant ? spec->tenant : tenant_label;
    ps.rejection =
        ps.has_error_class && in_slices(ps.error_class, spec->rejections, spec->n_rejections);
    size_t index = sc->series.len / sizeof(PartSeries);
    if (buf_put(&sc->series, &ps, sizeof ps)) return -1;
    const Mapped *m = &spec->metrics[which];
    double most = spec->max[m->target];
    const int64_t *timestamps = (const int64_t *)o->timestamps.data + first_sample;
    const double *values = (const double *)o->values.data + first_sample;
    for (size_t k = 0; k < samples; k++) {
        double value = values[k] * m->scale;
        if (!(value >= 0 && value <= most)) { /* NaN (staleness), infinite, out of range */
            sc->dropped++;
            continue;
        }
        Part part = {index, m->target, value, timestamps[k]};
        if (buf_put(&sc->parts, &part, sizeof part)) return -1;
    }
    return 1;
}

static int parse_label(const uint8_t *p, const uint8_t *end, Label *label) {
    label->name = label->value = (const uint8_t *)"";
    label->name_len = label->value_len = 0;
    while (p < end) {
        uint64_t key;
        if (read_tag(&p, end, &key)) return FALLBACK;
        int field = (int)(key >> 3), wire_type = (int)(key & 7);
        if (field == 1 || field == 2) {
            if (wire_type != 2) return FALLBACK;
            const uint8_t *s;
            size_t n;
            if (read_bytes(&p, end, &s, &n) || !valid_utf8(s, n)) return FALLBACK;
            if (field == 1) label->name = s, label->name_len = n;
            else label->value = s, label->value_len = n;
        } else if (skip_field(&p, end, wire_type)) {
            return FALLBACK;
        }
    }
    return OK;
}

static int parse_sample(const uint8_t *p, const uint8_t *end, double *value, int64_t *timestamp) {
    *value = 0.0;
    *timestamp = 0;
    while (p < end) {
        uint64_t key;
        if (read_tag(&p, end, &key)) return FALLBACK;
        int field = (int)(key >> 3), wire_type = (int)(key & 7);
        if (field == 1) {
            if (wire_type != 1 || end - p < 8) return FALLBACK;
            memcpy(value, p, 8); /* the wire is little-endian, as is every supported host */
            p += 8;
        } else if (field == 2) {
            uint64_t v;
            if (wire_type != 0 || read_varint(&p, end, &v)) return FALLBACK;
            *timestamp = (int64_t)v;
        } else if (skip_field(&p, end, wire_type)) {
            return FALLBACK;
        }
    }
    return OK;
}

/* Appends S(s) = "<len>:" s to a series key. */
static int put_key_part(Buf *key, const uint8_t *s, size_t n) {
    char digits[24];
    int k = sizeof digits;
    digits[--k] = ':';
    size_t v = n;
    do {
        digits[--k] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return buf_put(key, digits + k, sizeof digits - (size_t)k) || buf_put(key, s, n);
}

/* A label of the series being written: into its key and its label columns. */
/* __tenant__, instance, job: the labels hashed into the id's target half. */
static int is_target_label(const Label *l) {
    return (l->name_len == 10 && memcmp(l->name, "__tenant__", 10) == 0) ||
           (l->name_len == 8 && memcmp(l->name, "instance", 8) == 0) ||
           (l->name_len == 3 && memcmp(l->name, "job", 3) == 0);
}

static int put_label(Out *o, const Label *l) {
    if (is_target_label(l) && (put_key_part(&o->target, l->name, l->name_len) ||
                               put_key_part(&o->target, l->value, l->value_len)))
        return NO_MEMORY;
    if (put_key_part(&o->key, l->name, l->name_len) ||
        put_key_part(&o->key, l->value, l->value_len) ||
        buf_put(&o->name_data, l->name, l->name_len) ||
        buf_i32(&o->name_offsets, (int32_t)o->name_data.len) ||
        buf_put(&o->value_data, l->value, l->value_len) ||
        buf_i32(&o->value_offsets, (int32_t)o->value_data.len))
        return NO_MEMORY;
    o->n_labels++;
    return OK;
}

/* The label fields between fields and end (a known series' fields) into o->raw. */
static int label_slices(Out *o, const uint8_t *p, const uint8_t *end) {
    o->raw.len = 0;
    while (p < end) {
        uint64_t key;
        const uint8_t *s;
        size_t n;
        if (read_tag(&p, end, &key) || key != (1 << 3 | 2) || read_bytes(&p, end, &s, &n))
            return MISUSED;
        const uint8_t *slice[2] = {s, s + n};
        if (buf_put(&o->raw, slice, sizeof slice)) return NO_MEMORY;
    }
    return OK;
}

/* The labels of the series whose label fields o->raw holds: checked (FALLBACK: the Python
   decoder says why), empty values dropped, sorted by name, into o->labels; *metric is
   its __name__, and *canonical whether no empty value was dropped (senders send none:
   only such fields are filed as a known series, since no limit counts empty labels and
   one series in ever new padding would take ever new entries). */
static int read_labels(Out *o, size_t *count_out, const Label **metric_out, int *canonical) {
    o->labels.len = 0;
    *canonical = 1;
    const uint8_t **slices = (const uint8_t **)o->raw.data;
    for (size_t k = 0; k < o->raw.len / (2 * sizeof *slices); k++) {
        Label label;
        int status = parse_label(slices[2 * k], slices[2 * k + 1], &label);
        if (status) return status;
        if (label.value_len == 0) { /* an empty value is an absent label */
            *canonical = 0;
            continue;
        }
        if (label.name_len == 0) return FALLBACK;
        if ((o->max_name_len && label.name_len > o->max_name_len) ||
            (o->max_value_len && label.value_len > o->max_value_len))
            return FALLBACK; /* over a limit: Python says which */
        if (buf_put(&o->labels, &label, sizeof label)) return NO_MEMORY;
    }

    Label *labels = (Label *)o->labels.data;
    size_t count = o->labels.len / sizeof(Label);
    if (o->max_labels && count > o->max_labels) return FALLBACK;
    /* Senders sort labels already; check before sorting. */
    int sorted = 1;
    for (size_t i = 1; i < count && sorted; i++) sorted = compare_names(&labels[i - 1], &labels[i]) < 0;
    if (!sorted) {
        qsort(labels, count, sizeof(Label), compare_labels);
        for (size_t i = 1; i < count; i++)
            if (compare_names(&labels[i - 1], &labels[i]) == 0) return FALLBACK;
    }
    const Label *metric = NULL;
    for (size_t i = 0; i < count; i++)
        if (labels[i].name_len == 8 && memcmp(labels[i].name, "__name__", 8) == 0) metric = &labels[i];
    if (!metric) return FALLBACK;
    *count_out = count;
    *metric_out = metric;
    return OK;
}

/* A series' row: its metric and labels (o->labels) into the row columns, as series
   `index`, filed under its label fields (length 0: not filed); its id into id. */
static int put_row(Out *o, size_t count, const Label *metric, int64_t index,
                   const uint8_t *fields, size_t length, uint8_t id[16]) {
    const Label *labels = (const Label *)o->labels.data;
    o->key.len = o->target.len = 0;
    if (put_key_part(&o->key, metric->value, metric->value_len)) return NO_MEMORY;
    if (buf_put(&o->metric_data, metric->value, metric->value_len) ||
        buf_i32(&o->metric_offsets, (int32_t)o->metric_data.len))
        return NO_MEMORY;
    const Label *tenant = o->has_series_tenant ? &o->series_tenant : NULL;
    for (size_t i = 0; i <= count; i++) {
        const Label *l = i < count ? &labels[i] : NULL;
        if (tenant && (!l || compare_names(l, tenant) > 0)) { /* its place among the sorted */
            if (put_label(o, tenant)) return NO_MEMORY;
            tenant = NULL;
        }
        if (!l) break;
        if (l == metric || (o->has_series_tenant && compare_names(l, &o->series_tenant) == 0))
            continue;
        if (put_label(o, l)) return NO_MEMORY;
    }
    if (buf_i32(&o->label_offsets, (int32_t)o->n_labels)) return NO_MEMORY;

    uint8_t digest[16];
    const char *target = o->target.len ? o->target.data : "";
    if (!o->last_target.data || o->last_target.len != o->target.len ||
        memcmp(o->last_target.data, target, o->target.len) != 0) {
        md5((const uint8_t *)target, o->target.len, digest);
        memcpy(o->last_target_hash, digest, 8);
        o->last_target.len = 0;
        if (buf_put(&o->last_target, target, o->target.len) ||
            buf_reserve(&o->last_target, 1)) /* allocated even when empty */
            return NO_MEMORY;
    }
    md5((const uint8_t *)o->key.data, o->key.len, digest);
    for (int i = 0; i < 8; i++) {
        id[i] = digest[7 - i];
        id[8 + i] = o->last_target_hash[7 - i];
    }
    /* Key offsets are 32-bit: past that, rows go unfiled (written again next time). */
    if (!o->known || o->key_data.len + o->scope.len + length > INT32_MAX) length = 0;
    if (length && (buf_put(&o->key_data, o->scope.data, o->scope.len) ||
                   buf_put(&o->key_data, fields, length)))
        return NO_MEMORY;
    if (buf_i64(&o->row_series, index) || buf_i32(&o->key_offsets, (int32_t)o->key_data.len))
        return NO_MEMORY;
    return OK;
}

static int parse_series(const uint8_t *p, const uint8_t *end, int64_t min_timestamp,
                        int64_t max_timestamp, Out *o) {
    int64_t index = o->n_series;
    size_t first_sample = o->owners.len / 8;
    const uint8_t *fields = NULL, *fields_end = NULL; /* the label fields, when together */
    int together = 1;
    o->raw.len = 0;
    while (p < end) {
        const uint8_t *field_start = p;
        uint64_t key;
        if (read_tag(&p, end, &key)) return FALLBACK;
        int field = (int)(key >> 3), wire_type = (int)(key & 7);
        const uint8_t *s;
        size_t n;
        if (field == 1) {
            if (wire_type != 2 || read_bytes(&p, end, &s, &n)) return FALLBACK;
            if (!fields) fields = field_start;
            else if (fields_end != field_start) together = 0;
            fields_end = p;
            const uint8_t *slice[2] = {s, s + n};
            if (buf_put(&o->raw, slice, sizeof slice)) return NO_MEMORY;
        } else if (field == 2) {
            double value;
            int64_t timestamp;
            if (wire_type != 2 || read_bytes(&p, end, &s, &n)) return FALLBACK;
            int status = parse_sample(s, s + n, &value, &timestamp);
            if (status) return status;
            /* Outside what the store keeps: the Python decoder refuses it, naming why. */
            if (timestamp < min_timestamp || timestamp > max_timestamp) return FALLBACK;
            if (buf_i64(&o->owners, index) || buf_i64(&o->timestamps, timestamp) ||
                buf_put(&o->values, &value, 8))
                return NO_MEMORY;
        } else if (field == 3 || field == 4) {
            return FALLBACK; /* exemplars, histograms */
        } else if (skip_field(&p, end, wire_type)) {
            return FALLBACK;
        }
    }

    /* The same label fields as a series before it in this call: its samples are that
       series' samples. */
    size_t samples = o->owners.len / 8 - first_sample;
    size_t length = fields ? (size_t)(fields_end - fields) : 0;
    SeenEntry *seen = NULL;
    uint64_t hash = 0;
    if (together && fields && samples) {
        if (o->seen.count * 2 >= (o->seen.slots ? o->seen.mask + 1 : 0) && seen_grow(&o->seen))
            return NO_MEMORY;
        hash = hash_bytes(fields, length);
        seen = seen_slot(&o->seen, hash, fields, length, SEEN_MAX_PROBE);
        if (seen && seen->length) { /* only plain series are remembered */
            int64_t *owners = (int64_t *)o->owners.data + first_sample;
            for (size_t k = 0; k < samples; k++) owners[k] = seen->series;
            return OK;
        }
        /* The same label fields as a series an earlier call wrote: its id, no labels read
           (whether it needs a row again is known once every body is read). */
        const KnownEntry *known =
            o->known ? known_find(o->known, known_hash(hash, o->scope_hash),
                                  (const uint8_t *)o->scope.data, o->scope.len, fields, length)
                     : NULL;
        if (known) {
            SeriesState state = {known, fields, length};
            if (buf_put(&o->ids, known->id, 16) || buf_put(&o->states, &state, sizeof state))
                return NO_MEMORY;
            if (seen) {
                *seen = (SeenEntry){hash, fields, length, index};
                o->seen.count++;
            }
            o->n_series++;
            return OK;
        }
    }

    size_t count;
    const Label *metric;
    int canonical;
    int status = read_labels(o, &count, &metric, &canonical);
    if (status) return status;
    if (o->spec) {
        int which = mapped_metric(o->spec, metric);
        if (which >= 0) {
            int taken = take_parts(o, (const Label *)o->labels.data, count, metric, which,
                                   first_sample, samples);
            if (taken < 0) return NO_MEMORY;
            if (taken && !o->spec->keep_series) { /* a part, not a series */
                o->owners.len = o->timestamps.len = o->values.len = first_sample * 8;
                return OK;
            }
            if (taken) seen = NULL; /* kept as a series too, but never remembered */
        }
    }
    uint8_t id[16];
    SeriesState state = {NULL, fields, length};
    if (put_row(o, count, metric, index, fields, seen && canonical ? length : 0, id) ||
        buf_put(&o->ids, id, 16) || buf_put(&o->states, &state, sizeof state))
        return NO_MEMORY;
    if (seen) {
        *seen = (SeenEntry){hash, fields, length, index};
        o->seen.count++;
    }
    o->n_series++;
    return OK;
}

/* Once every body is read: a row for each known series whose samples reach past what
   its rows written cover, then every row's time range (its series' samples; none: the
   range is empty, min above max). */
static int finish_rows(Out *o) {
    size_t n = (size_t)o->n_series;
    Buf lo = {0}, hi = {0};
    int status = NO_MEMORY;
    if (buf_reserve(&lo, 8 * n + 8) || buf_reserve(&hi, 8 * n + 8)) goto done;
    int64_t *low = (int64_t *)lo.data, *high = (int64_t *)hi.data;
    for (size_t s = 0; s < n; s++) low[s] = INT64_MAX, high[s] = INT64_MIN;
    const int64_t *owners = (const int64_t *)o->owners.data;
    const int64_t *timestamps = (const int64_t *)o->timestamps.data;
    for (size_t k = 0; k < o->owners.len / 8; k++) {
        int64_t s = owners[k], t = timestamps[k];
        if (t < low[s]) low[s] = t;
        if (t > high[s]) high[s] = t;
    }
    const SeriesState *states = (const SeriesState *)o->states.data;
    for (size_t s = 0; s < n; s++) {
        const SeriesState *st = &states[s];
        if (!st->known || low[s] > high[s] || known_covers(o->known, st->known, low[s], high[s]))
            continue;
        size_t count;
        const Label *metric;
        uint8_t id[16];
        int canonical;
        status = label_slices(o, st->fields, st->fields + st->length);
        if (!status) status = read_labels(o, &count, &metric, &canonical);
        if (status == FALLBACK) status = MISUSED; /* refused now, taken when filed */
        if (!status) status = put_row(o, count, metric, (int64_t)s, st->fields, st->length, id);
        if (!status && memcmp(id, st->known->id, 16) != 0) status = MISUSED;
        if (status) goto done;
    }
    const int64_t *rows = (const int64_t *)o->row_series.data;
    status = NO_MEMORY;
    for (size_t r = 0; r < o->row_series.len / 8; r++)
        if (buf_i64(&o->row_min, low[rows[r]]) || buf_i64(&o->row_max, high[rows[r]])) goto done;
    status = OK;
done:
    free(lo.data);
    free(hi.data);
    return status;
}

static int parse_request(const uint8_t *p, const uint8_t *end, int64_t min_timestamp,
                         int64_t max_timestamp, Out *o) {
    uint64_t entries = 0; /* series entries, repeated or not: at least the distinct series */
    while (p < end) {
        uint64_t key;
        if (read_tag(&p, end, &key)) return FALLBACK;
        int field = (int)(key >> 3), wire_type = (int)(key & 7);
        if (field == 1) {
            const uint8_t *s;
            size_t n;
            if (wire_type != 2 || read_bytes(&p, end, &s, &n)) return FALLBACK;
            if (o->max_series && ++entries > o->max_series) return FALLBACK;
            int status = parse_series(s, s + n, min_timestamp, max_timestamp, o);
            if (status) return status;
        } else if (field == 3) {
            return FALLBACK; /* metadata */
        } else if (skip_field(&p, end, wire_type)) {
            return FALLBACK;
        }
    }
    return OK;
}

/* ---- the module ---------------------------------------------------------------------- */

#define N_OUTPUTS 16
#define N_ROLLED_BACK (N_OUTPUTS + 1)

/* The output buffers, in the order of the returned tuple (after n_series). */
static void outputs(Out *o, Buf *list[N_OUTPUTS]) {
    Buf *all[N_OUTPUTS] = {&o->ids,           &o->metric_offsets, &o->metric_data,
                           &o->label_offsets, &o->name_offsets,   &o->name_data,
                           &o->value_offsets, &o->value_data,     &o->owners,
                           &o->timestamps,    &o->values,         &o->row_series,
                           &o->row_min,       &o->row_max,        &o->key_offsets,
                           &o->key_data};
    memcpy(list, all, sizeof all);
}

/* The buffers a body adds to, which a body left out must leave as they were: the outputs
   (row_min and row_max stay empty until every body is read) and the series' states. */
static void rolled_back(Out *o, Buf *list[N_ROLLED_BACK]) {
    outputs(o, list);
    list[N_OUTPUTS] = &o->states;
}

static void out_free(Out *o) {
    Buf *list[N_OUTPUTS];
    outputs(o, list);
    for (int i = 0; i < N_OUTPUTS; i++) free(list[i]->data);
    free(o->states.data);
    free(o->scope.data);
    free(o->labels.data);
    free(o->raw.data);
    free(o->key.data);
    free(o->target.data);
    free(o->last_target.data);
    free(o->seen.slots);
    Buf *pivot[] = {&o->scratch.series, &o->scratch.labels, &o->scratch.parts,
                    &o->pivot.requests, &o->pivot.values,   &o->pivot.present,
                    &o->pivot.labels,   &o->pivot.merged};
    for (size_t i = 0; i < sizeof pivot / sizeof *pivot; i++) free(pivot[i]->data);
    free(o->pivot.slots);
}

static void spec_free(Spec *spec) {
    PyMem_Free(spec->metrics);
    PyMem_Free(spec->dims);
    PyMem_Free(spec->rejections);
}

static int as_slice(PyObject *bytes, Slice *out) {
    if (!PyBytes_Check(bytes)) {
        PyErr_SetString(PyExc_TypeError, "requests: names must be bytes");
        return -1;
    }
    out->s = (const uint8_t *)PyBytes_AS_STRING(bytes);
    out->n = (size_t)PyBytes_GET_SIZE(bytes);
    return 0;
}

static int as_slices(PyObject *sequence, Slice **out, size_t *n) {
    PyObject *fast = PySequence_Fast(sequence, "requests: expected a sequence of bytes");
    if (!fast) return -1;
    *n = (size_t)PySequence_Fast_GET_SIZE(fast);
    *out = PyMem_Calloc(*n + 1, sizeof(Slice));
    int status = *out ? 0 : (PyErr_NoMemory(), -1);
    for (size_t i = 0; i < *n && !status; i++)
        status = as_slice(PySequence_Fast_GET_ITEM(fast, (Py_ssize_t)i), &(*out)[i]);
    Py_DECREF(fast);
    return status;
}

/* The `requests` argument: (request_id_label, tenant or None, keep_series,
   ((metric, target, scale), ...), dims, rejections, (largest value per target, ...),
   error_target). Its bytes must outlive the call, which the caller's reference ensures. */
static int parse_spec(PyObject *obj, Spec *spec) {
    PyObject *label, *tenant, *metrics, *dims, *rejections, *maxima;
    int keep;
    memset(spec, 0, sizeof *spec);
    if (!PyArg_ParseTuple(obj, "OOpOOOOi", &label, &tenant, &keep, &metrics, &dims, &rejections,
                          &maxima, &spec->error_target))
        return -1;
    spec->keep_series = keep;
    if (as_slice(label, &spec->request_id_label)) return -1;
    if (tenant != Py_None) {
        if (as_slice(tenant, &spec->tenant)) return -1;
        spec->has_tenant = 1;
    }
    if (as_slices(dims, &spec->dims, &spec->n_dims) ||
        as_slices(rejections, &spec->rejections, &spec->n_rejections))
        return -1;
    PyObject *fast = PySequence_Fast(maxima, "requests: expected a sequence of floats");
    if (!fast) return -1;
    Py_ssize_t n_targets = PySequence_Fast_GET_SIZE(fast);
    if (n_targets > MAX_TARGETS) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_ValueError, "requests: too many targets");
        return -1;
    }
    spec->n_targets = (int)n_targets;
    for (Py_ssize_t i = 0; i < n_targets; i++)
        spec->max[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i));
    Py_DECREF(fast);
    if (PyErr_Occurred()) return -1;
    fast = PySequence_Fast(metrics, "requests: expected a sequence of metrics");
    if (!fast) return -1;
    spec->n_metrics = (size_t)PySequence_Fast_GET_SIZE(fast);
    spec->metrics = PyMem_Calloc(spec->n_metrics + 1, sizeof(Mapped));
    int status = spec->metrics ? 0 : (PyErr_NoMemory(), -1);
    for (size_t i = 0; i < spec->n_metrics && !status; i++) {
        PyObject *name;
        Mapped *m = &spec->metrics[i];
        status = PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, (Py_ssize_t)i), "Oid", &name,
                                  &m->target, &m->scale)
                     ? as_slice(name, &m->name)
                     : -1;
        if (!status && (m->target < 0 || m->target >= spec->n_targets)) {
            PyErr_SetString(PyExc_ValueError, "requests: a metric's target is out of range");
            status = -1;
        }
    }
    Py_DECREF(fast);
    if (!status && (spec->error_target < 0 || spec->error_target >= spec->n_targets)) {
        PyErr_SetString(PyExc_ValueError, "requests: error_target is out of range");
        status = -1;
    }
    return status;
}

static PyObject *bytes_of(const Buf *b) {
    return PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len);
}

/* (n_requests, tenant_offsets i32[n+1], tenant_data, request_id_offsets, request_id_data,
    first_ts i64[n], values f64[n*K], present u8[n*K], rank u8[n], error_class_offsets,
    error_class_data, error_class_valid u8[n], label_offsets i32[n+1], name_offsets
    i32[L+1], name_data, value_offsets i32[L+1], value_data, taken, dropped): K is the
   number of targets; taken and dropped count the samples that became parts and those
   that were no measurement. */
static PyObject *parts_result(const Out *o, PartColumns *c) {
    Buf *list[N_PART_OUTPUTS];
    part_outputs(c, list);
    PyObject *items = PyTuple_New(3 + N_PART_OUTPUTS);
    if (!items) return NULL;
    PyTuple_SET_ITEM(items, 0, PyLong_FromSize_t(n_requests(&o->pivot)));
    for (int k = 0; k < N_PART_OUTPUTS; k++) PyTuple_SET_ITEM(items, 1 + k, bytes_of(list[k]));
    PyTuple_SET_ITEM(items, 1 + N_PART_OUTPUTS, PyLong_FromLongLong(o->pivot.taken));
    PyTuple_SET_ITEM(items, 2 + N_PART_OUTPUTS, PyLong_FromLongLong(o->pivot.dropped));
    for (int k = 0; k < 3 + N_PART_OUTPUTS; k++) {
        if (!PyTuple_GET_ITEM(items, k)) {
            Py_DECREF(items);
            return NULL;
        }
    }
    return items;
}

typedef struct {
    Py_buffer view;
    int held;
} Body;

static PyObject *columns(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *sequence, *requests = Py_None, *series_tenant = Py_None, *known = Py_None;
    long long min_timestamp, max_timestamp = INT64_MAX;
    unsigned long long limits[4] = {0, 0, 0, 0};
    if (!PyArg_ParseTuple(args, "OL|(KKKK)OLOO", &sequence, &min_timestamp, &limits[0],
                          &limits[1], &limits[2], &limits[3], &requests, &max_timestamp,
                          &series_tenant, &known))
        return NULL;
    if (known != Py_None) {
        if (!PyObject_TypeCheck(known, &KnownSeriesType)) {
            PyErr_SetString(PyExc_TypeError, "known must be a KnownSeries or None");
            return NULL;
        }
        if (known_ready((KnownSeries *)known)) return NULL;
    }
    Slice tenant_value = {NULL, 0};
    if (series_tenant != Py_None && as_slice(series_tenant, &tenant_value)) return NULL;
    Spec spec;
    memset(&spec, 0, sizeof spec);
    if (requests != Py_None && parse_spec(requests, &spec)) {
        spec_free(&spec);
        return NULL;
    }
    PyObject *fast = PySequence_Fast(sequence, "bodies must be a sequence of bytes");
    if (!fast) {
        spec_free(&spec);
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
    Body *bodies = PyMem_Calloc((size_t)count + 1, sizeof(Body));
    char *refused = PyMem_Calloc((size_t)count + 1, 1);
    PyObject *result = NULL;
    Out o;
    PartColumns part_columns;
    memset(&o, 0, sizeof o);
    memset(&part_columns, 0, sizeof part_columns);
    o.max_series = limits[0];
    o.max_labels = limits[1];
    o.max_name_len = limits[2];
    o.max_value_len = limits[3];
    o.spec = requests != Py_None ? &spec : NULL;
    if (series_tenant != Py_None) {
        o.series_tenant = (Label){(const uint8_t *)"__tenant__", tenant_value.s, 10, tenant_value.n};
        o.has_series_tenant = 1;
    }
    /* The scope of known series: what else goes into an id (the tenant), so that equal
       label fields of two tenants are two series (see known_scope_length). */
    uint32_t scope_head = o.has_series_tenant ? (uint32_t)tenant_value.n : UINT32_MAX;
    if (!bodies || !refused || tenant_value.n >= UINT32_MAX ||
        buf_put(&o.scope, &scope_head, 4) ||
        (o.has_series_tenant && buf_put(&o.scope, tenant_value.s, tenant_value.n))) {
        PyErr_NoMemory();
        goto done;
    }
    o.scope_hash = hash_bytes((const uint8_t *)o.scope.data, o.scope.len);
    if (known != Py_None) o.known = (const KnownSeries *)known;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(fast, i), &bodies[i].view, PyBUF_SIMPLE))
            goto done;
        bodies[i].held = 1;
    }

    int status = OK;
    Py_BEGIN_ALLOW_THREADS
    if (o.known) pthread_rwlock_rdlock((pthread_rwlock_t *)&o.known->lock);
    Buf *list[N_ROLLED_BACK];
    rolled_back(&o, list);
    if (buf_i32(&o.metric_offsets, 0) || buf_i32(&o.label_offsets, 0) ||
        buf_i32(&o.name_offsets, 0) || buf_i32(&o.value_offsets, 0) ||
        buf_i32(&o.key_offsets, 0))
        status = NO_MEMORY;
    size_t total = 0;
    for (Py_ssize_t i = 0; i < count && status != NO_MEMORY; i++) {
        const uint8_t *start = bodies[i].view.buf;
        total += (size_t)bodies[i].view.len;
        if (total > INT32_MAX) { /* string offsets are 32-bit: the rest go the slow way */
            refused[i] = 1;
            continue;
        }
        /* A body the fast path does not take leaves nothing behind. */
        size_t lengths[N_ROLLED_BACK];
        for (int k = 0; k < N_ROLLED_BACK; k++) lengths[k] = list[k]->len;
        int64_t n_series = o.n_series, n_labels = o.n_labels;
        size_t seen = o.seen.count;
        status = parse_request(start, start + bodies[i].view.len, (int64_t)min_timestamp,
                               (int64_t)max_timestamp, &o);
        if (status == FALLBACK) {
            for (int k = 0; k < N_ROLLED_BACK; k++) list[k]->len = lengths[k];
            o.n_series = n_series;
            o.n_labels = n_labels;
            if (o.seen.count != seen) seen_clear(&o.seen); /* it names series rolled back */
            discard_parts(&o.scratch);
            refused[i] = 1;
            status = OK;
        } else if (status == OK) {
            status = apply_parts(&o.pivot, &o.scratch, o.spec);
        }
    }
    if (status == OK) status = finish_rows(&o);
    if (o.known) pthread_rwlock_unlock((pthread_rwlock_t *)&o.known->lock);
    if (status == OK && o.spec) status = pivot_columns(&o.pivot, &part_columns);
    Py_END_ALLOW_THREADS
    if (status == NO_MEMORY) {
        PyErr_NoMemory();
        goto done;
    }
    if (status == MISUSED) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a known series' label fields decode otherwise than when they were "
                        "filed: one KnownSeries serves one set of limits and spec");
        goto done;
    }
    PyObject *left = PyList_New(0);
    if (!left) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!refused[i]) continue;
        PyObject *index = PyLong_FromSsize_t(i);
        if (!index || PyList_Append(left, index)) {
            Py_XDECREF(index);
            Py_DECREF(left);
            goto done;
        }
        Py_DECREF(index);
    }
    PyObject *parts = Py_None;
    Py_INCREF(parts);
    if (o.spec) {
        Py_DECREF(parts);
        parts = parts_result(&o, &part_columns);
        if (!parts) {
            Py_DECREF(left);
            goto done;
        }
    }
    Buf *out_list[N_OUTPUTS];
    outputs(&o, out_list);
    PyObject *items = PyTuple_New(1 + N_OUTPUTS);
    if (!items) {
        Py_DECREF(left);
        Py_DECREF(parts);
        goto done;
    }
    PyTuple_SET_ITEM(items, 0, PyLong_FromLongLong(o.n_series));
    for (int k = 0; k < N_OUTPUTS; k++) PyTuple_SET_ITEM(items, 1 + k, bytes_of(out_list[k]));
    for (int k = 0; k <= N_OUTPUTS; k++) {
        if (!PyTuple_GET_ITEM(items, k)) {
            Py_DECREF(items);
            Py_DECREF(left);
            Py_DECREF(parts);
            goto done;
        }
    }
    result = Py_BuildValue("(NNN)", items, left, parts);

done:
    for (Py_ssize_t i = 0; i < count; i++)
        if (bodies && bodies[i].held) PyBuffer_Release(&bodies[i].view);
    PyMem_Free(bodies);
    PyMem_Free(refused);
    Py_DECREF(fast);
    out_free(&o);
    Buf *part_list[N_PART_OUTPUTS];
    part_outputs(&part_columns, part_list);
    for (int k = 0; k < N_PART_OUTPUTS; k++) free(part_list[k]->data);
    spec_free(&spec);
    return result;
}

static PyMethodDef methods[] = {
    {"columns", columns, METH_VARARGS,
     "columns(bodies, min_timestamp, limits=(0, 0, 0, 0), requests=None, max_timestamp=2**63-1,"
     " tenant=None, known=None)\n"
     "    -> (columns, refused, parts)\n\n"
     "Decompressed prometheus.WriteRequest bodies of float samples as one set of columns, "
     "the indices of the bodies left to the Python decoder (they add nothing), and with "
     "a requests spec the per-request parts pivoted into one row per request."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_v1_fast", "Remote write 1.0 float samples decoded in C.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__v1_fast(void) {
    if (getrandom(&hash_key, sizeof hash_key, 0) != (ssize_t)sizeof hash_key) {
        PyErr_SetFromErrno(PyExc_OSError);
        return NULL;
    }
    if (PyType_Ready(&KnownSeriesType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "KnownSeries", (PyObject *)&KnownSeriesType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
