/*
 * Series ids, with a time range each. The new-series budget (cardinality.py) keeps the
 * ids it has seen here (with empty ranges); the remote-write decoder keeps the series
 * written in a table of its own, by label bytes (_known_series.h), by the rule below.
 *
 * A long-lived series sends a sample every scrape; writing its `series` row again on
 * every flush costs ClickHouse an insert (a part: a dozen files) for rows it will
 * collapse anyway. SeriesCache(capacity) remembers, per 16-byte series id, the
 * smallest min_time and largest max_time written, so a flush writes a series row only
 * when the series is new to this receiver, reaches earlier than written, or into a
 * later refresh period (epoch-aligned periods of refresh_ms) than the written max_time. An open-addressing hash table (the ids
 * are MD5 digests: their first 8 bytes are the hash); when it would pass `capacity`
 * entries it starts again empty, which costs one more write of each series.
 *
 * unseen(ids, min_times, max_times, refresh_ms) -> bytes: one byte per series, 1 when
 * its row must be written. remember(ids, min_times, max_times): after those rows are
 * committed. Buffers: ids 16 bytes each, times int64 (Unix ms), native byte order.
 * Both run under the GIL, so concurrent flushes see each other's entries whole.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint8_t id[16];
    int64_t min_time, max_time;
} Entry;

typedef struct {
    PyObject_HEAD
    Entry *slots;
    uint8_t *used;
    size_t mask, count, capacity;
} SeriesCache;

static size_t slot_of(const SeriesCache *c, const uint8_t *id) {
    uint64_t h;
    memcpy(&h, id, 8);
    size_t i = (size_t)h & c->mask;
    while (c->used[i] && memcmp(c->slots[i].id, id, 16) != 0) i = (i + 1) & c->mask;
    return i;
}

static int cache_init(SeriesCache *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"capacity", NULL};
    Py_ssize_t capacity;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n", keywords, &capacity)) return -1;
    if (capacity < 1 || capacity > ((Py_ssize_t)1 << 40)) {
        PyErr_SetString(PyExc_ValueError, "capacity must be between 1 and 2**40");
        return -1;
    }
    size_t size = 16;
    while (size < (size_t)capacity * 2) size *= 2; /* load factor at most 1/2 */
    Entry *slots = PyMem_Calloc(size, sizeof(Entry));
    uint8_t *used = PyMem_Calloc(size, 1);
    if (!slots || !used) {
        PyMem_Free(slots);
        PyMem_Free(used);
        PyErr_NoMemory();
        return -1;
    }
    PyMem_Free(self->slots);
    PyMem_Free(self->used);
    self->slots = slots;
    self->used = used;
    self->mask = size - 1;
    self->count = 0;
    self->capacity = (size_t)capacity;
    return 0;
}

/* 0 when __init__ has run; else -1 with an error set. */
static int ready(const SeriesCache *self) {
    if (self->used) return 0;
    PyErr_SetString(PyExc_RuntimeError, "SeriesCache.__init__ was not called");
    return -1;
}

