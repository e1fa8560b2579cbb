/* Headers read once per process while their identity holds (see depmemo.c). */
#ifndef KC_DEPMEMO_H
#define KC_DEPMEMO_H

#include "resolve/deps.h"

/* One file as read: immutable while in the table. */
typedef struct kc_memo {
    char *path;
    kc_probe id;          /* identity and digest it was read with */
    char *text;           /* NUL-terminated */
    size_t size;
    kc_directive *dirs;   /* kc_scan() of text */
    size_t n_dirs;
    unsigned refs;
    int in_table;
    struct kc_memo *next;
} kc_memo;

/* The entry for path read with identity id (id->digest is not compared), referenced; or NULL. */
kc_memo *kc_memo_get(const char *path, const kc_probe *id);

/*
 * Keeps a file read at read_at (ns since the epoch) with identity id: takes
 * *text and *dirs over (set to NULL) and returns the entry, referenced; or
 * NULL, taking nothing, when the file changed too recently to trust, the
 * table is full, or memory is short.
 */
kc_memo *kc_memo_adopt(const char *path, const kc_probe *id, char **text, size_t size,
                       kc_directive **dirs, size_t n_dirs, int64_t read_at);

void kc_memo_release(kc_memo *m);

#endif
