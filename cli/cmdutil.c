/* What several verbs share beyond util.c: progress on a terminal, opening to read. */
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <kcache/config.h>

#include "cli.h"

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void cli_progress(void *userdata, const char *phase, uint64_t done, uint64_t total)
{
    static uint64_t last;
    (void)userdata;
    if (!isatty(fileno(stderr)) || total == 0)
        return;
    uint64_t t = now_ms();
    /* A few redraws a second: a terminal is slower than a cache. */
    if (done < total && done != 0 && t - last < 100)
        return;
    last = t;
    int bold = cli_use_color(stderr);
    fprintf(stderr, "\r%s%s%s %llu/%llu (%3.0f %%)", bold ? "\033[1m" : "", phase,
            bold ? "\033[0m" : "", (unsigned long long)done, (unsigned long long)total,
            100.0 * (double)done / (double)total);
    if (done >= total)
        fputs("\r\033[K", stderr);
    fflush(stderr);
}

int cli_open_store_to_read(kcache_store **out)
{
    kcache_config_override o = {"path", cli_globals.path};
    kcache_config *cfg = NULL;
    char err[512];
    if (kcache_config_load(&cfg, &o, cli_globals.path ? 1 : 0, err, sizeof(err))) {
        cli_error("%s", err);
        return KCACHE_EINVAL;
    }
    /* A cache that does not exist yet is an empty one, not an error: create it. */
    struct stat st;
    int exists = stat(kcache_config_find(cfg, "path")->value, &st) == 0;
    kcache_config_free(cfg);
    return cli_open_store(out, exists);
}
