/*
 * kcache._kcache: the C extension under the `kcache` Python package, over
 * kcache's public API only (<kcache/kcache.h>), on CPython's limited API so
 * that one abi3 wheel serves every supported Python.
 *
 * Decisions:
 *   - Library calls run with the GIL released (a hit is SQLite and a
 *     decompression, a miss a compile of seconds): other Python threads run
 *     meanwhile, and threads sharing one Store use the library's own locking.
 *   - A Store may be closed by one thread while others use it: each call
 *     holds the object's read lock around the library call, close() the write
 *     lock, so a close waits for calls in flight and later calls raise.
 *   - Errors raise kcache.Error carrying the library's message and status
 *     (read on the failing thread: the library keeps it per thread); the
 *     Python layer turns a miss into KeyError where the protocol wants one.
 *   - Values cross as bytes (PyBytes_AsStringAndSize): the buffer protocol is
 *     in the limited API only from 3.11; the Python layer gives bytes.
 */
#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include <kcache/kcache.h>

/* rc = call, with the GIL released while the library works: every call into it
 * that can touch the disk, take a lock or run NVRTC. */
#define WITHOUT_GIL(rc, call)                                                                      \
    do {                                                                                           \
        Py_BEGIN_ALLOW_THREADS                                                                     \
        (rc) = (call);                                                                             \
        Py_END_ALLOW_THREADS                                                                       \
    } while (0)

/*
 * The start of a Store method: self, and s, the store entered for this call
 * (store_leave(self) when done), or NULL returned with the exception set.
 */
#define ENTER_STORE(op, self, s)                                                                   \
    StoreObject *self = (StoreObject *)(op);                                                       \
    kcache_store *s = store_enter(self);                                                           \
    if (!s)                                                                                        \
        return NULL

typedef struct {
    PyObject *error; /* kcache.Error */
    PyObject *compile_error;
    PyObject *store_type;
    PyObject *compiler_type;
} module_state;

static module_state *state_of(PyObject *module)
{
    return (module_state *)PyModule_GetState(module);
}

/* Raises kcache.Error(message) with .status (the code) and .status_name. */
static PyObject *raise_status(PyObject *type, int status, const char *message)
{
    PyObject *args = Py_BuildValue("(s)", message ? message : "");
    if (!args)
        return NULL;
    PyObject *exc = PyObject_Call(type, args, NULL);
    Py_DECREF(args);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong(status);
    PyObject *name = PyUnicode_FromString(kcache_strerror(status));
    if (code && name && PyObject_SetAttrString(exc, "status", code) == 0 &&
        PyObject_SetAttrString(exc, "status_name", name) == 0)
        PyErr_SetObject(type, exc);
    Py_XDECREF(code);
    Py_XDECREF(name);
    Py_DECREF(exc);
    return NULL;
}

/* ---- Store ------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    kcache_store *store;
    kcache_remote *remote; /* the shared tier behind the store, when one is set; NULL: none */
    pthread_rwlock_t lock; /* read: a call in flight; write: close */
    PyObject *error;       /* kcache.Error, borrowed from the module for the object's life */
} StoreObject;

/* Takes the read lock on a live store (the GIL released while waiting), or raises. */
static kcache_store *store_enter(StoreObject *self)
{
    Py_BEGIN_ALLOW_THREADS
    pthread_rwlock_rdlock(&self->lock);
    Py_END_ALLOW_THREADS
    if (!self->store) {
        pthread_rwlock_unlock(&self->lock);
        PyErr_SetString(PyExc_ValueError, "the cache is closed");
        return NULL;
    }
    return self->store;
}

/* Parses args as fmt, then enters the store: NULL with the exception set. */
static kcache_store *parse_and_enter(StoreObject *self, PyObject *args, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int ok = PyArg_VaParse(args, fmt, ap);
    va_end(ap);
    return ok ? store_enter(self) : NULL;
}

static void store_leave(StoreObject *self)
{
    pthread_rwlock_unlock(&self->lock);
}

static PyObject *store_raise(StoreObject *self, kcache_store *s, int rc)
{
    return raise_status(self->error, rc, kcache_store_errmsg(s));
}

/*
 * A size or a count from Python: an int from 0 to 2^64-1, else OverflowError
 * (or TypeError). PyArg's "K" wraps instead (-1 became 2^64-1, 2^64+3 became
 * 3), which is how a count reads as another.
 */
static int to_u64(PyObject *o, void *out)
{
    if (!PyLong_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "expected an int");
        return 0;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return 0;
    *(unsigned long long *)out = v;
    return 1;
}

/* Whether __init__ runs on an object it already set up: RuntimeError, as a second
 * call would leak the first one's handle. */
static int initialized_twice(int already, const char *type)
{
    if (already)
        PyErr_Format(PyExc_RuntimeError, "%s.__init__ called twice", type);
    return already;
}

/*
 * The library's warnings (a cache or a remote that cannot be used) as Python
 * RuntimeWarnings, so that they reach the program once, as the command
 * prints them, and never raise: the library calls this with none of its
 * locks held, with the GIL released or held by this thread.
 */
static void py_log(void *userdata, int level, const char *message)
{
    (void)userdata;
    if (level > KCACHE_LOG_WARNING)
        return;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "kcache: %s", message) < 0)
        PyErr_WriteUnraisable(NULL);
    PyErr_Restore(type, value, tb);
    PyGILState_Release(g);
}

