/*
 * Figures of the reliability tests, for tests/report.py: each test writes one
 * line of tab-separated fields, the first its name and the rest key=value,
 * into $KCACHE_TEST_RESULTS/NAME.tsv (meson sets it to BUILDDIR/tests/results).
 * Without the variable nothing is written.
 */
#ifndef KC_RESULTS_H
#define KC_RESULTS_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#if defined(__GNUC__)
__attribute__((unused, format(printf, 2, 3)))
#endif
static void test_record(const char *name, const char *fmt, ...)
{
    const char *dir = getenv("KCACHE_TEST_RESULTS");
    if (!dir || !*dir)
        return;
    mkdir(dir, 0755);
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s.tsv", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(f, "%s\t", name);
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    va_end(ap);
    fclose(f);
}

#endif
