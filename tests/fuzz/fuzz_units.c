/*
 * Fuzz target: sizes and ages as users type them ("1.5GiB", "30d"). The
 * input is taken as text, NUL-terminated at its end. Whatever it is, the
 * parsers return 0 or KCACHE_EINVAL and leave the result untouched on error;
 * a size they accept and print back reads as the same size again.
 */
#include <kcache/core.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint64_t untouched = UINT64_C(0x5eed5eed5eed5eed);

static void roundtrip(uint64_t v)
{
    char buf[64];
    kcache_format_size(buf, sizeof(buf), v);
    if (!memchr(buf, '\0', sizeof(buf)))
        abort();
    uint64_t back = untouched;
    if (kcache_parse_size(&back, buf) != 0) {
        /* Only units past what parse_size accepts (PiB, EiB) may not read back. */
        if (v < (UINT64_C(1023) << 40))
            abort();
        return;
    }
    /* Printed with three significant digits: within 0.5 %. */
    uint64_t diff = back > v ? back - v : v - back;
    if ((double)diff > (double)v * 0.0051 + 1.0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Exactly sized, so that a read past the terminator is caught. */
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    if (size)
        memcpy(text, data, size);
    text[size] = '\0';

    uint64_t v = untouched;
    int rc = kcache_parse_size(&v, text);
    if (rc != 0 && (rc != KCACHE_EINVAL || v != untouched))
        abort();
    if (rc == 0)
        roundtrip(v);

    v = untouched;
    rc = kcache_parse_age(&v, text);
    if (rc != 0 && (rc != KCACHE_EINVAL || v != untouched))
        abort();

    /* Every buffer size, from none to more than enough: always terminated, never overrun. */
    uint64_t n = 0;
    memcpy(&n, data, size < sizeof(n) ? size : sizeof(n));
    for (size_t cap = 0; cap <= 24; cap += 3) {
        char *out = malloc(cap ? cap : 1);
        if (!out)
            break;
        kcache_format_size(out, cap, n);
        if (cap && !memchr(out, '\0', cap))
            abort();
        free(out);
    }
    free(text);
    return 0;
}