static int Store_init(PyObject *op, PyObject *args, PyObject *kwds)
{
    StoreObject *self = (StoreObject *)op;
    static char *kwlist[] = {"path", "max_size", "read_only", "no_create", "remote", "use_remote",
                             NULL};
    const char *path = NULL, *remote_url = NULL;
    unsigned long long max_size = 0;
    int read_only = 0, no_create = 0, use_remote = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "z|O&ppzp", kwlist, &path, to_u64, &max_size,
                                     &read_only, &no_create, &remote_url, &use_remote))
        return -1;
    if (initialized_twice(self->store != NULL, "Store"))
        return -1;
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = path;
    o.max_size = (uint64_t)max_size;
    o.read_only = read_only;
    o.no_create = no_create;
    o.log = py_log;
    char err[512] = "";
    kcache_store *s = NULL;
    int rc;
    WITHOUT_GIL(rc, kcache_store_open(&s, &o, err, sizeof(err)));
    if (rc) {
        raise_status(self->error, rc, err);
        return -1;
    }
    /* The remote the settings name (or remote_url), as a compiler uses it: a
     * local miss asks it, a put is pushed to it. A setting that cannot be
     * used is an error here, where the user can fix it. */
    kcache_remote *r = NULL;
    if (use_remote) {
        WITHOUT_GIL(rc, kcache_remote_open(&r, s, remote_url, err, sizeof(err)));
        if (rc == KCACHE_ENOTFOUND)
            rc = 0; /* no remote set: the cache alone */
        if (rc) {
            kcache_store_close(s);
            raise_status(self->error, rc, err);
            return -1;
        }
    }
    self->store = s;
    self->remote = r;
    return 0;
}

/* The start of tp_new for both types: the object zero-filled; arguments are tp_init's. */
static void *new_object(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    (void)args;
    (void)kwds;
    return PyType_GenericAlloc(type, 0);
}

static PyObject *Store_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    StoreObject *self = new_object(type, args, kwds);
    if (!self)
        return NULL;
    pthread_rwlock_init(&self->lock, NULL);
    /* The module's Error, found through the type's module (the type is the module's). */
    PyObject *module = PyType_GetModule(type);
    self->error = module ? state_of(module)->error : PyExc_RuntimeError;
    Py_INCREF(self->error);
    return (PyObject *)self;
}

static void store_close_now(StoreObject *self)
{
    kcache_store *s;
    kcache_remote *r;
    Py_BEGIN_ALLOW_THREADS
    pthread_rwlock_wrlock(&self->lock);
    s = self->store;
    r = self->remote;
    self->store = NULL;
    self->remote = NULL;
    pthread_rwlock_unlock(&self->lock);
    kcache_remote_close(r); /* it borrows the store */
    kcache_store_close(s);
    Py_END_ALLOW_THREADS
}

static void Store_dealloc(PyObject *op)
{
    StoreObject *self = (StoreObject *)op;
    PyTypeObject *type = Py_TYPE(op);
    store_close_now(self);
    pthread_rwlock_destroy(&self->lock);
    Py_XDECREF(self->error);
    PyObject_Free(op);
    Py_DECREF(type);
}

static PyObject *Store_close(PyObject *op, PyObject *unused)
{
    (void)unused;
    store_close_now((StoreObject *)op);
    Py_RETURN_NONE;
}

/*
 * A local miss asked of the remote: its entry, checked by the remote and
 * stored locally, is this namespace's only if kind and arch say so (the key
 * is the namespace's, and the import gate checked the material says so too).
 */
static int remote_get(kcache_entry **out, kcache_remote *r, const char *ns, const char *key,
                      size_t key_size)
{
    kcache_key k;
    if (kcache_key_caller(&k, ns, key, key_size) || kcache_remote_get(out, r, &k))
        return KCACHE_ENOTFOUND;
    if ((*out)->kind != KCACHE_KIND_DATA || strcmp((*out)->arch, ns) != 0) {
        kcache_entry_free(*out);
        *out = NULL;
        return KCACHE_ENOTFOUND;
    }
    return 0;
}

/* What was just put, pushed as the store holds it (with its key material); best effort. */
static void remote_put(kcache_remote *r, kcache_store *s, const char *ns, const char *key,
                       size_t key_size)
{
    kcache_entry *e = NULL;
    if (kcache_store_get_keyed(&e, s, ns, key, key_size, KCACHE_GET_NO_TOUCH) == 0)
        kcache_remote_put(r, e);
    kcache_entry_free(e);
}

static PyObject *Store_get(PyObject *op, PyObject *args)
{
    StoreObject *self = (StoreObject *)op;
    const char *ns, *key;
    Py_ssize_t key_size;
    int touch = 1;
    kcache_store *s = parse_and_enter(self, args, "sy#|p", &ns, &key, &key_size, &touch);
    if (!s)
        return NULL;
    kcache_entry *e = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = kcache_store_get_keyed(&e, s, ns, key, (size_t)key_size,
                                touch ? KCACHE_GET_DEFAULT : KCACHE_GET_NO_TOUCH);
    if (rc == KCACHE_ENOTFOUND && self->remote)
        rc = remote_get(&e, self->remote, ns, key, (size_t)key_size);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    if (rc == KCACHE_ENOTFOUND) {
        out = Py_None;
        Py_INCREF(out);
    } else if (rc) {
        store_raise(self, s, rc);
    } else {
        out = PyBytes_FromStringAndSize(e->data, (Py_ssize_t)e->size);
    }
    store_leave(self);
    kcache_entry_free(e);
    return out;
}

