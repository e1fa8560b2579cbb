/* The progress line of a long compile on a terminal. */
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "live.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The terminal's width: the line must never wrap, or \r cannot take it back. */
static size_t columns(void)
{
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        return ws.ws_col;
    return 80;
}

void live_init(struct live *l, size_t total, int want_progress)
{
    memset(l, 0, sizeof(*l));
    l->total = total;
    l->t0_ns = now_ns();
    l->progress = want_progress && isatty(STDERR_FILENO);
}

void live_begin(struct live *l, size_t slot, const char *label)
{
    if (slot < LIVE_MAX_SLOTS)
        l->slot[slot] = label;
    live_redraw(l);
}

void live_end(struct live *l, size_t slot)
{
    if (slot < LIVE_MAX_SLOTS)
        l->slot[slot] = NULL;
    l->done++;
}

void live_clear(struct live *l)
{
    if (l->drawn) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        l->drawn = 0;
    }
}

/*
 * "kcache: compiling (3/9 done, about 4 s left): saxpy.cu sm_90, gemm.cu sm_80, +2"
 * The estimate is the time so far per finished item times what is left: with
 * -j the items overlap, and the rate already counts that.
 */
void live_redraw(struct live *l)
{
    if (!l->progress)
        return;
    char line[1024], t[32];
    size_t width = columns() - 1, n;
    if (width >= sizeof(line))
        width = sizeof(line) - 1;
    n = (size_t)snprintf(line, sizeof(line), "kcache: compiling (%zu/%zu done", l->done,
                         l->total);
    if (l->done > 0 && l->done < l->total) {
        uint64_t per = (now_ns() - l->t0_ns) / l->done;
        n += (size_t)snprintf(line + n, sizeof(line) - n, ", about %s left",
                              cli_format_duration(t, sizeof(t), per * (l->total - l->done)));
    }
    n += (size_t)snprintf(line + n, sizeof(line) - n, ")");
    size_t shown = 0, busy = 0;
    for (size_t i = 0; i < LIVE_MAX_SLOTS; i++)
        busy += l->slot[i] != NULL;
    for (size_t i = 0; i < LIVE_MAX_SLOTS && n < sizeof(line); i++) {
        if (!l->slot[i])
            continue;
        /* Room for this label and a "+N" for those that would not fit. */
        size_t need = strlen(l->slot[i]) + 2;
        if (n + need + 5 > width && shown > 0) {
            n += (size_t)snprintf(line + n, sizeof(line) - n, ", +%zu", busy - shown);
            break;
        }
        n += (size_t)snprintf(line + n, sizeof(line) - n, "%s%s", shown ? ", " : ": ",
                              l->slot[i]);
        shown++;
    }
    if (n > width)
        n = width;
    line[n] = '\0';
    int bold = cli_use_color(stderr);
    fprintf(stderr, "\r\033[K%s%s%s", bold ? "\033[1m" : "", line, bold ? "\033[0m" : "");
    fflush(stderr);
    l->drawn = 1;
}

void live_finish(struct live *l)
{
    live_clear(l);
}
