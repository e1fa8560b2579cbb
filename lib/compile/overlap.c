/*
 * A miss whose include resolution runs beside the compile.
 *
 * On a miss that no remembered closure answered (compile.c, manifest_hit),
 * the key needs the include resolution before the store can be asked: for a
 * CuPy kernel ~1,000 headers, 15 to 20% of a plain compile's CPU time here
 * (benchmarks/RESULTS-dropin-miss.md). A compile kcache runs itself
 * (nvrtc.c) needs the resolution first too: the headers handed in memory
 * are the ones hashed, and the seed comes from the key. A compiler of the
 * caller's own that reads the disk (the drop-in's NVIDIA NVRTC) needs
 * neither; only the store does. So with KCACHE_COMPILE_OVERLAP, where the
 * process may run on more than one CPU, the compiler is called at once on
 * the calling thread while a second thread resolves, keys, looks the key
 * up and takes its lease.
 *
 * Soundness. The key is derived by kc_resolve_and_key(), the function the
 * sequential path uses, from the same request and work: the key stored is
 * the key a later lookup computes. What the compile read must be what was
 * keyed. In the sequential order the resolution reads every file before
 * the compile does and the closure is checked after it, so an edit in
 * between shows. Here the compile may read a file before the resolution
 * does, and an edit between those two reads would leave the resolution and
 * the check agreeing on bytes the compile never saw. So every user file of
 * the closure must have an identity the trust rule accepts at the moment
 * before the compiler was called (resolve/identity.h: mtime and ctime older
 * than that by the racy margin; ctime cannot be set back), which means it
 * did not change from then until the resolution read it; the closure check
 * after the compile covers the rest, as in the sequential order. A closure
 * with a file changed more recently makes the compiler compile again
 * (await_closure() returns 1), after the resolution: the sequential order.
 * What the compiler observed (every path, and what was found there) is
 * judged against the closure as before, and a compiler that never asked for
 * the closure has its artifact returned, not stored.
 *
 * Hits. One whose remembered closure holds never gets here. One found only
 * under the full key (an imported entry, a closure since forgotten, another
 * process's compile that finished meanwhile) is served as before, and the
 * compile, started for nothing, is asked to stop (stop_asked(); the drop-in
 * cancels NVIDIA's compile through its flow callback).
 *
 * Not overlapped: one CPU (the resolution would only slow the compile), a
 * shared tier (asking it is cheaper than a compile, so it comes first),
 * REFRESH, KEY_ONLY, NO_CACHE, require_hit, options that leave the compile
 * uncached whatever the headers.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compileint.h"
#include "compile/nvenv.h"
#include "resolve/identity.h"

struct overlap {
    struct caller_step *s;
    struct kc_result *r; /* the resolution thread's until joined */
    int64_t started_at;  /* kc_identity_now_ns() before the compiler was called */
    pthread_t thread;
    int joined;
    int rc;    /* the resolution's: 0, or an error r says */
    int found; /* 1, or 2 under the key with the name: r is that entry */
    int leased, store_failed;
    kcache_key lease_key; /* the key looked up (a result may be filed under another) */
    atomic_int stop;
    struct heartbeat hb;
    kcache_probe *probes;
    int told; /* the compiler was handed the closure */
};

static int more_than_one_cpu(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    return sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 1;
}

int kc_overlap_wanted(const kcache_compiler *c, const kcache_request *req, const struct work *w)
{
    unsigned off = KCACHE_COMPILE_NO_CACHE | KCACHE_COMPILE_REFRESH | KCACHE_COMPILE_KEY_ONLY;
    return req->version >= 3 && req->compile && (req->flags & KCACHE_COMPILE_OVERLAP) &&
           !(req->flags & off) && c->store && !c->shared && !c->remote && !c->require_hit &&
           !w->opts.uncached_reason && !w->opts.several_archs && more_than_one_cpu();
}

/* The second thread: resolve, key, look up or lease, as the sequential path does. */
static void *resolve_main(void *arg)
{
    struct overlap *o = arg;
    struct caller_step *s = o->s;
    o->rc = kc_resolve_and_key(s->c, s->req, s->w, o->r);
    if (o->rc || s->w->deps.not_hermetic)
        return NULL;
    if (s->w->name_free && kc_name_free_hit(s->c, s->w, s->req->flags, o->r)) {
        /* Under the key without the name, or the one with what the result showed of it
         * (its last component, or all of it): r holds it under the key it was found by. */
        o->found = 1;
        atomic_store(&o->stop, 1);
        return NULL;
    }
    unsigned get_flags = s->req->flags & KCACHE_COMPILE_UNCOUNTED ? KCACHE_GET_NO_COUNT : 0;
    const kcache_key key = o->lease_key = o->r->pub.key;
    int found = kc_lookup_or_lease(s->c, &key, s->w->name_free ? &s->w->named_key : NULL, get_flags,
                                   o->r, &o->leased);
    if (found > 0) {
        o->found = found;
        atomic_store(&o->stop, 1);
    } else if (found < 0) {
        kc_result_store_problem(o->r, found, kcache_store_errmsg(s->c->store));
        kc_store_count_failure(s->c->store);
        o->store_failed = 1;
    }
    if (o->leased)
        kc_heartbeat_start(&o->hb, s->c->store, &key);
    return NULL;
}