static PyObject *Store_put(PyObject *op, PyObject *args)
{
    StoreObject *self = (StoreObject *)op;
    const char *ns, *key, *data;
    Py_ssize_t key_size, size;
    kcache_store *s = parse_and_enter(self, args, "sy#y#", &ns, &key, &key_size, &data, &size);
    if (!s)
        return NULL;
    int rc;
    /* data is a read-only buffer the caller holds: unchanged, alive for the call. */
    Py_BEGIN_ALLOW_THREADS
    rc = kcache_store_put_keyed(s, ns, key, (size_t)key_size, data, (size_t)size);
    if (!rc && self->remote)
        remote_put(self->remote, s, ns, key, (size_t)key_size);
    Py_END_ALLOW_THREADS
    PyObject *out = rc ? store_raise(self, s, rc) : (Py_INCREF(Py_None), Py_None);
    store_leave(self);
    return out;
}

static PyObject *Store_delete(PyObject *op, PyObject *args)
{
    StoreObject *self = (StoreObject *)op;
    const char *ns, *key;
    Py_ssize_t key_size;
    kcache_store *s = parse_and_enter(self, args, "sy#", &ns, &key, &key_size);
    if (!s)
        return NULL;
    int rc;
    WITHOUT_GIL(rc, kcache_store_delete_keyed(s, ns, key, (size_t)key_size));
    PyObject *out = rc && rc != KCACHE_ENOTFOUND ? store_raise(self, s, rc)
                                                 : PyBool_FromLong(rc == 0);
    store_leave(self);
    return out;
}

/* clear_namespace(ns) and trim_namespace(ns, max_bytes): how many went. */
static PyObject *namespace_evict(StoreObject *self, const char *ns, int trim, uint64_t max_bytes)
{
    kcache_store *s = store_enter(self);
    if (!s)
        return NULL;
    uint64_t n = 0;
    int rc;
    WITHOUT_GIL(rc, trim ? kcache_store_trim_namespace(&n, s, ns, max_bytes)
                         : kcache_store_clear_namespace(&n, s, ns));
    PyObject *out = rc ? store_raise(self, s, rc) : PyLong_FromUnsignedLongLong(n);
    store_leave(self);
    return out;
}

static PyObject *Store_clear_namespace(PyObject *op, PyObject *args)
{
    const char *ns;
    if (!PyArg_ParseTuple(args, "s", &ns))
        return NULL;
    return namespace_evict((StoreObject *)op, ns, 0, 0);
}

static PyObject *Store_trim_namespace(PyObject *op, PyObject *args)
{
    const char *ns;
    unsigned long long max_bytes;
    if (!PyArg_ParseTuple(args, "sO&", &ns, to_u64, &max_bytes))
        return NULL;
    return namespace_evict((StoreObject *)op, ns, 1, (uint64_t)max_bytes);
}

/* dict[str, int] from names and values; NULL with an exception set. */
static PyObject *dict_of(const char *const *names, const uint64_t *values, size_t n)
{
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(values[i]);
        if (!v || PyDict_SetItemString(d, names[i], v) < 0) {
            Py_XDECREF(v);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(v);
    }
    return d;
}

static int dict_set(PyObject *d, const char *name, PyObject *v)
{
    if (!v)
        return -1;
    int rc = PyDict_SetItemString(d, name, v);
    Py_DECREF(v);
    return rc;
}

static PyObject *Store_namespace_stats(PyObject *op, PyObject *args)
{
    StoreObject *self = (StoreObject *)op;
    const char *ns;
    kcache_store *s = parse_and_enter(self, args, "s", &ns);
    if (!s)
        return NULL;
    kcache_namespace_stats st = KCACHE_NAMESPACE_STATS_INIT;
    int rc;
    WITHOUT_GIL(rc, kcache_store_namespace_stats(&st, s, ns));
    PyObject *out = NULL;
    if (rc) {
        store_raise(self, s, rc);
    } else {
        static const char *const names[] = {"entries", "raw_bytes", "stored_bytes", "hits",
                                            "misses"};
        const uint64_t values[] = {st.entries, st.raw_bytes, st.stored_bytes, st.hits, st.misses};
        out = dict_of(names, values, 5);
    }
    store_leave(self);
    return out;
}

