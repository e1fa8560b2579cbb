/*
 * Fuzz target: NVRTC option and architecture parsing. The input is split at
 * NUL bytes into an argument vector. Parsing returns 0 or KCACHE_EINVAL with a
 * message; on success every canonical option is a string, -I operands never
 * reach the canonical (keyed) list, and an architecture it accepts
 * normalises to itself.
 */
#include <stdlib.h>
#include <string.h>

#include "kcache/compile.h"
#include "compile/opts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    const char *argv[64];
    size_t argc = 0;
    for (size_t i = 0; i <= size && argc < 64;) {
        argv[argc++] = text + i;
        i += strlen(text + i) + 1;
    }
    kc_opts o;
    char msg[256];
    int rc = kc_opts_parse(&o, argv, argc, msg, sizeof(msg));
    if (rc == 0) {
        for (size_t i = 0; i < o.n_canonical; i++)
            if (!o.canonical[i] || !strncmp(o.canonical[i], "--include-path=", 15))
                abort();
        kc_opts_free(&o);
    } else if (rc != KCACHE_EINVAL && rc != KCACHE_ENOMEM) {
        abort();
    } else if (rc == KCACHE_EINVAL && !memchr(msg, '\0', sizeof(msg))) {
        abort();
    }
    for (size_t i = 0; i < argc; i++) {
        char a[32], b[32];
        if (kcache_arch_normalize(a, sizeof(a), argv[i]) == 0) {
            if (kcache_arch_normalize(b, sizeof(b), a) != 0 || strcmp(a, b) != 0)
                abort();
        }
    }
    free(text);
    return 0;
}
