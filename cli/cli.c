/* Messages, the store, time and units for the verbs. */
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

struct cli_globals cli_globals;

static void vmessage(const char *prefix, const char *fmt, va_list ap)
{
    fputs("kcache: ", stderr);
    if (prefix)
        fputs(prefix, stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage(NULL, fmt, ap);
    va_end(ap);
    return CLI_FAIL;
}

void cli_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage("warning: ", fmt, ap);
    va_end(ap);
}

int cli_usage_error(const char *verb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("kcache: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (verb)
        fprintf(stderr, " (see 'kcache %s --help')\n", verb);
    else
        fputs(" (see 'kcache --help')\n", stderr);
    return CLI_USAGE;
}

/*
 * Whether this warning was printed already in this process: a settings file
 * that is ignored is said by the store that opens and by the verb that lists
 * the settings, and once is enough.
 */
static int said_before(const char *message)
{
    static char said[4][512];
    static unsigned n;
    for (unsigned i = 0; i < n && i < 4; i++)
        if (!strncmp(said[i], message, sizeof(said[i]) - 1))
            return 1;
    snprintf(said[n++ % 4], sizeof(said[0]), "%s", message);
    return 0;
}

void cli_warn_once(const char *message)
{
    if (!said_before(message))
        cli_warn("%s", message);
}

void cli_log(void *userdata, int level, const char *message)
{
    (void)userdata;
    if (level == KCACHE_LOG_WARNING && strstr(message, " is ignored: ") && said_before(message))
        return;
    if (level <= KCACHE_LOG_WARNING)
        fprintf(stderr, "kcache: %s%s\n", level == KCACHE_LOG_WARNING ? "warning: " : "",
                message);
}

void cli_store_options(kcache_store_options *o, int read_only)
{
    o->path = cli_globals.path;
    o->max_size = cli_globals.max_size;
    o->read_only = read_only;
    o->log = cli_log;
}

int cli_open_store(kcache_store **out, int read_only)
{
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    char err[512];
    cli_store_options(&o, read_only);
    int rc = kcache_store_open(out, &o, err, sizeof(err));
    if (rc)
        cli_error("%s", err);
    return rc;
}

const char *cli_format_time(char *buf, size_t size, int64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (ms <= 0 || !localtime_r(&t, &tm) || !strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm))
        snprintf(buf, size, "-");
    return buf;
}

const char *cli_format_duration(char *buf, size_t size, uint64_t ns)
{
    double v = (double)ns;
    if (ns == 0)
        snprintf(buf, size, "0 s"); /* not "0.0 us": nothing is nothing in any unit */
    else if (ns >= 60ull * 1000000000ull)
        snprintf(buf, size, "%.1f min", v / 60e9);
    else if (ns >= 1000000000ull)
        snprintf(buf, size, "%.2f s", v / 1e9);
    else if (ns >= 1000000ull)
        snprintf(buf, size, "%.2f ms", v / 1e6);
    else
        snprintf(buf, size, "%.1f us", v / 1e3);
    return buf;
}

int cli_use_color(FILE *stream)
{
    const char *no = getenv("NO_COLOR");
    return isatty(fileno(stream)) && !(no && *no);
}

int cli_next_option(cli_options *o)
{
    if (!o->started) {
        o->started = 1;
        opterr = 0;
        optind = 1;
    }
    int c = getopt_long(o->argc, o->argv, o->short_opts, o->table, NULL);
    switch (c) {
    case -1: return 0;
    case 'h': fputs(o->usage, stdout); o->status = CLI_OK; return -1;
    case ':':
        o->status = cli_usage_error(o->verb, "%s needs a value", o->argv[optind - 1]);
        return -1;
    case '?':
        o->status = cli_usage_error(o->verb, "unknown option '%s'", o->argv[optind - 1]);
        return -1;
    default: return c;
    }
}

int cli_extra_arg(const cli_options *o, int n)
{
    if (optind + n >= o->argc)
        return 0;
    cli_usage_error(o->verb, "unexpected argument '%s'", o->argv[optind + n]);
    return 1;
}

