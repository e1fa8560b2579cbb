/* What several verbs share beyond cli.c: progress, the config, the store, an output file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <blake2.h>
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

static char no_cache_message[600];

int cli_config_load(kcache_config **out)
{
    kcache_config_override o[3];
    size_t n = 0;
    char size[32], err[512];
    if (cli_globals.dir)
        o[n++] = (kcache_config_override){"dir", cli_globals.dir};
    if (cli_globals.path && cli_globals.path != cli_globals.dir_path)
        o[n++] = (kcache_config_override){"path", cli_globals.path};
    if (cli_globals.max_size) {
        if (cli_globals.max_size == UINT64_MAX)
            snprintf(size, sizeof(size), "none");
        else
            snprintf(size, sizeof(size), "%lluB", (unsigned long long)cli_globals.max_size);
        o[n++] = (kcache_config_override){"max_size", size};
    }
    if (kcache_config_load(out, o, n, err, sizeof(err)))
        return cli_error("%s", err);
    for (size_t i = 0; kcache_config_ignored(*out, i); i++)
        cli_warn_once(kcache_config_ignored(*out, i));
    return CLI_OK;
}

int cli_open_existing(kcache_store **out, int read_only)
{
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    char err[512];
    *out = NULL;
    cli_store_options(&o, read_only);
    o.no_create = 1;
    int rc = kcache_store_open(out, &o, err, sizeof(err));
    if (rc == KCACHE_ENOTFOUND) {
        snprintf(no_cache_message, sizeof(no_cache_message), "%s", err);
        return 0;
    }
    /* A verb that only reads cannot set a damaged file aside: it says who will. */
    if (rc == KCACHE_ECORRUPT && read_only)
        return cli_error("%s; the next compile (or any write) sets it aside and starts a new "
                         "cache, or run 'kcache clear' now", err);
    if (rc)
        return cli_error("%s", err);
    return 0;
}

int cli_open_store_to_read(kcache_store **out)
{
    return cli_open_existing(out, 1);
}

int cli_no_cache(const char *then)
{
    fprintf(stderr, "kcache: %s%s%s\n", no_cache_message, then ? ": " : "", then ? then : "");
    return CLI_OK;
}

const char *cli_plural(char *buf, size_t size, uint64_t n, const char *one, const char *many)
{
    snprintf(buf, size, "%llu %s", (unsigned long long)n, n == 1 ? one : many);
    return buf;
}

const char *cli_format_cap(char *buf, size_t size, uint64_t cap)
{
    if (cap == UINT64_MAX)
        snprintf(buf, size, "none");
    else
        kcache_format_size(buf, size, cap);
    return buf;
}

static int write_all(int fd, const void *data, size_t size)
{
    const char *p = data;
    while (size) {
        ssize_t n = write(fd, p, size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        size -= (size_t)n;
    }
    return 0;
}

/*
 * Whether path is already a regular file of ours, writable by us alone,
 * holding exactly these bytes; if so its times are set to now, as a write
 * would have, and nothing is written. Replacing a file by a rename makes
 * ext4 write the new file's blocks at once (its auto_da_alloc): a `kcache
 * compile` hit of saxpy that rewrote the same CUBIN took 1.86 ms against
 * 1.68 ms leaving it (`perf stat -r 100` on the build VM), and it wears the
 * disk for nothing. A file with other names (hard links), another owner, or
 * write permission for others is replaced (written beside it, renamed): the
 * rename gives the caller a file of its own that only it can change.
 */
static int already_there(const char *path, const void *data, size_t size)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    int same = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
               st.st_uid == geteuid() && !(st.st_mode & (S_IWGRP | S_IWOTH)) &&
               (uint64_t)st.st_size == (uint64_t)size;
    const unsigned char *p = data;
    unsigned char buf[16384];
    for (size_t done = 0; same && done < size;) {
        size_t want = size - done < sizeof(buf) ? size - done : sizeof(buf);
        ssize_t n = read(fd, buf, want);
        if (n < 0 && errno == EINTR)
            continue;
        same = n > 0 && memcmp(buf, p + done, (size_t)n) == 0;
        done += n > 0 ? (size_t)n : 0;
    }
    /* Nothing past the end (the file grew while it was read), and the times set. */
    same = same && read(fd, buf, 1) == 0 && futimens(fd, NULL) == 0;
    close(fd);
    return same;
}

int cli_write_output(const char *path, const void *data, size_t size, char *err, size_t err_size)
{
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        int bad = fd < 0 || write_all(fd, data, size) != 0;
        int saved = errno;
        if (fd >= 0 && close(fd) != 0 && !bad) {
            bad = 1;
            saved = errno;
        }
        if (bad)
            snprintf(err, err_size, "cannot write %s: %s", path, strerror(saved));
        return bad ? -1 : 0;
    }
    if (already_there(path, data, size))
        return 0;
    /* Never through a link planted at the name or the temporary one; the directory
     * another user could change is refused (kcache_file_write()). */
    return kcache_file_write(path, data, size, 0666, 0, err, err_size) ? -1 : 0;
}

