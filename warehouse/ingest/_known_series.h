/*
 * The series a receiver has written, by the label fields their senders send them with.
 * Included by _v1_fast.c (after its Buf and hash_bytes), whose decoder consults it.
 *
 * A long-lived series arrives every scrape with the same label fields, byte for byte.
 * The first time the decoder checks, sorts and hashes them into the series' id, and
 * writes its `series` row; once that row is committed, remember() files the fields
 * (with the tenant whose id they were hashed into) under the id and the time range the
 * rows written so far cover. From then on the decoder maps those bytes straight to the
 * id, without reading a label, and writes no row while the series' samples stay within
 * what was written: a row is written again when a sample reaches before the written
 * min_time, or into a later refresh period (epoch-aligned periods of refresh_ms) than
 * the written max_time, as docs/remote-write.md ("Series rows") says.
 *
 * Equal bytes give an equal outcome only under the same limits and per-request spec,
 * so a KnownSeries serves one receiver's decoder with one configuration; and only
 * plain series are filed, never a series that is a per-request part.
 *
 * An open-addressing table of entries, each with its key (scope + label fields) in one
 * arena. It grows as it fills; past `capacity` entries it starts again empty, which
 * costs one more row of each series. The decoder reads it without the GIL under a
 * read lock; remember() and clear() take the write lock.
 */

#include <pthread.h>

typedef struct {
    uint64_t hash;
    size_t key_at;  /* the key's offset in the arena */
    size_t key_len; /* 0: an empty slot */
    uint8_t id[16];
    int64_t min_time, max_time; /* what the rows written so far cover */
} KnownEntry;

typedef struct {
    PyObject_HEAD
    KnownEntry *slots;
    size_t mask, count, capacity;
    Buf arena;
    int64_t refresh_ms;
    pthread_rwlock_t lock;
    int ready;
} KnownSeries;

static PyTypeObject KnownSeriesType;

/* The slot hash of a key: its label fields' hash and its scope's (both keyed). */
static uint64_t known_hash(uint64_t fields_hash, uint64_t scope_hash) {
    uint64_t h = fields_hash + scope_hash * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 31;
    h *= 0xd6e8feb86659fd93ULL;
    return h ^ (h >> 32);
}

/* The entry of (scope, fields), or the empty slot where it would go. */
static KnownEntry *known_slot(const KnownSeries *k, uint64_t hash, const uint8_t *scope,
                              size_t scope_len, const uint8_t *fields, size_t length) {
    size_t i = (size_t)hash & k->mask;
    for (;; i = (i + 1) & k->mask) {
        KnownEntry *e = &k->slots[i];
        if (e->key_len == 0) return e;
        const uint8_t *key = (const uint8_t *)k->arena.data + e->key_at;
        if (e->hash == hash && e->key_len == scope_len + length &&
            memcmp(key, scope, scope_len) == 0 && memcmp(key + scope_len, fields, length) == 0)
            return e;
    }
}

/* What one sender can make the table hold, whatever bytes it sends (the label fields are
   a sender's to choose; hash_bytes is keyed with a secret of the process, but a bound
   does not rest on that): an entry sits at most KNOWN_MAX_PROBE slots past its home
   slot, a key is at most KNOWN_MAX_KEY bytes (empty-valued labels, which no limit
   counts, would make it any length), and the keys together at most KNOWN_KEY_BYTES a
   series of capacity. A key past them is not filed (or the table starts again): its
   series is decoded afresh, as a series never filed is, so none of them changes an
   outcome. */
enum { KNOWN_MAX_PROBE = 64 };
#define KNOWN_MAX_KEY ((size_t)16 << 10)
#define KNOWN_KEY_BYTES ((size_t)1 << 10)

static KnownEntry *known_find(const KnownSeries *k, uint64_t hash, const uint8_t *scope,
                              size_t scope_len, const uint8_t *fields, size_t length) {
    if (!k->count) return NULL;
    KnownEntry *e = known_slot(k, hash, scope, scope_len, fields, length);
    return e->key_len ? e : NULL;
}

/* A key is its scope, then the series' label fields. The scope is a uint32 (native
   order) with the length of the tenant hashed into the series' ids, then that tenant;
   UINT32_MAX and nothing after it when there is none. The scope's length, or 0 when
   the key is too short to hold the scope it announces. */
static size_t known_scope_length(const uint8_t *key, size_t key_len) {
    uint32_t head;
    if (key_len < 4) return 0;
    memcpy(&head, key, 4);
    size_t length = 4 + (head == UINT32_MAX ? 0 : (size_t)head);
    return length < key_len ? length : 0;
}

