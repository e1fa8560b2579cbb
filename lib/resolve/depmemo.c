/*
 * Headers read once per process while their identity holds (doc/design.md, "The
 * key"): a program that compiles many kernels against one tree (CuPy compiles
 * dozens against the same 960 headers) reads, hashes and scans each header
 * once, not once per kernel. An entry is trusted only for the identity it was
 * read with, and only when resolve/identity.h's trust rule holds for that
 * read: a later edit then changes ctime, which the next lookup sees.
 *
 * Entries are immutable once in the table and counted: a resolution borrows
 * an entry's text and directives and releases it when done, so an entry
 * replaced meanwhile (its file changed) goes only when the last user lets go.
 * The table keeps at most KC_MEMO_BUDGET bytes of text; past it, files are
 * simply not kept.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "resolve/depmemo.h"
#include "util/strmap.h"

#define KC_MEMO_BUCKETS 4096
#define KC_MEMO_BUDGET ((size_t)256 << 20)

static pthread_mutex_t memo_lock = PTHREAD_MUTEX_INITIALIZER;
static kc_memo *buckets[KC_MEMO_BUCKETS];
static size_t memo_bytes;

static size_t bucket_of(const char *path)
{
    return (size_t)(kc_fnv1a(path, strlen(path)) % KC_MEMO_BUCKETS);
}

static void destroy(kc_memo *m)
{
    free(m->path);
    free(m->text);
    kc_directives_free(m->dirs, m->n_dirs);
    free(m);
}


/* Takes m out of the table; it goes when its last user lets go. Under the lock. */
static void unlink_locked(kc_memo **slot)
{
    kc_memo *m = *slot;
    *slot = m->next;
    m->next = NULL;
    m->in_table = 0;
    memo_bytes -= m->size;
    if (m->refs == 0)
        destroy(m);
}

kc_memo *kc_memo_get(const char *path, const kc_probe *id)
{
    kc_memo *found = NULL;
    pthread_mutex_lock(&memo_lock);
    for (kc_memo **slot = &buckets[bucket_of(path)]; *slot; slot = &(*slot)->next) {
        if (strcmp((*slot)->path, path) != 0)
            continue;
        if (kc_identity_same(&(*slot)->id, id)) {
            found = *slot;
            found->refs++;
        } else {
            unlink_locked(slot); /* the file changed: its old bytes are no use */
        }
        break;
    }
    pthread_mutex_unlock(&memo_lock);
    return found;
}

kc_memo *kc_memo_adopt(const char *path, const kc_probe *id, char **text, size_t size,
                       kc_directive **dirs, size_t n_dirs, int64_t read_at)
{
    /* Changed too close to the read to trust its timestamps: not kept. */
    if (!kc_identity_trusted(id, read_at))
        return NULL;
    kc_memo *m = kc_calloc(1, sizeof(*m));
    if (!m || !(m->path = kc_strdup(path))) {
        free(m);
        return NULL;
    }
    m->id = *id;
    m->size = size;
    m->refs = 1;
    m->in_table = 1;
    pthread_mutex_lock(&memo_lock);
    if (memo_bytes + size > KC_MEMO_BUDGET) {
        pthread_mutex_unlock(&memo_lock);
        free(m->path);
        free(m);
        return NULL;
    }
    kc_memo **slot = &buckets[bucket_of(path)];
    for (kc_memo **s = slot; *s; s = &(*s)->next) {
        if (!strcmp((*s)->path, path)) {
            unlink_locked(s);
            break;
        }
    }
    m->text = *text;
    m->dirs = *dirs;
    m->n_dirs = n_dirs;
    *text = NULL;
    *dirs = NULL;
    m->next = *slot;
    *slot = m;
    memo_bytes += size;
    pthread_mutex_unlock(&memo_lock);
    return m;
}

void kc_memo_release(kc_memo *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&memo_lock);
    int gone = --m->refs == 0 && !m->in_table;
    pthread_mutex_unlock(&memo_lock);
    if (gone)
        destroy(m);
}
