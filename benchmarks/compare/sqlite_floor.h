/*
 * The least a one-SQLite-file cache can cost, for the comparison benchmark:
 * one table from a 32-byte key (a unique index) to the raw bytes, in WAL
 * mode, nothing else in the file. (Not WITHOUT ROWID: that b-tree keeps whole
 * records in its interior pages, and with artifact-sized rows a cold lookup
 * read megabytes.) A first hit is sqlite3_open_v2, one prepared
 * SELECT, one step, a copy and sqlite3_close: no checks, no decoding, no
 * counters. What kcache's first hit costs beyond this is kcache's; what this
 * costs beyond a file-per-entry cache's hit is the price of keeping every
 * entry in one SQLite file (the results page gives it as the measured reason
 * a first hit cannot come closer to a file-per-entry cache's).
 */
#ifndef KCACHE_BENCH_SQLITE_FLOOR_H
#define KCACHE_BENCH_SQLITE_FLOOR_H

#include <stddef.h>
#include <stdint.h>

typedef struct sqf_writer sqf_writer;

/* Creates PATH (which must not exist) and opens one transaction for puts. */
sqf_writer *sqf_create(const char *path);
void sqf_put(sqf_writer *w, const uint8_t key[32], const void *data, size_t size);
/* Commits and closes; the WAL is checkpointed so that the file alone holds the entries. */
void sqf_finish(sqf_writer *w);

/* A fresh process's first hit: open, get, close. Returns 0 (data malloc'd) or exits. */
int sqf_first_hit(const char *path, const uint8_t key[32], void **data, size_t *size);

#endif