int cli_parse_json_only(int argc, char **argv, const char *verb, const char *usage, int *json)
{
    static const struct option table[] = {
        {"json", no_argument, NULL, 'j'},
        CLI_OPTIONS_END,
    };
    cli_options o = CLI_OPTIONS(argc, argv, verb, usage, "h", table);
    int c;
    *json = 0;
    while ((c = cli_next_option(&o)) > 0)
        *json = 1; /* --json: the one option the table leaves to the verb */
    return c < 0 ? o.status : cli_extra_arg(&o, 0) ? CLI_USAGE : -1;
}

int cli_check_key_prefix(const char *verb, const char *prefix)
{
    size_t n = strlen(prefix);
    if (n < 4 || n > 2 * KCACHE_KEY_SIZE || strspn(prefix, "0123456789abcdefABCDEF") != n)
        return cli_usage_error(verb, "'%.80s' is not a key prefix: give 4 to 64 hex digits",
                               prefix);
    return -1;
}

/* ---- JSON ------------------------------------------------------------ */

void cli_json_init(cli_json *j, FILE *out)
{
    memset(j, 0, sizeof(*j));
    j->out = out;
}

static void json_escaped(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default: {
            /* JSON is UTF-8: a byte that is not, or a control, is written as the code
             * point of that byte (a stray 0xff reads as U+00FF, never as invalid JSON). */
            size_t n = cli_utf8_len(p);
            if (n == 0 || *p < 0x20 || *p == 0x7f) {
                fprintf(f, "\\u%04x", *p);
            } else {
                fwrite(p, 1, n, f);
                p += n - 1;
            }
        }
        }
    }
    fputc('"', f);
}

static void json_key(cli_json *j, const char *key)
{
    if (j->need_comma[j->depth])
        fputc(',', j->out);
    j->need_comma[j->depth] = 1;
    if (j->depth > 0) {
        fputc('\n', j->out);
        for (int i = 0; i < j->depth; i++)
            fputs("  ", j->out);
    }
    if (key) {
        json_escaped(j->out, key);
        fputs(": ", j->out);
    }
}

static void json_open(cli_json *j, const char *key, char c)
{
    json_key(j, key);
    fputc(c, j->out);
    if (j->depth + 1 < (int)(sizeof(j->need_comma) / sizeof(j->need_comma[0])))
        j->depth++;
    j->need_comma[j->depth] = 0;
}

static void json_close(cli_json *j, char c)
{
    int had = j->need_comma[j->depth];
    if (j->depth > 0)
        j->depth--;
    if (had) {
        fputc('\n', j->out);
        for (int i = 0; i < j->depth; i++)
            fputs("  ", j->out);
    }
    fputc(c, j->out);
}

void cli_json_object_begin(cli_json *j, const char *key) { json_open(j, key, '{'); }
void cli_json_object_end(cli_json *j) { json_close(j, '}'); }
void cli_json_array_begin(cli_json *j, const char *key) { json_open(j, key, '['); }
void cli_json_array_end(cli_json *j) { json_close(j, ']'); }

void cli_json_string(cli_json *j, const char *key, const char *value)
{
    json_key(j, key);
    if (value)
        json_escaped(j->out, value);
    else
        fputs("null", j->out);
}

void cli_json_uint(cli_json *j, const char *key, uint64_t value)
{
    json_key(j, key);
    fprintf(j->out, "%llu", (unsigned long long)value);
}

void cli_json_int(cli_json *j, const char *key, int64_t value)
{
    json_key(j, key);
    fprintf(j->out, "%lld", (long long)value);
}

void cli_json_double(cli_json *j, const char *key, double value)
{
    json_key(j, key);
    fprintf(j->out, "%.6g", value);
}

void cli_json_bool(cli_json *j, const char *key, int value)
{
    json_key(j, key);
    fputs(value ? "true" : "false", j->out);
}

void cli_json_null(cli_json *j, const char *key)
{
    json_key(j, key);
    fputs("null", j->out);
}

void cli_json_pairs(cli_json *j, const char *key, const char *first, const char *const *a,
                    const char *second, const char *const *b, size_t n)
{
    cli_json_array_begin(j, key);
    for (size_t i = 0; i < n; i++) {
        cli_json_object_begin(j, NULL);
        cli_json_string(j, first, a[i]);
        cli_json_string(j, second, b[i]);
        cli_json_object_end(j);
    }
    cli_json_array_end(j);
}

void cli_json_finish(cli_json *j)
{
    fputc('\n', j->out);
    fflush(j->out);
}