static PyObject *stats_dict(const kcache_stats *st, kcache_store *s)
{
    static const char *const names[] = {
        "entries",   "raw_bytes", "stored_bytes", "file_bytes",     "wal_bytes",
        "hits",      "misses",    "saved_ns",     "evictions",      "corrupt",
        "store_failures", "uncacheable"};
    const uint64_t values[] = {st->entries,   st->raw_bytes, st->stored_bytes, st->file_bytes,
                               st->wal_bytes, st->hits,      st->misses,       st->saved_ns,
                               st->evictions, st->corrupt,   st->store_failures,
                               st->uncacheable};
    PyObject *d = dict_of(names, values, sizeof(values) / sizeof(values[0]));
    if (!d)
        return NULL;
    PyObject *usage = PyList_New(0);
    int bad = !usage;
    for (size_t i = 0; !bad && i < st->n_usage; i++) {
        const kcache_usage *u = &st->usage[i];
        const char *kind = kcache_kind_name(u->kind);
        PyObject *row = Py_BuildValue("{s:s,s:s,s:K,s:K,s:K}", "arch", u->arch, "kind",
                                      kind ? kind : "", "hits", (unsigned long long)u->hits,
                                      "misses", (unsigned long long)u->misses, "saved_ns",
                                      (unsigned long long)u->saved_ns);
        bad = !row || PyList_Append(usage, row) < 0;
        Py_XDECREF(row);
    }
    if (bad || dict_set(d, "usage", usage) < 0 ||
        dict_set(d, "max_size", st->max_size == UINT64_MAX
                                    ? (Py_INCREF(Py_None), Py_None)
                                    : PyLong_FromUnsignedLongLong(st->max_size)) < 0 ||
        dict_set(d, "schema_version", PyLong_FromLong(st->schema_version)) < 0 ||
        dict_set(d, "path", PyUnicode_DecodeFSDefault(kcache_store_path(s))) < 0) {
        if (bad)
            Py_XDECREF(usage);
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *Store_stats(PyObject *op, PyObject *unused)
{
    (void)unused;
    ENTER_STORE(op, self, s);
    kcache_stats *st = NULL;
    int rc;
    WITHOUT_GIL(rc, kcache_store_stats(&st, s));
    PyObject *out = rc ? store_raise(self, s, rc) : stats_dict(st, s);
    kcache_stats_free(st);
    store_leave(self);
    return out;
}

static PyObject *Store_prune(PyObject *op, PyObject *args, PyObject *kwds)
{
    StoreObject *self = (StoreObject *)op;
    static char *kwlist[] = {"max_size", "max_entries", "accessed_before_ms", "arch", "kind",
                             "dry_run", NULL};
    unsigned long long max_size = 0, max_entries = 0;
    long long before = 0;
    const char *arch = NULL;
    int kind = 0, dry_run = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O&O&Lzip", kwlist, to_u64, &max_size, to_u64,
                                     &max_entries, &before, &arch, &kind, &dry_run))
        return NULL;
    kcache_store *s = store_enter(self);
    if (!s)
        return NULL;
    kcache_prune_options o = KCACHE_PRUNE_OPTIONS_INIT;
    o.max_size = (uint64_t)max_size;
    o.max_entries = (uint64_t)max_entries;
    o.accessed_before = (int64_t)before;
    o.arch = arch;
    o.kind = (kcache_kind)kind;
    o.dry_run = dry_run;
    kcache_prune_result r = KCACHE_PRUNE_RESULT_INIT;
    int rc;
    WITHOUT_GIL(rc, kcache_store_prune(&r, s, &o));
    PyObject *out = NULL;
    if (rc) {
        store_raise(self, s, rc);
    } else {
        static const char *const names[] = {"evicted", "evicted_bytes", "disk_before",
                                            "disk_after"};
        const uint64_t values[] = {r.evicted, r.evicted_bytes, r.disk_before, r.disk_after};
        out = dict_of(names, values, 4);
    }
    store_leave(self);
    return out;
}

static PyObject *Store_verify(PyObject *op, PyObject *unused)
{
    (void)unused;
    ENTER_STORE(op, self, s);
    kcache_verify_result r = KCACHE_VERIFY_RESULT_INIT;
    int rc;
    WITHOUT_GIL(rc, kcache_store_verify(&r, s, NULL, NULL, NULL));
    PyObject *out = NULL;
    if (rc) {
        store_raise(self, s, rc);
    } else {
        out = Py_BuildValue("{s:K,s:K,s:K,s:O,s:s}", "entries", (unsigned long long)r.entries,
                            "bytes", (unsigned long long)r.bytes, "damaged",
                            (unsigned long long)r.damaged, "integrity_ok",
                            r.integrity_ok ? Py_True : Py_False, "integrity", r.integrity);
    }
    store_leave(self);
    return out;
}

static PyObject *bundle_dict(const kcache_bundle_result *r)
{
    static const char *const names[] = {"entries", "bytes", "added", "replaced", "skipped",
                                        "damaged"};
    const uint64_t values[] = {r->entries, r->bytes, r->added, r->replaced, r->skipped,
                               r->damaged};
    return dict_of(names, values, 6);
}

/* Runs a bundle's export or import on path (a reference taken over) with options o. */
static PyObject *bundle_call(StoreObject *self, PyObject *path_obj,
                             int (*fn)(kcache_bundle_result *, kcache_store *, const char *,
                                       const kcache_bundle_options *),
                             const kcache_bundle_options *o)
{
    kcache_store *s = store_enter(self);
    if (!s) {
        Py_DECREF(path_obj);
        return NULL;
    }
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    const char *path = PyBytes_AsString(path_obj);
    int rc;
    WITHOUT_GIL(rc, fn(&r, s, path, o));
    PyObject *out = rc ? store_raise(self, s, rc) : bundle_dict(&r);
    store_leave(self);
    Py_DECREF(path_obj);
    return out;
}

