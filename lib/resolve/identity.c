/* File identity and the trust rule (identity.h), alone: the one place that says what a file is. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "resolve/identity.h"

int64_t kc_identity_racy_ns = KC_IDENTITY_RACY_NS;

static int64_t clock_shift_ns;
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

static void read_shift(void)
{
    const char *s = getenv("KCACHE_TEST_CLOCK_SHIFT_NS");
    if (s && *s) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (!*end && v > 0)
            clock_shift_ns = v;
    }
}

int64_t kc_identity_now_ns(void)
{
    pthread_once(&shift_once, read_shift);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + clock_shift_ns;
}

void kc_identity_of(kc_probe *id, const struct stat *st)
{
    id->dev = (uint64_t)st->st_dev;
    id->ino = (uint64_t)st->st_ino;
    id->size = (uint64_t)st->st_size;
    id->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
    id->ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
}

int kc_identity_same(const kc_probe *a, const kc_probe *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns;
}

int kc_identity_trusted(const kc_probe *id, int64_t read_at)
{
    return id->mtime_ns <= read_at - kc_identity_racy_ns &&
           id->ctime_ns <= read_at - kc_identity_racy_ns;
}

int kc_identity_read(const char *path, char **out, size_t *size, kc_probe *id)
{
    struct stat st;
    memset(&st, 0, sizeof(st));
    int rc = kc_read_file_stat(path, KC_IDENTITY_MAX_SIZE, out, size, &st);
    if (rc == KCACHE_EINVAL)
        errno = S_ISREG(st.st_mode) ? EFBIG : EISDIR;
    if (rc)
        return rc;
    id->state = KC_PROBE_FILE;
    kc_identity_of(id, &st);
    kc_digest(id->digest, *out, *size);
    return 0;
}
