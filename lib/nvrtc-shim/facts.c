/*
 * What NVIDIA's NVRTC says about itself (nvrtcVersion, nvrtcGetSupportedArchs,
 * nvrtcGetNumSupportedArchs), remembered per build, so that a process that
 * only hits never loads it. PyTorch asks the version before its first
 * compile and CuPy the supported architectures; pip's libnvrtc.so.13 has no
 * version in its file name (outputs.c answers from the name when it has).
 *
 * Decisions:
 *   - A record is keyed by the identity the compile keys already give the
 *     library: its file name and GNU build-id, read from the file the drop-in
 *     would load, without loading it (kcache_compiler_nvrtc_id()). A hit
 *     trusts that identity for a kernel's bytes; one build answers one
 *     version and one list of architectures, so the answer is as sound as
 *     the hit. A touched or copied file of the same build answers from the
 *     record; another build (an upgrade, another venv's wheel) is another
 *     key, and NVRTC is loaded and asked.
 *   - A record is written only by a process that loaded the library and
 *     asked it, and only when the build-id in the loaded copy's own notes
 *     (kc_real_build_id(), in memory) is the one the compiler read from the
 *     file: a file replaced between the two never files its answers under
 *     the other build.
 *   - It is an entry in the namespace "kcache.nvrtc" (a caller's entry of
 *     kcache's own): no schema of its own, and the LRU, the cap and clear
 *     hold for it. It never leaves this machine: export and push leave it
 *     out, import and pull pass it over (lib/store/ingest.c, "Local-only
 *     records"), since only a record the library here answered is known to
 *     be what that file says, and none can be checked by a rebuild.
 *     Lookups are made without touching it (no hit or miss counted: stats
 *     count compiles); evicted, it is written again by the next process
 *     that loads NVRTC.
 *   - No record, an unreadable one, a disabled cache: NVRTC is asked, as
 *     before. Never a guess.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kcache/store.h>

#include "nvrtc-shim/facts.h"

#define FACTS_NS "kcache.nvrtc"
#define FACTS_FORMAT "kcache nvrtc facts 1"

static pthread_mutex_t facts_lock = PTHREAD_MUTEX_INITIALIZER;
static int looked_up, known, noted;
static kc_facts facts;

/* Parses a record: FACTS_FORMAT, "version MAJOR MINOR", "archs N A1 ... AN". 0 or -1. */
static int parse(kc_facts *out, const char *text)
{
    int n = 0, at = 0;
    memset(out, 0, sizeof(*out));
    if (sscanf(text, FACTS_FORMAT "\nversion %d %d\narchs %d%n", &out->major, &out->minor,
               &out->n_archs, &at) != 3 ||
        out->n_archs < 0 || out->n_archs > KC_FACTS_MAX_ARCHS)
        return -1;
    text += at;
    for (int i = 0; i < out->n_archs; i++, text += n)
        if (sscanf(text, " %d%n", &out->archs[i], &n) != 1)
            return -1;
    return strcmp(text, "\n") == 0 ? 0 : -1;
}

int kc_facts_get(kc_facts *out, kcache_compiler *c)
{
    pthread_mutex_lock(&facts_lock);
    if (!looked_up) {
        looked_up = 1;
        kcache_store *s = kcache_compiler_store(c);
        const char *id = kcache_compiler_nvrtc_id(c);
        kcache_entry *e = NULL;
        kc_shim_enter();
        if (s && id && !strstr(id, "build-id unknown") &&
            kcache_store_get_keyed(&e, s, FACTS_NS, id, strlen(id), KCACHE_GET_NO_TOUCH) == 0)
            known = parse(&facts, (const char *)e->data) == 0;
        kcache_entry_free(e);
        kc_shim_leave();
    }
    int rc = known ? 0 : -1;
    if (known)
        *out = facts;
    pthread_mutex_unlock(&facts_lock);
    return rc;
}

void kc_facts_note(kcache_compiler *c, const kc_real_nvrtc *api)
{
    pthread_mutex_lock(&facts_lock);
    if (noted || !api) {
        pthread_mutex_unlock(&facts_lock);
        return;
    }
    noted = 1;
    kcache_store *s = kcache_compiler_store(c);
    const char *id = kcache_compiler_nvrtc_id(c);
    const char *loaded = kc_real_build_id();
    const char *named = id ? strstr(id, " build-id ") : NULL;
    kc_facts f;
    memset(&f, 0, sizeof(f));
    /* Only the build that answered, under the identity the keys give it. */
    if (!s || !loaded || !named || strcmp(named + strlen(" build-id "), loaded) != 0 ||
        api->Version(&f.major, &f.minor) != NVRTC_SUCCESS ||
        api->GetNumSupportedArchs(&f.n_archs) != NVRTC_SUCCESS || f.n_archs < 0 ||
        f.n_archs > KC_FACTS_MAX_ARCHS || api->GetSupportedArchs(f.archs) != NVRTC_SUCCESS) {
        pthread_mutex_unlock(&facts_lock);
        return;
    }
    char text[64 + 12 * KC_FACTS_MAX_ARCHS];
    int n = snprintf(text, sizeof(text), FACTS_FORMAT "\nversion %d %d\narchs %d", f.major,
                     f.minor, f.n_archs);
    for (int i = 0; i < f.n_archs; i++)
        n += snprintf(text + n, sizeof(text) - (size_t)n, " %d", f.archs[i]);
    n += snprintf(text + n, sizeof(text) - (size_t)n, "\n");
    kcache_entry *e = NULL;
    kc_shim_enter();
    /* Written once per build, not once per process: a record already right stays. */
    int same = kcache_store_get_keyed(&e, s, FACTS_NS, id, strlen(id), KCACHE_GET_NO_TOUCH) == 0 &&
               e->size == (size_t)n && !memcmp(e->data, text, (size_t)n);
    kcache_entry_free(e);
    if (!same)
        kcache_store_put_keyed(s, FACTS_NS, id, strlen(id), text, (size_t)n); /* best effort */
    kc_shim_leave();
    pthread_mutex_unlock(&facts_lock);
}

void kc_facts_fork_prepare(void)
{
    pthread_mutex_lock(&facts_lock);
}

void kc_facts_fork_parent(void)
{
    pthread_mutex_unlock(&facts_lock);
}

void kc_facts_fork_child(void)
{
    /* The child opens a compiler of its own: it looks the record up again. */
    looked_up = known = noted = 0;
    pthread_mutex_unlock(&facts_lock);
}