static PyObject *Store_export_bundle(PyObject *op, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"path", "arch", "kind", NULL};
    PyObject *path_obj;
    const char *arch = NULL;
    int kind = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&|zi", kwlist, PyUnicode_FSConverter,
                                     &path_obj, &arch, &kind))
        return NULL;
    kcache_bundle_options o = KCACHE_BUNDLE_OPTIONS_INIT;
    o.arch = arch;
    o.kind = (kcache_kind)kind;
    return bundle_call((StoreObject *)op, path_obj, kcache_bundle_export, &o);
}

static PyObject *Store_import_bundle(PyObject *op, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"path", "dry_run", NULL};
    PyObject *path_obj;
    int dry_run = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&|p", kwlist, PyUnicode_FSConverter, &path_obj,
                                     &dry_run))
        return NULL;
    kcache_bundle_options o = KCACHE_BUNDLE_OPTIONS_INIT;
    o.dry_run = dry_run;
    return bundle_call((StoreObject *)op, path_obj, kcache_bundle_import, &o);
}

static PyObject *Store_flush(PyObject *op, PyObject *unused)
{
    (void)unused;
    ENTER_STORE(op, self, s);
    int rc;
    WITHOUT_GIL(rc, kcache_store_flush(s));
    PyObject *out = rc ? store_raise(self, s, rc) : (Py_INCREF(Py_None), Py_None);
    store_leave(self);
    return out;
}

static PyObject *Store_path(PyObject *op, void *closure)
{
    (void)closure;
    ENTER_STORE(op, self, s);
    PyObject *out = PyUnicode_DecodeFSDefault(kcache_store_path(s));
    store_leave(self);
    return out;
}

static PyObject *Store_closed(PyObject *op, void *closure)
{
    (void)closure;
    return PyBool_FromLong(((StoreObject *)op)->store == NULL);
}