static void join(struct overlap *o)
{
    if (!o->joined)
        pthread_join(o->thread, NULL);
    o->joined = 1;
}

static int await_closure(kcache_made *m)
{
    struct overlap *o = m->kcache_private;
    const struct work *w = o->s->w;
    join(o);
    if (o->rc || o->found || w->deps.not_hermetic)
        return -1;
    if (!o->probes && !(o->probes = kc_caller_probes(w)))
        return -1; /* out of memory: not told, so not stored */
    m->probes = o->probes;
    m->n_probes = w->deps.n_probes;
    o->told = 1;
    for (size_t i = 0; i < w->deps.n_probes; i++)
        if (w->deps.probes[i].state == KC_PROBE_FILE &&
            !kc_identity_trusted(&w->deps.probes[i], o->started_at))
            return 1;
    return 0;
}

static int stop_asked(const kcache_made *m)
{
    const struct overlap *o = m->kcache_private;
    return atomic_load(&o->stop);
}

/* Why what the compiler made must not be stored, or NULL. */
static const char *no_store(const struct overlap *o, const kcache_made *m, unsigned long mark,
                            int compiled)
{
    char env_problem[256];
    if (m->no_store)
        return m->no_store;
    if (!o->told)
        return "closure-not-judged";
    if (kc_nvenv_unkeyed_since(&o->s->c->tk, mark, env_problem, sizeof(env_problem)))
        return "environment-not-keyed";
    if (compiled == 0 && kc_closure_holds(o->s->w) != 1)
        return "closure-changed";
    if (kc_kept_restrict(o->s->w))
        return "restrict-kept"; /* the drop-in's name (nvrtc-shim/shim.c) */
    return NULL;
}

/* Counts and stores what the compiler made (rc: what taking it gave), as kc_through_cache. */
static void store_made(struct overlap *o, struct kc_result *r, int rc)
{
    struct caller_step *s = o->s;
    if (o->leased)
        kc_heartbeat_stop(&o->hb);
    if (!o->store_failed) {
        if (rc) {
            kc_store_count(s->c->store, rc == KCACHE_EINVAL ? "request_errors" : "errors", 1);
        } else {
            if (!(s->req->flags & KCACHE_COMPILE_UNCOUNTED))
                kc_store_count_miss(s->c->store, s->w->nvrtc_arch, s->w->kind);
            kc_caller_store(s, r);
        }
    }
    if (o->leased)
        kc_store_lease_release(s->c->store, &o->lease_key);
}

int kc_overlap_miss(struct caller_step *s, struct kc_result *r)
{
    struct overlap o;
    memset(&o, 0, sizeof(o));
    o.s = s;
    o.r = r;
    atomic_init(&o.stop, 0);
    /* NVRTC loaded by kcache (the drop-in's is the same library) has its getenv watched. */
    const kc_nvrtc *api = NULL;
    char ignored[64];
    kc_nvrtc_get(&s->c->tk, &api, ignored, sizeof(ignored));
    o.started_at = kc_identity_now_ns();
    if (pthread_create(&o.thread, NULL, resolve_main, &o) != 0)
        return KC_OVERLAP_DECLINED;
    kcache_made m;
    memset(&m, 0, sizeof(m));
    m.toolkit_root = s->c->tk.root;
    m.await_closure = await_closure;
    m.stop_asked = stop_asked;
    m.kcache_private = &o;
    unsigned long mark = kc_nvenv_mark();
    uint64_t t0 = kc_mono_ns();
    int compiled = s->req->compile(s->req->compile_userdata, &m);
    uint64_t took = kc_mono_ns() - t0;
    join(&o);
    int rc = o.rc;
    if (rc) {
        kc_store_count(s->c->store, "errors", 1); /* as compile.c counts an unkeyed request */
    } else if (o.found) {
        r->pub.keyed = 1;
        if (o.found == 2)
            kc_use_named_key(s->w, r);
    } else if (s->w->deps.not_hermetic) {
        char msg[700];
        snprintf(msg, sizeof(msg), "%s; compiled without the cache", s->w->deps.problem);
        kc_result_store_problem(r, KCACHE_ENOTSUP, msg);
        rc = kc_caller_take_made(s, r, &m, compiled);
        r->pub.compile_ns = took;
    } else {
        r->pub.keyed = 1;
        s->no_store = no_store(&o, &m, mark, compiled);
        rc = kc_caller_take_made(s, r, &m, compiled);
        r->pub.compile_ns = took;
        store_made(&o, r, rc);
    }
    free(o.probes);
    return rc;
}
