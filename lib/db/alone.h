/* Whether any other handle uses the cache: alone.c says how and why. */
#ifndef KC_ALONE_H
#define KC_ALONE_H

#include "store/storeint.h"

/* Takes this handle's shared lock on PATH-lock (s->lock_fd; -1 without one). */
void kc_alone_open(kcache_store *s);
/* 1 when no other handle has the cache open; it then stays so until kc_alone_end(). */
int kc_alone_begin(kcache_store *s);
void kc_alone_end(kcache_store *s);
void kc_alone_close(kcache_store *s);

/* Store failures kept in PATH-lock when the database had no room (alone.c). */
void kc_alone_reserve(kcache_store *s);
void kc_spill_add(kcache_store *s, uint64_t n);
uint64_t kc_spill_peek(kcache_store *s);
/* Takes the kept count for a flush (0 when another holds it); end zeroes it if taken. */
uint64_t kc_spill_take_begin(kcache_store *s);
void kc_spill_take_end(kcache_store *s, int taken);

#endif
