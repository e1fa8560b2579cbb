/*
 * Text from the cache or a bundle, made safe to print.
 *
 * Names, toolchain strings, logs, inputs and PTX in a cache may come from a
 * bundle someone else made. Printed raw, an escape sequence in them sets the
 * terminal's title, clears the screen or forges a row of `kcache ls`. Every
 * verb prints such text through these helpers, so that:
 *
 *   - control bytes (C0, DEL and the C1 range, which some terminals take
 *     as CSI and OSC) are shown as \xNN, never sent; newline and tab stay
 *     only where the text is a block of lines (logs, sources, PTX);
 *   - bytes that are not UTF-8 are shown as \xNN too: JSON must be valid
 *     UTF-8, and a terminal could take a stray 0x9b for CSI.
 */
#include <stdio.h>
#include <string.h>

#include "safe.h"

size_t cli_utf8_len(const unsigned char *p)
{
    unsigned c = p[0];
    size_t n;
    unsigned cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, cp = c & 0x07;
    else
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    /* Overlong forms, surrogates, past U+10FFFF: not UTF-8. */
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    /* U+0080..U+009F are the C1 controls, encoded: escaped like the bytes. */
    if (cp >= 0x80 && cp <= 0x9f)
        return 0;
    return n;
}

/* Calls put(ud, bytes, n) with the text made safe. */
static void escape(const char *s, int lines, void (*put)(void *, const char *, size_t), void *ud)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        size_t n = cli_utf8_len(p);
        int control = n == 1 && (*p < 0x20 || *p == 0x7f);
        if (control && lines && (*p == '\n' || *p == '\t'))
            control = 0;
        if (n == 0 || control) {
            char hex[8];
            snprintf(hex, sizeof(hex), "\\x%02x", *p);
            put(ud, hex, 4);
            p++;
            continue;
        }
        put(ud, (const char *)p, n);
        p += n;
    }
}

static void put_file(void *ud, const char *p, size_t n)
{
    fwrite(p, 1, n, ud);
}

void cli_fputs_safe(FILE *f, const char *s, int lines)
{
    escape(s, lines, put_file, f);
}

struct sbuf {
    char *p;
    size_t n, size;
    int cut;
};

static void put_buf(void *ud, const char *p, size_t n)
{
    struct sbuf *b = ud;
    if (b->cut || b->n + n + 4 > b->size) {
        if (!b->cut)
            memcpy(b->p + b->n, "...", 4);
        b->cut = 1;
        return;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = '\0';
}

const char *cli_safe(const char *s)
{
    /* A few at a time, so that one printf() can show several fields. */
    static char bufs[8][1024];
    static unsigned next;
    struct sbuf b = {bufs[next++ % 8], 0, sizeof(bufs[0]), 0};
    b.p[0] = '\0';
    escape(s, 0, put_buf, &b);
    return b.p;
}