/* floor(t / length), for any t and length > 0 */
static int64_t period_of(int64_t t, int64_t length) {
    int64_t q = t / length;
    return (t % length < 0) ? q - 1 : q;
}

/* Whether the rows written cover samples from lo to hi (see the top of this file). */
static int known_covers(const KnownSeries *k, const KnownEntry *e, int64_t lo, int64_t hi) {
    if (lo < e->min_time) return 0;
    if (k->refresh_ms > 0) return period_of(hi, k->refresh_ms) <= period_of(e->max_time, k->refresh_ms);
    return hi <= e->max_time;
}

static int known_resize(KnownSeries *k, size_t size) {
    KnownEntry *slots = calloc(size, sizeof(KnownEntry));
    if (!slots) return -1;
    KnownEntry *old = k->slots;
    size_t old_size = old ? k->mask + 1 : 0;
    k->slots = slots;
    k->mask = size - 1;
    for (size_t i = 0; i < old_size; i++) {
        if (!old[i].key_len) continue;
        size_t j = (size_t)old[i].hash & k->mask;
        while (slots[j].key_len) j = (j + 1) & k->mask;
        slots[j] = old[i];
    }
    free(old);
    return 0;
}

static void known_empty(KnownSeries *k) {
    if (k->slots) memset(k->slots, 0, (k->mask + 1) * sizeof(KnownEntry));
    k->count = 0;
    k->arena.len = 0;
}

/* Files a written row: (scope + fields) -> id, widening what it covers. -1: no memory. */
static int known_put(KnownSeries *k, const uint8_t *key, size_t key_len, size_t scope_len,
                     uint64_t scope_hash, const uint8_t id[16], int64_t lo, int64_t hi) {
    const uint8_t *fields = key + scope_len;
    size_t length = key_len - scope_len;
    uint64_t hash = known_hash(hash_bytes(fields, length), scope_hash);
    KnownEntry *e = known_slot(k, hash, key, scope_len, fields, length);
    if (e->key_len) {
        if (lo < e->min_time) e->min_time = lo;
        if (hi > e->max_time) e->max_time = hi;
        return 0;
    }
    if (key_len > KNOWN_MAX_KEY) return 0; /* not filed: see KNOWN_MAX_PROBE */
    if (k->count >= k->capacity || k->arena.len + key_len > k->capacity * KNOWN_KEY_BYTES) {
        known_empty(k); /* full: start again */
        e = known_slot(k, hash, key, scope_len, fields, length);
    }
    if ((k->count + 1) * 2 > k->mask + 1) { /* load factor at most 1/2 */
        if (known_resize(k, 2 * (k->mask + 1))) return -1;
        e = known_slot(k, hash, key, scope_len, fields, length);
    }
    size_t home = (size_t)hash & k->mask;
    if ((((size_t)(e - k->slots) - home) & k->mask) > KNOWN_MAX_PROBE)
        return 0; /* a crowd of equal hashes: not filed */
    size_t at = k->arena.len;
    if (buf_put(&k->arena, key, key_len)) return -1;
    *e = (KnownEntry){hash, at, key_len, {0}, lo, hi};
    memcpy(e->id, id, 16);
    k->count++;
    return 0;
}

/* ---- the Python type ---------------------------------------------------------------- */

static int known_init(KnownSeries *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"capacity", "refresh_ms", NULL};
    Py_ssize_t capacity;
    long long refresh_ms;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nL", keywords, &capacity, &refresh_ms))
        return -1;
    if (capacity < 1 || capacity > ((Py_ssize_t)1 << 40)) {
        PyErr_SetString(PyExc_ValueError, "capacity must be between 1 and 2**40");
        return -1;
    }
    if (refresh_ms < 0) {
        PyErr_SetString(PyExc_ValueError, "refresh_ms must be 0 or more");
        return -1;
    }
    if (!self->ready) {
        if (pthread_rwlock_init(&self->lock, NULL)) {
            PyErr_SetString(PyExc_OSError, "could not create the table's lock");
            return -1;
        }
        self->ready = 1;
    }
    pthread_rwlock_wrlock(&self->lock);
    free(self->slots);
    self->slots = NULL;
    known_empty(self);
    int failed = known_resize(self, 1024);
    self->capacity = (size_t)capacity;
    self->refresh_ms = refresh_ms;
    pthread_rwlock_unlock(&self->lock);
    if (failed) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* 0 when __init__ has run; else -1 with an error set. */