/*
 * ccache prints its own hash of a file (XXH3-128) to compare files; kcache's
 * is BLAKE2b-256, the digest every artifact and input is stored under.
 */
int cli_checksum_file(const char *path)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cli_error("cannot read %s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return cli_error("%s is not a regular file", path);
    }
    blake2b_state b;
    blake2b_init(&b, 32);
    unsigned char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int saved = errno;
            close(fd);
            return cli_error("cannot read %s: %s", path, strerror(saved));
        }
        blake2b_update(&b, buf, (size_t)n);
    }
    close(fd);
    unsigned char digest[32];
    blake2b_final(&b, digest, sizeof(digest));
    for (size_t i = 0; i < sizeof(digest); i++)
        printf("%02x", digest[i]);
    putchar('\n');
    return CLI_OK;
}

int cli_parse_since(kcache_filter *f, const char *verb, const char *age)
{
    uint64_t seconds = 0;
    if (kcache_parse_age(&seconds, age) || !seconds)
        return cli_usage_error(verb, "--since '%s' is not an age (use e.g. 7d)", age);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    /* An age older than the epoch selects everything there is. */
    f->created_since = seconds >= (uint64_t)now / 1000 ? 1 : now - (int64_t)seconds * 1000;
    return -1;
}

int cli_find_entry(kcache_store **store, kcache_entry **entry, const char *verb,
                   const char *prefix, unsigned flags)
{
    *store = NULL;
    *entry = NULL;
    int bad = cli_check_key_prefix(verb, prefix);
    if (bad >= 0)
        return bad;
    if (cli_open_store_to_read(store))
        return CLI_FAIL;
    if (!*store) {
        char then[64];
        snprintf(then, sizeof(then), "no entry to %s", verb);
        cli_no_cache(then);
        return CLI_FAIL;
    }
    kcache_key key;
    if (kcache_store_find(&key, *store, prefix) || kcache_store_get(entry, *store, &key, flags)) {
        cli_error("%s: %s", prefix, kcache_store_errmsg(*store));
        kcache_entry_free(*entry);
        kcache_store_close(*store);
        *entry = NULL;
        *store = NULL;
        return CLI_FAIL;
    }
    return -1;
}

int cli_rework_file(int argc, char **argv, const char *verb, const char *usage,
                    int (*work)(kcache_store *), int clears)
{
    int json, status = cli_parse_json_only(argc, argv, verb, usage, &json);
    if (status >= 0)
        return status;
    kcache_store *store;
    /* Nothing to clear or compact is not a reason to create a cache. */
    if (cli_open_existing(&store, 0))
        return CLI_FAIL;
    if (!store) {
        if (json)
            printf("{%s\"disk_before\": 0, \"disk_after\": 0}\n", clears ? "\"removed\": 0, " : "");
        return cli_no_cache(clears ? "nothing to clear" : "nothing to compact");
    }
    int ret = CLI_OK;
    kcache_stats *before = NULL, *after = NULL;
    if (kcache_store_stats(&before, store) || work(store) || kcache_store_stats(&after, store)) {
        ret = cli_error("%s", kcache_store_errmsg(store));
        goto out;
    }
    uint64_t disk_before = before->file_bytes + before->wal_bytes;
    uint64_t disk_after = after->file_bytes + after->wal_bytes;
    if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_object_begin(&j, NULL);
        if (clears)
            cli_json_uint(&j, "removed", before->entries);
        cli_json_uint(&j, "disk_before", disk_before);
        cli_json_uint(&j, "disk_after", disk_after);
        cli_json_object_end(&j);
        cli_json_finish(&j);
    } else {
        char a[32], b[32], n[48];
        if (clears)
            printf("Removed %s; on disk %s -> %s\n",
                   cli_plural(n, sizeof(n), before->entries, "entry", "entries"),
                   kcache_format_size(a, sizeof(a), disk_before),
                   kcache_format_size(b, sizeof(b), disk_after));
        else
            printf("On disk: %s -> %s\n", kcache_format_size(a, sizeof(a), disk_before),
                   kcache_format_size(b, sizeof(b), disk_after));
    }
out:
    kcache_stats_free(before);
    kcache_stats_free(after);
    kcache_store_close(store);
    return ret;
}

int cli_namespace_filter(const char **arch, kcache_kind *kind, const char *verb, const char *ns)
{
    kcache_key unused;
    if (*arch || *kind)
        return cli_usage_error(verb, "--namespace selects kind data with the namespace as "
                                     "architecture: give it without --arch and --kind");
    if (kcache_key_caller(&unused, ns, NULL, 0))
        return cli_usage_error(verb, "--namespace '%s': a namespace is 1 to %d letters, digits, "
                                     "'.', '_' or '-'", ns, KCACHE_NAMESPACE_MAX);
    *arch = ns;
    *kind = KCACHE_KIND_DATA;
    return 0;
}

int cli_remote_url_ok(const char *url)
{
    return !strncmp(url, "redis://", 8) || !strncmp(url, "s3://", 5) ||
           !strncmp(url, "http://", 7) || !strncmp(url, "https://", 8);
}
