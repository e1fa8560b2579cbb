/*
 * What a long compile shows on a terminal: each result as it finishes, and
 * below them one progress line naming the items in flight, the count and an
 * estimate of the time left. Off a terminal nothing here prints: results come
 * at the end, in the order given, and stderr has no progress.
 *
 * Thread safety: every call takes the caller's lock (the job's); the live
 * object itself holds none.
 */
#ifndef KCACHE_CLI_LIVE_H
#define KCACHE_CLI_LIVE_H

#include <stddef.h>
#include <stdint.h>

#define LIVE_MAX_SLOTS 256

struct live {
    int progress;           /* draw the progress line (stderr is a terminal) */
    size_t total, done;
    uint64_t t0_ns;
    const char *slot[LIVE_MAX_SLOTS]; /* labels of items in flight ("saxpy.cu sm_90") */
    int drawn;              /* a progress line is on the screen */
};

/* Starts the display: progress only when stderr is a terminal and wanted. */
void live_init(struct live *l, size_t total, int want_progress);

/* An item began in slot (a worker's index); label must live until live_end. */
void live_begin(struct live *l, size_t slot, const char *label);

/*
 * Before printing anything else on the terminal (a result, a log): takes the
 * progress line away. live_redraw puts it back.
 */
void live_clear(struct live *l);
void live_redraw(struct live *l);

/* The item in slot finished. */
void live_end(struct live *l, size_t slot);

/* Leaves the terminal as it was: no progress line. */
void live_finish(struct live *l);

#endif