static int known_ready(const KnownSeries *self) {
    if (self->ready && self->slots) return 0;
    PyErr_SetString(PyExc_RuntimeError, "KnownSeries.__init__ was not called");
    return -1;
}

static void known_dealloc(KnownSeries *self) {
    free(self->slots);
    free(self->arena.data);
    if (self->ready) pthread_rwlock_destroy(&self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

enum { N_REMEMBERED = 6 };

/* remember(ids, row_series, row_min, row_max, key_offsets, key_data): the rows of one
   columns() call, committed. Keys of length 0 (series never filed) are skipped. */
static PyObject *known_remember(KnownSeries *self, PyObject *args) {
    PyObject *objects[N_REMEMBERED];
    if (known_ready(self) ||
        !PyArg_ParseTuple(args, "OOOOOO", &objects[0], &objects[1], &objects[2], &objects[3],
                          &objects[4], &objects[5]))
        return NULL;
    Py_buffer views[N_REMEMBERED];
    int held = 0;
    for (; held < N_REMEMBERED; held++)
        if (PyObject_GetBuffer(objects[held], &views[held], PyBUF_SIMPLE)) break;
    PyObject *result = NULL;
    if (held < N_REMEMBERED) goto done;
    Py_ssize_t rows = views[1].len / 8;
    const int32_t *key_offsets = views[4].buf;
    if (views[0].len % 16 || views[1].len % 8 || views[2].len != rows * 8 ||
        views[3].len != rows * 8 || views[4].len != (rows + 1) * 4) {
        PyErr_SetString(PyExc_ValueError, "remember: the columns of one columns() call");
        goto done;
    }
    Py_ssize_t n_series = views[0].len / 16;
    for (Py_ssize_t r = 0; r < rows; r++) {
        int64_t s;
        memcpy(&s, (const char *)views[1].buf + 8 * r, 8);
        int32_t a = key_offsets[r], b = key_offsets[r + 1];
        if (s < 0 || s >= n_series || a < 0 || b < a || b > views[5].len ||
            (b > a && !known_scope_length((const uint8_t *)views[5].buf + a, (size_t)(b - a)))) {
            PyErr_SetString(PyExc_ValueError, "remember: the columns of one columns() call");
            goto done;
        }
    }
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_rwlock_wrlock(&self->lock);
    const uint8_t *data = views[5].buf;
    for (Py_ssize_t r = 0; r < rows && !failed; r++) {
        int32_t a = key_offsets[r], b = key_offsets[r + 1];
        int64_t s, lo, hi;
        memcpy(&s, (const char *)views[1].buf + 8 * r, 8);
        memcpy(&lo, (const char *)views[2].buf + 8 * r, 8);
        memcpy(&hi, (const char *)views[3].buf + 8 * r, 8);
        if (b == a || lo > hi) continue;
        size_t scope_len = known_scope_length(data + a, (size_t)(b - a));
        failed = known_put(self, data + a, (size_t)(b - a), scope_len,
                           hash_bytes(data + a, scope_len),
                           (const uint8_t *)views[0].buf + 16 * s, lo, hi);
    }
    pthread_rwlock_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    for (int i = 0; i < held; i++) PyBuffer_Release(&views[i]);
    return result;
}

static PyObject *known_clear(KnownSeries *self, PyObject *unused) {
    (void)unused;
    if (known_ready(self)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    pthread_rwlock_wrlock(&self->lock);
    known_empty(self);
    pthread_rwlock_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static Py_ssize_t known_len(KnownSeries *self) { return (Py_ssize_t)self->count; }

static PyMethodDef known_methods[] = {
    {"remember", (PyCFunction)known_remember, METH_VARARGS,
     "remember(ids, row_series, row_min, row_max, key_offsets, key_data): the series rows "
     "of one columns() call are committed"},
    {"clear", (PyCFunction)known_clear, METH_NOARGS, "Forget every series."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods known_sequence = {.sq_length = (lenfunc)known_len};

static PyTypeObject KnownSeriesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "warehouse.ingest._v1_fast.KnownSeries",
    .tp_basicsize = sizeof(KnownSeries),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "KnownSeries(capacity, refresh_ms): the series a receiver has written, "
              "by their label fields (see _known_series.h).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)known_init,
    .tp_dealloc = (destructor)known_dealloc,
    .tp_methods = known_methods,
    .tp_as_sequence = &known_sequence,
};