static PyMethodDef Store_methods[] = {
    {"get", Store_get, METH_VARARGS,
     "get(ns, key, touch=True) -> bytes | None: the bytes under (ns, key), checked."},
    {"put", Store_put, METH_VARARGS, "put(ns, key, data): store bytes under (ns, key)."},
    {"delete", Store_delete, METH_VARARGS, "delete(ns, key) -> bool: whether it was there."},
    {"clear_namespace", Store_clear_namespace, METH_VARARGS,
     "clear_namespace(ns) -> int: delete every entry of ns."},
    {"trim_namespace", Store_trim_namespace, METH_VARARGS,
     "trim_namespace(ns, max_bytes) -> int: evict ns's least recently used past max_bytes."},
    {"namespace_stats", Store_namespace_stats, METH_VARARGS,
     "namespace_stats(ns) -> dict: entries, bytes, hits and misses of ns."},
    {"stats", Store_stats, METH_NOARGS, "stats() -> dict: the whole store's."},
    {"prune", (PyCFunction)(void (*)(void))Store_prune, METH_VARARGS | METH_KEYWORDS,
     "prune(max_size=0, max_entries=0, accessed_before_ms=0, arch=None, kind=0, dry_run=False)"},
    {"verify", Store_verify, METH_NOARGS, "verify() -> dict: every entry checked."},
    {"export_bundle", (PyCFunction)(void (*)(void))Store_export_bundle,
     METH_VARARGS | METH_KEYWORDS, "export_bundle(path, arch=None, kind=0) -> dict"},
    {"import_bundle", (PyCFunction)(void (*)(void))Store_import_bundle,
     METH_VARARGS | METH_KEYWORDS, "import_bundle(path, dry_run=False) -> dict"},
    {"flush", Store_flush, METH_NOARGS, "flush(): write this process's pending hit counts."},
    {"close", Store_close, METH_NOARGS, "close(): release the store (waits for calls)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Store_getset[] = {
    {"path", Store_path, NULL, "the database file", NULL},
    {"closed", Store_closed, NULL, "whether close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Store_slots[] = {
    {Py_tp_new, (void *)Store_new},
    {Py_tp_init, (void *)Store_init},
    {Py_tp_dealloc, (void *)Store_dealloc},
    {Py_tp_methods, Store_methods},
    {Py_tp_getset, Store_getset},
    {Py_tp_doc, (void *)"Store(path, max_size=0, read_only=False, no_create=False): one kcache "
                        "database file (None: the default cache)."},
    {0, NULL},
};

static PyType_Spec Store_spec = {
    "kcache._kcache.Store", sizeof(StoreObject), 0, Py_TPFLAGS_DEFAULT, Store_slots,
};

/* ---- compile ----------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    kcache_compiler *compiler;
    PyObject *error, *compile_error;
} CompilerObject;

static PyObject *Compiler_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    CompilerObject *self = new_object(type, args, kwds);
    if (!self)
        return NULL;
    PyObject *module = PyType_GetModule(type);
    module_state *st = module ? state_of(module) : NULL;
    self->error = st ? st->error : PyExc_RuntimeError;
    self->compile_error = st ? st->compile_error : PyExc_RuntimeError;
    Py_INCREF(self->error);
    Py_INCREF(self->compile_error);
    return (PyObject *)self;
}

static int Compiler_init(PyObject *op, PyObject *args, PyObject *kwds)
{
    CompilerObject *self = (CompilerObject *)op;
    static char *kwlist[] = {"store_path", "no_store", "toolkit_root", NULL};
    const char *store_path = NULL, *toolkit = NULL;
    int no_store = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|zpz", kwlist, &store_path, &no_store,
                                     &toolkit))
        return -1;
    if (initialized_twice(self->compiler != NULL, "Compiler"))
        return -1;
    kcache_compiler_options o = KCACHE_COMPILER_OPTIONS_INIT;
    o.store_path = store_path;
    o.no_store = no_store;
    o.toolkit_root = toolkit;
    o.log = py_log;
    char err[512] = "";
    int rc;
    WITHOUT_GIL(rc, kcache_compiler_new(&self->compiler, &o, err, sizeof(err)));
    if (rc) {
        raise_status(self->error, rc, err);
        return -1;
    }
    return 0;
}

static void Compiler_dealloc(PyObject *op)
{
    CompilerObject *self = (CompilerObject *)op;
    PyTypeObject *type = Py_TYPE(op);
    kcache_compiler_free(self->compiler);
    Py_XDECREF(self->error);
    Py_XDECREF(self->compile_error);
    PyObject_Free(op);
    Py_DECREF(type);
}

/* The strings of a sequence of str, kept alive by the list of encoded bytes in *keep. */
static int str_array(PyObject *seq, const char ***out, size_t *n, PyObject *keep, const char *what)
{
    *out = NULL;
    *n = 0;
    if (!seq || seq == Py_None)
        return 0;
    PyObject *fast = PySequence_List(seq);
    if (!fast)
        return -1;
    Py_ssize_t len = PyList_Size(fast);
    const char **v = PyMem_Calloc((size_t)len + 1, sizeof(*v));
    if (!v) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *item = PyList_GetItem(fast, i);
        PyObject *b = item && PyUnicode_Check(item) ? PyUnicode_AsUTF8String(item) : NULL;
        if (!b) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%s must be strings", what);
            PyMem_Free(v);
            Py_DECREF(fast);
            return -1;
        }
        v[i] = PyBytes_AsString(b);
        int bad = PyList_Append(keep, b) < 0;
        Py_DECREF(b);
        if (bad) {
            PyMem_Free(v);
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    *out = v;
    *n = (size_t)len;
    return 0;
}

/* A str or bytes argument as UTF-8 bytes kept in keep; NULL stays NULL. */
static int text_arg(PyObject *obj, const char **out, size_t *size, PyObject *keep)
{
    *out = NULL;
    if (size)
        *size = 0;
    if (!obj || obj == Py_None)
        return 0;
    PyObject *b = PyUnicode_Check(obj) ? PyUnicode_AsUTF8String(obj) : (Py_INCREF(obj), obj);
    char *p;
    Py_ssize_t n;
    if (!b || PyBytes_AsStringAndSize(b, &p, &n) < 0 || PyList_Append(keep, b) < 0) {
        Py_XDECREF(b);
        return -1;
    }
    Py_DECREF(b);
    *out = p;
    if (size)
        *size = (size_t)n;
    return 0;
}

static PyObject *result_dict(const kcache_result *r)
{
    PyObject *lowered = PyDict_New();
    for (size_t i = 0; lowered && i < r->n_names; i++) {
        PyObject *v = PyUnicode_FromString(r->lowered_names[i] ? r->lowered_names[i] : "");
        if (!v || PyDict_SetItemString(lowered, r->name_exprs[i], v) < 0)
            Py_CLEAR(lowered);
        Py_XDECREF(v);
    }
    if (!lowered)
        return NULL;
    char hex[KCACHE_KEY_HEX_SIZE];
    kcache_key_hex(hex, &r->key);
    const char *kind = kcache_kind_name(r->kind);
    PyObject *d = Py_BuildValue(
        "{s:y#,s:s,s:s,s:O,s:O,s:s,s:s,s:O,s:s,s:s,s:K,s:K,s:O,s:O}", "data",
        (const char *)r->data, (Py_ssize_t)r->size, "kind", kind ? kind : "", "arch",
        r->arch ? r->arch : "", "hit", r->hit ? Py_True : Py_False, "keyed",
        r->keyed ? Py_True : Py_False, "key", r->keyed ? hex : "", "log", r->log ? r->log : "",
        "lowered_names", lowered, "message", r->message ? r->message : "", "store_message",
        r->store_message ? r->store_message : "", "compile_ns",
        (unsigned long long)r->compile_ns, "elapsed_ns", (unsigned long long)r->elapsed_ns,
        "remote_hit", r->remote_hit ? Py_True : Py_False, "cache_failed",
        r->store_status && r->store_status != KCACHE_EDISABLED ? Py_True : Py_False);
    Py_DECREF(lowered);
    return d;
}

static PyObject *Compiler_compile(PyObject *op, PyObject *args, PyObject *kwds)
{
    CompilerObject *self = (CompilerObject *)op;
    static char *kwlist[] = {"source",  "source_path",      "name",   "arch",  "options",
                             "headers", "name_expressions", "output", "flags", NULL};
    PyObject *source = NULL, *source_path = NULL, *name = NULL, *options = NULL,
             *headers = NULL, *name_exprs = NULL;
    const char *arch = NULL;
    int output = 0;
    unsigned int flags = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OOOzOOOiI", kwlist, &source, &source_path,
                                     &name, &arch, &options, &headers, &name_exprs, &output,
                                     &flags))
        return NULL;
    PyObject *keep = PyList_New(0);
    if (!keep)
        return NULL;
    const char **opts = NULL, **exprs = NULL, **hnames = NULL, **hcontents = NULL;
    size_t n_opts = 0, n_exprs = 0, n_headers = 0;
    kcache_request req = KCACHE_REQUEST_INIT;
    PyObject *out = NULL, *hkeys = NULL, *hvalues = NULL;
    if (text_arg(source, &req.source, &req.source_size, keep) < 0 ||
        text_arg(source_path, &req.source_path, NULL, keep) < 0 ||
        text_arg(name, &req.source_name, NULL, keep) < 0 ||
        str_array(options, &opts, &n_opts, keep, "options") < 0 ||
        str_array(name_exprs, &exprs, &n_exprs, keep, "name expressions") < 0)
        goto out;
    if (headers && headers != Py_None) {
        if (!PyDict_Check(headers)) {
            PyErr_SetString(PyExc_TypeError, "headers must be a dict of name -> text");
            goto out;
        }
        hkeys = PyDict_Keys(headers);
        hvalues = PyDict_Values(headers);
        if (!hkeys || !hvalues ||
            str_array(hkeys, &hnames, &n_headers, keep, "header names") < 0)
            goto out;
        hcontents = PyMem_Calloc(n_headers + 1, sizeof(*hcontents));
        if (!hcontents) {
            PyErr_NoMemory();
            goto out;
        }
        for (size_t i = 0; i < n_headers; i++) {
            PyObject *v = PyList_GetItem(hvalues, (Py_ssize_t)i);
            if (!v || (!PyUnicode_Check(v) && !PyBytes_Check(v))) {
                PyErr_SetString(PyExc_TypeError, "header contents must be str or bytes");
                goto out;
            }
            if (text_arg(v, &hcontents[i], NULL, keep) < 0)
                goto out;
        }
    }
    req.arch = arch;
    req.output = (kcache_kind)output;
    req.options = opts;
    req.n_options = n_opts;
    req.name_exprs = exprs;
    req.n_name_exprs = n_exprs;
    req.header_names = hnames;
    req.header_contents = hcontents;
    req.n_headers = n_headers;
    req.flags = flags;
    kcache_result *r = NULL;
    int rc;
    WITHOUT_GIL(rc, kcache_compiler_compile(&r, self->compiler, &req));
    if (!r) {
        raise_status(self->error, rc, rc == KCACHE_ENOMEM ? "out of memory" : "invalid request");
    } else if (rc == KCACHE_ECOMPILE) {
        PyObject *log = PyUnicode_DecodeUTF8(r->log ? r->log : "", r->log ? (Py_ssize_t)strlen(r->log) : 0, "replace");
        raise_status(self->compile_error, rc, r->message);
        if (log) {
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            if (value)
                PyObject_SetAttrString(value, "log", log);
            PyErr_Restore(type, value, tb);
            Py_DECREF(log);
        }
    } else if (rc) {
        raise_status(self->error, rc, r->message);
    } else {
        out = result_dict(r);
    }
    kcache_result_free(r);
out:
    PyMem_Free(opts);
    PyMem_Free(exprs);
    PyMem_Free(hnames);
    PyMem_Free(hcontents);
    Py_XDECREF(hkeys);
    Py_XDECREF(hvalues);
    Py_DECREF(keep);
    return out;
}

