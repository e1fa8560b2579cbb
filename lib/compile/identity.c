/* See identity.h. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "compile/identity.h"

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
