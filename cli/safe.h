/* Printing text that came from the cache or a bundle without letting it drive a terminal. */
#ifndef KCACHE_CLI_SAFE_H
#define KCACHE_CLI_SAFE_H

#include <stddef.h>
#include <stdio.h>

/*
 * Text that came from the cache or a bundle, safe for a terminal:
 * control bytes and bytes that are not UTF-8 shown as \xNN. cli_safe()
 * returns one of a few rotating buffers (long text cut with "..."), for a
 * field of a line; cli_fputs_safe() writes a whole text, keeping newlines
 * and tabs when `lines`.
 */
const char *cli_safe(const char *s);
void cli_fputs_safe(FILE *f, const char *s, int lines);
/* Length of the UTF-8 sequence at p that is safe to print as is (not a C1 control), or 0. */
size_t cli_utf8_len(const unsigned char *p);

#endif
