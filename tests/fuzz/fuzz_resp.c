/*
 * Fuzz target: replies of a Redis server (remote/resp.h), which anyone who
 * can answer on the remote's address writes. The bytes come through a
 * socket pair, as from a server that then hangs up; replies are read until
 * one fails.
 *
 * What must hold, whatever the bytes: each read returns 0 with a reply whose
 * strings and element counts are within the bounds, or KCACHE_ECORRUPT
 * (a declared size over the bound, nothing of it allocated) or KCACHE_EIO
 * (not RESP, or the end), with a message; never past the deadline.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "remote/resp.h"
#include "util/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t held(const kc_resp *r)
{
    size_t n = r->type == KC_RESP_STRING ? r->len : 0;
    for (size_t i = 0; i < r->elements; i++)
        n += held(r->element[i]) + sizeof(r->element[0]);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int sv[2];
    /* A socket pair holds this much without a reader: larger inputs are not interesting. */
    if (size > 65536 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return 0;
    if (size && write(sv[1], data, size) != (ssize_t)size)
        abort();
    close(sv[1]);
    kc_conn *c = kc_calloc(1, sizeof(*c));
    if (!c)
        abort();
    c->fd = sv[0];
    c->deadline_ns = kc_mono_ns() + UINT64_C(2000000000);
    const kc_resp_limits lim = {4096, 16384};
    for (;;) {
        kc_resp *r = NULL;
        char why[256] = "";
        int rc = kc_resp_read(&r, c, &lim, why, sizeof(why));
        if (rc == 0) {
            if (!r || held(r) > lim.max_total)
                abort();
            kc_resp_free(r);
            continue;
        }
        if ((rc != KCACHE_EIO && rc != KCACHE_ECORRUPT) || r || !why[0] || c->timed_out)
            abort();
        break;
    }
    close(sv[0]);
    free(c);
    return 0;
}