static void cache_dealloc(SeriesCache *self) {
    PyMem_Free(self->slots);
    PyMem_Free(self->used);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The k-th int64 of a caller's buffer, whatever its alignment. */
static int64_t load_i64(const void *buf, Py_ssize_t k) {
    int64_t v;
    memcpy(&v, (const char *)buf + 8 * k, 8);
    return v;
}

typedef struct {
    Py_buffer ids, min_times, max_times;
    Py_ssize_t n;
} Rows;

static void rows_release(Rows *r) {
    if (r->ids.obj) PyBuffer_Release(&r->ids);
    if (r->min_times.obj) PyBuffer_Release(&r->min_times);
    if (r->max_times.obj) PyBuffer_Release(&r->max_times);
}

static int rows_get(Rows *r, PyObject *ids, PyObject *min_times, PyObject *max_times) {
    memset(r, 0, sizeof *r);
    if (PyObject_GetBuffer(ids, &r->ids, PyBUF_SIMPLE) ||
        PyObject_GetBuffer(min_times, &r->min_times, PyBUF_SIMPLE) ||
        PyObject_GetBuffer(max_times, &r->max_times, PyBUF_SIMPLE)) {
        rows_release(r);
        return -1;
    }
    r->n = r->ids.len / 16;
    if (r->ids.len % 16 || r->min_times.len != r->n * 8 || r->max_times.len != r->n * 8) {
        rows_release(r);
        PyErr_SetString(PyExc_ValueError, "ids must be 16 bytes and times 8 bytes per series");
        return -1;
    }
    return 0;
}

/* floor(t / length), for any t and length > 0 */
static int64_t period(int64_t t, int64_t length) {
    int64_t q = t / length;
    return (t % length < 0) ? q - 1 : q;
}

static PyObject *cache_unseen(SeriesCache *self, PyObject *args) {
    PyObject *ids, *min_times, *max_times;
    long long refresh_ms;
    if (ready(self) || !PyArg_ParseTuple(args, "OOOL", &ids, &min_times, &max_times, &refresh_ms))
        return NULL;
    Rows r;
    if (rows_get(&r, ids, min_times, max_times)) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, r.n);
    if (out) {
        uint8_t *write = (uint8_t *)PyBytes_AS_STRING(out);
        const uint8_t *id = r.ids.buf;
        for (Py_ssize_t k = 0; k < r.n; k++, id += 16) {
            int64_t lo = load_i64(r.min_times.buf, k), hi = load_i64(r.max_times.buf, k);
            size_t i = slot_of(self, id);
            const Entry *e = &self->slots[i];
            /* Later in a refresh period than the written max_time: periods are aligned
               on the epoch, so the series of a scrape cross into the next one together
               and their rewrites share one flush instead of trickling into every one. */
            int later = refresh_ms > 0 ? period(hi, refresh_ms) > period(e->max_time, refresh_ms)
                                       : hi > e->max_time;
            write[k] = !self->used[i] || lo < e->min_time || later;
        }
    }
    rows_release(&r);
    return out;
}

static PyObject *cache_remember(SeriesCache *self, PyObject *args) {
    PyObject *ids, *min_times, *max_times;
    if (ready(self) || !PyArg_ParseTuple(args, "OOO", &ids, &min_times, &max_times)) return NULL;
    Rows r;
    if (rows_get(&r, ids, min_times, max_times)) return NULL;
    const uint8_t *id = r.ids.buf;
    for (Py_ssize_t k = 0; k < r.n; k++, id += 16) {
        int64_t lo = load_i64(r.min_times.buf, k), hi = load_i64(r.max_times.buf, k);
        size_t i = slot_of(self, id);
        Entry *e = &self->slots[i];
        if (!self->used[i]) {
            if (self->count >= self->capacity) { /* full: start again */
                memset(self->used, 0, self->mask + 1);
                self->count = 0;
                i = slot_of(self, id);
                e = &self->slots[i];
            }
            self->used[i] = 1;
            self->count++;
            memcpy(e->id, id, 16);
            e->min_time = lo;
            e->max_time = hi;
        } else {
            if (lo < e->min_time) e->min_time = lo;
            if (hi > e->max_time) e->max_time = hi;
        }
    }
    rows_release(&r);
    Py_RETURN_NONE;
}

static PyObject *cache_clear(SeriesCache *self, PyObject *unused) {
    (void)unused;
    if (ready(self)) return NULL;
    memset(self->used, 0, self->mask + 1);
    self->count = 0;
    Py_RETURN_NONE;
}

static Py_ssize_t cache_len(SeriesCache *self) { return (Py_ssize_t)self->count; }

static PyMethodDef cache_methods[] = {
    {"unseen", (PyCFunction)cache_unseen, METH_VARARGS,
     "unseen(ids, min_times, max_times, refresh_ms) -> bytes: 1 for each series to write"},
    {"remember", (PyCFunction)cache_remember, METH_VARARGS,
     "remember(ids, min_times, max_times): these series rows are committed"},
    {"clear", (PyCFunction)cache_clear, METH_NOARGS, "Forget every series."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods cache_sequence = {.sq_length = (lenfunc)cache_len};

static PyTypeObject SeriesCacheType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "warehouse.ingest._series_cache.SeriesCache",
    .tp_basicsize = sizeof(SeriesCache),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "SeriesCache(capacity): the series rows a receiver has written (see the module).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)cache_init,
    .tp_dealloc = (destructor)cache_dealloc,
    .tp_methods = cache_methods,
    .tp_as_sequence = &cache_sequence,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_series_cache", "The series rows a receiver has written.", -1,
    NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__series_cache(void) {
    if (PyType_Ready(&SeriesCacheType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "SeriesCache", (PyObject *)&SeriesCacheType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
