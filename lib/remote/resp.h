/*
 * Talking to a Redis server over a socket under one deadline per operation,
 * with every size a reply declares bounded before a byte of it is kept.
 *
 * Why our own reader and not hiredis's: hiredis applies its timeout to each
 * read, so a server that sends one byte a second never times out, and it
 * buffers a bulk string whole before its caller sees the declared length,
 * so a reply declaring 3 GB is read into memory before it can be refused.
 * Here the deadline bounds the whole exchange (connect, send, every byte of
 * the reply), and "$<n>" or "*<n>" is checked against the caller's bounds
 * the moment it is parsed. hiredis still connects (its resolver and
 * connect timeout) and formats commands. RESP2 only: kcache never asks for
 * RESP3 (no HELLO).
 */
#ifndef KC_RESP_H
#define KC_RESP_H

#include <stddef.h>
#include <stdint.h>

typedef enum kc_resp_type {
    KC_RESP_STATUS = 1, /* +OK */
    KC_RESP_ERROR,      /* -ERR ... */
    KC_RESP_INTEGER,    /* :42 */
    KC_RESP_STRING,     /* $n bytes */
    KC_RESP_NIL,        /* $-1 or *-1 */
    KC_RESP_ARRAY,      /* *n replies */
} kc_resp_type;

typedef struct kc_resp {
    kc_resp_type type;
    long long integer;
    char *str; /* STATUS, ERROR, STRING: NUL-terminated, len bytes (may hold NULs) */
    size_t len;
    struct kc_resp **element;
    size_t elements;
} kc_resp;

/* What one reply may hold: any one string, and all of it (strings plus array slots). */
typedef struct kc_resp_limits {
    size_t max_string;
    size_t max_total;
} kc_resp_limits;

typedef struct kc_conn {
    int fd;
    uint64_t deadline_ns; /* kc_mono_ns() clock: the end of the operation under way */
    int timed_out;        /* the last failure was the deadline */
    size_t beg, end;      /* unread bytes in buf */
    char buf[16384];
} kc_conn;

/*
 * Sends all of data before the deadline. Returns 0 or KCACHE_EIO (why says;
 * timed_out set when the deadline passed). Never raises SIGPIPE.
 */
int kc_conn_send(kc_conn *c, const void *data, size_t size, char *why, size_t why_size);

/*
 * Reads one reply before the deadline into *out (kc_resp_free()). Returns 0;
 * KCACHE_ECORRUPT when a declared size passes lim (why says which, nothing
 * of it read: the connection must be dropped); KCACHE_EIO for the deadline
 * (timed_out), a closed connection or bytes that are not RESP.
 */
int kc_resp_read(kc_resp **out, kc_conn *c, const kc_resp_limits *lim, char *why,
                 size_t why_size);

/* Whether bytes arrived that no request asked for (the connection is then not trusted). */
int kc_conn_has_unread(const kc_conn *c);

void kc_resp_free(kc_resp *r);

#endif