static PyMethodDef Compiler_methods[] = {
    {"compile", (PyCFunction)(void (*)(void))Compiler_compile, METH_VARARGS | METH_KEYWORDS,
     "compile(source=None, source_path=None, name=None, arch=None, options=(), headers=None, "
     "name_expressions=(), output=0, flags=0) -> dict"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Compiler_slots[] = {
    {Py_tp_new, (void *)Compiler_new},
    {Py_tp_init, (void *)Compiler_init},
    {Py_tp_dealloc, (void *)Compiler_dealloc},
    {Py_tp_methods, Compiler_methods},
    {Py_tp_doc, (void *)"Compiler(store_path=None, no_store=False, toolkit_root=None)"},
    {0, NULL},
};

static PyType_Spec Compiler_spec = {
    "kcache._kcache.Compiler", sizeof(CompilerObject), 0, Py_TPFLAGS_DEFAULT, Compiler_slots,
};

/* ---- module ------------------------------------------------------------ */

static PyObject *key_caller(PyObject *module, PyObject *args)
{
    const char *ns, *key;
    Py_ssize_t key_size;
    if (!PyArg_ParseTuple(args, "sy#", &ns, &key, &key_size))
        return NULL;
    kcache_key k;
    int rc = kcache_key_caller(&k, ns, key, (size_t)key_size);
    if (rc)
        return raise_status(state_of(module)->error, rc,
                            "a namespace is 1 to 31 letters, digits, '.', '_' or '-', a key at "
                            "most 64 KiB");
    char hex[KCACHE_KEY_HEX_SIZE];
    kcache_key_hex(hex, &k);
    return PyUnicode_FromString(hex);
}

/*
 * Every setting as the command line resolves it (<kcache/config.h>): the
 * environment, then kcache.conf beside the database, then the defaults. With
 * a path, the settings of that database (and of the kcache.conf beside it).
 * A file that cannot be read or has a malformed line raises Error.
 */
static PyObject *settings(PyObject *module, PyObject *args)
{
    const char *path = NULL;
    if (!PyArg_ParseTuple(args, "|z", &path))
        return NULL;
    kcache_config_override o = {"path", path};
    kcache_config *c = NULL;
    char err[512] = "";
    int rc;
    WITHOUT_GIL(rc, kcache_config_load(&c, path ? &o : NULL, path ? 1 : 0, err, sizeof(err)));
    if (rc)
        return raise_status(state_of(module)->error, rc, err);
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && i < kcache_config_count(c); i++) {
        const kcache_setting *st = kcache_config_setting(c, i);
        PyObject *v = PyUnicode_DecodeFSDefault(st->value);
        if (!v || PyDict_SetItemString(d, st->name, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    kcache_config_free(c);
    return d;
}

/*
 * parse_max_size(text) -> int: a size cap in the grammar of every other front
 * end (kcache_parse_max_size: binary units, a bare number is GiB, 0 or none
 * no cap, which is 2**64 - 1). Raises ValueError naming the text.
 */
static PyObject *parse_max_size(PyObject *module, PyObject *args)
{
    (void)module;
    const char *text;
    uint64_t cap;
    if (!PyArg_ParseTuple(args, "s", &text))
        return NULL;
    if (kcache_parse_max_size(&cap, text))
        return PyErr_Format(PyExc_ValueError, "'%s' is not a size (use e.g. '2G' or '512M'; a "
                            "bare number is GiB; '0' or 'none': no cap)", text);
    return PyLong_FromUnsignedLongLong(cap);
}

static PyMethodDef module_methods[] = {
    {"parse_max_size", parse_max_size, METH_VARARGS,
     "parse_max_size(text) -> int: a size cap as the kcache command reads it (2**64 - 1: none)."},
    {"key_caller", key_caller, METH_VARARGS,
     "key_caller(ns, key) -> str: the store's key (hex) of a caller's key in ns."},
    {"settings", settings, METH_VARARGS,
     "settings(path=None) -> dict[str, str]: every setting's value as the command line "
     "resolves it (environment, kcache.conf, default), for the database at path."},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *m)
{
    module_state *st = state_of(m);
    st->error = PyErr_NewExceptionWithDoc(
        "kcache.Error", "A kcache call failed: the library's message; .status is its code.",
        NULL, NULL);
    if (!st->error || PyModule_AddObjectRef(m, "Error", st->error) < 0)
        return -1;
    st->compile_error = PyErr_NewExceptionWithDoc(
        "kcache.CompileError", "The compiler reported an error: .log has its log.", st->error,
        NULL);
    if (!st->compile_error || PyModule_AddObjectRef(m, "CompileError", st->compile_error) < 0)
        return -1;
    st->store_type = PyType_FromModuleAndSpec(m, &Store_spec, NULL);
    if (!st->store_type || PyModule_AddObjectRef(m, "Store", st->store_type) < 0)
        return -1;
    st->compiler_type = PyType_FromModuleAndSpec(m, &Compiler_spec, NULL);
    if (!st->compiler_type || PyModule_AddObjectRef(m, "Compiler", st->compiler_type) < 0)
        return -1;
    static const struct {
        const char *name;
        long value;
    } ints[] = {
        {"KIND_CUBIN", KCACHE_KIND_CUBIN},      {"KIND_PTX", KCACHE_KIND_PTX},
        {"KIND_LTOIR", KCACHE_KIND_LTOIR},      {"KIND_DATA", KCACHE_KIND_DATA},
        {"NAMESPACE_MAX", KCACHE_NAMESPACE_MAX}, {"ENOTFOUND", KCACHE_ENOTFOUND},
        {"EINVAL", KCACHE_EINVAL},               {"ECOMPILE", KCACHE_ECOMPILE},
        {"COMPILE_NO_CACHE", KCACHE_COMPILE_NO_CACHE},
        {"COMPILE_REFRESH", KCACHE_COMPILE_REFRESH},
    };
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
        if (PyModule_AddIntConstant(m, ints[i].name, ints[i].value) < 0)
            return -1;
    return PyModule_AddStringConstant(m, "library_version", kcache_version());
}

/* The objects the module state holds, for traverse and clear alike. */
#define MODULE_STATE_OBJECTS(X) X(error) X(compile_error) X(store_type) X(compiler_type)

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    module_state *st = state_of(m);
#define VISIT_ONE(field) Py_VISIT(st->field);
    MODULE_STATE_OBJECTS(VISIT_ONE)
#undef VISIT_ONE
    return 0;
}

static int module_clear(PyObject *m)
{
    module_state *st = state_of(m);
#define CLEAR_ONE(field) Py_CLEAR(st->field);
    MODULE_STATE_OBJECTS(CLEAR_ONE)
#undef CLEAR_ONE
    return 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, (void *)module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "kcache._kcache",
    "kcache's C library, for the kcache package.",
    sizeof(module_state),
    module_methods,
    module_slots,
    module_traverse,
    module_clear,
    NULL,
};

PyMODINIT_FUNC PyInit__kcache(void);
PyMODINIT_FUNC PyInit__kcache(void)
{
    return PyModuleDef_Init(&module_def);
}
