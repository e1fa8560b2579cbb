/* What the verbs share: global options, messages, opening the store, JSON output. */
#ifndef KCACHE_CLI_H
#define KCACHE_CLI_H

#include <stdint.h>
#include <stdio.h>

#include <kcache/store.h>

#include "safe.h"

#if defined(__GNUC__)
#define CLI_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CLI_PRINTF(f, a)
#endif

/* Exit codes: 0 ok, 1 the work failed, 2 the command line was wrong. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* Options given before the verb: kcache [--dir DIR] [--path FILE] [--max-size SIZE] VERB ... */
struct cli_globals {
    const char *dir;      /* --dir: the cache directory */
    const char *path;     /* --path, else DIR/kcache.db with --dir */
    uint64_t max_size;    /* 0: not given; UINT64_MAX: no cap */
    char *dir_path;       /* owned storage behind path when --dir made it */
};
extern struct cli_globals cli_globals;

/* "kcache: message" on stderr; returns CLI_FAIL. */
int cli_error(const char *fmt, ...) CLI_PRINTF(1, 2);
/* "kcache: message" plus where to read usage; returns CLI_USAGE. */
int cli_usage_error(const char *verb, const char *fmt, ...) CLI_PRINTF(2, 3);
/* "kcache: warning: message" on stderr. */
void cli_warn(const char *fmt, ...) CLI_PRINTF(1, 2);
/* cli_warn() of a message not printed before in this process (the store's log included). */
void cli_warn_once(const char *message);

/* The log callback the CLI gives the library: warnings to stderr. */
void cli_log(void *userdata, int level, const char *message);

/* Opens the store named by the global options and the environment. */
int cli_open_store(kcache_store **out, int read_only);
/* The store's options from the global flags (--path, --max-size) and the CLI's log. */
void cli_store_options(kcache_store_options *o, int read_only);

/* Human time: "2026-11-21 12:40:01" (local time) from ms since the epoch. */
const char *cli_format_time(char *buf, size_t size, int64_t ms);
/* "1.25 s", "340 ms", "12 us" from nanoseconds. */
const char *cli_format_duration(char *buf, size_t size, uint64_t ns);

/* Whether colour may be used on stream (a terminal and NO_COLOR unset). */
int cli_use_color(FILE *stream);

/*
 * A streaming JSON writer: keys and values in order, commas and escaping
 * handled. Keys are NULL inside arrays.
 */
typedef struct cli_json {
    FILE *out;
    int depth;
    int need_comma[32];
} cli_json;

void cli_json_init(cli_json *j, FILE *out);
void cli_json_object_begin(cli_json *j, const char *key);
void cli_json_object_end(cli_json *j);
void cli_json_array_begin(cli_json *j, const char *key);
void cli_json_array_end(cli_json *j);
void cli_json_string(cli_json *j, const char *key, const char *value);
void cli_json_uint(cli_json *j, const char *key, uint64_t value);
void cli_json_int(cli_json *j, const char *key, int64_t value);
void cli_json_double(cli_json *j, const char *key, double value);
void cli_json_bool(cli_json *j, const char *key, int value);
void cli_json_null(cli_json *j, const char *key);
/* An array named key of n objects {first: a[i], second: b[i]}: name expressions, say. */
void cli_json_pairs(cli_json *j, const char *key, const char *first, const char *const *a,
                    const char *second, const char *const *b, size_t n);
/* Ends the document with a newline. */
void cli_json_finish(cli_json *j);

/*
 * Progress of long work on stderr when it is a terminal ("phase done/total"),
 * nothing otherwise. Fits kcache_progress_fn; userdata is unused.
 */
void cli_progress(void *userdata, const char *phase, uint64_t done, uint64_t total);

/*
 * Opens the store only if it exists (read-only, or read-write for verbs that
 * repair or zero, never creating anything). Returns 0 with *out set; 0 with
 * *out NULL when there is no cache yet (cli_no_cache() says so); else
 * CLI_FAIL, reported.
 */
int cli_open_existing(kcache_store **out, int read_only);
int cli_open_store_to_read(kcache_store **out);
/* "kcache: no cache yet at PATH" (and what follows) on stderr. Returns CLI_OK. */
int cli_no_cache(const char *then);

/*
 * The settings as the global options (--dir, --path, --max-size) and the
 * environment give them. 0 or CLI_FAIL (reported).
 */
struct kcache_config;
int cli_config_load(struct kcache_config **out);

/*
 * Writes an artifact to path whole or not at all (a file beside it, then a
 * rename), or, when path is a device or a pipe (/dev/null, /dev/stdout, a
 * FIFO), straight into it: a rename would replace the device. A regular
 * file of the caller's own, writable by it alone, that holds exactly these
 * bytes already is left as it is, its times set to now. 0, or -1 with a
 * one-line message in err.
 */
int cli_write_output(const char *path, const void *data, size_t size, char *err, size_t err_size);

/* "1 entry", "2 entries": count and the right form of the noun. */
const char *cli_plural(char *buf, size_t size, uint64_t n, const char *one, const char *many);

/* A size cap for humans: "2.00 GiB", or "none" for UINT64_MAX. */
const char *cli_format_cap(char *buf, size_t size, uint64_t cap);

/*
 * A verb's options read by getopt_long over its table, with what every verb
 * answers alike said here: -h/--help prints usage to stdout, a missing value
 * (when short_opts starts with ':') and an unknown option are usage errors.
 * Set it with CLI_OPTIONS(); each cli_next_option() returns the next
 * option's code (optarg set), 0 when the options end (optind at the first
 * argument), or -1 when the verb must return status.
 */
struct option;
typedef struct cli_options {
    int argc;
    char **argv;
    const char *verb;
    const char *usage;
    const char *short_opts;
    const struct option *table; /* ends with CLI_OPTIONS_END */
    int started;
    int status;
} cli_options;
#define CLI_OPTIONS(argc, argv, verb, usage, short_opts, table)                                    \
    {(argc), (argv), (verb), (usage), (short_opts), (table), 0, CLI_OK}
/* The last rows of every verb's table: --help, then the end. */
#define CLI_OPTIONS_END {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}
int cli_next_option(cli_options *o);
/* 1 (reported as "unexpected argument") when the n-th argument after the options is there, else 0. */
int cli_extra_arg(const cli_options *o, int n);

/*
 * Parses the options of a verb that takes only --json and --help and no
 * arguments. Returns -1 to go on (*json set), else the exit code to return.
 */
int cli_parse_json_only(int argc, char **argv, const char *verb, const char *usage, int *json);

/*
 * --namespace NS as a filter: the entries a caller stored under its own keys
 * in NS are kind data with NS as arch (<kcache/store.h>). Sets *arch and
 * *kind; 0, or CLI_USAGE (reported) for a bad name or an --arch or --kind
 * given beside it.
 */
int cli_namespace_filter(const char **arch, kcache_kind *kind, const char *verb, const char *ns);

/*
 * Checks a key prefix as typed (4 to 64 hex digits) before any store is
 * opened. Returns -1 when it is well formed, else CLI_USAGE (reported).
 */
int cli_check_key_prefix(const char *verb, const char *prefix);

/*
 * --since AGE (export, remote push and pull): selects in f the entries
 * created within AGE of now. Returns -1 when AGE is one, else CLI_USAGE
 * (reported).
 */
int cli_parse_since(kcache_filter *f, const char *verb, const char *age);

/* The kinds of URL --remote takes, said in its usage errors. */
#define CLI_REMOTE_URLS                                                                            \
    "redis://[user:password@]host:port[/db], s3://bucket/prefix or http(s)://host/path"
/* Whether url names a remote of a kind kcache speaks (its settings are checked when opened). */
int cli_remote_url_ok(const char *url);

/*
 * The entry whose key starts with prefix (get, inspect): the prefix checked,
 * the cache opened to read, the entry read with kcache_store_get()'s flags.
 * Returns -1 with *store and *entry set, for the caller to free; else the
 * exit code, reported, with both NULL.
 */
int cli_find_entry(kcache_store **store, kcache_entry **entry, const char *verb,
                   const char *prefix, unsigned flags);

/*
 * A verb that rewrites the file and takes only --json (clear, vacuum): the
 * cache opened only if it exists, work run on it, the disk before and after
 * reported, with the entries removed when `clears`. Returns the exit code.
 */
int cli_rework_file(int argc, char **argv, const char *verb, const char *usage,
                    int (*work)(kcache_store *), int clears);


/*
 * Whether a size typed on the command line is a bare number other than 0:
 * "5" would be 5 bytes, which nobody means; the caller asks "5G?".
 */

/* --checksum-file FILE: BLAKE2b-256 of the file in hex, as kcache digests artifacts. */
int cli_checksum_file(const char *path);

/* Verbs. */
int cmd_stats(int argc, char **argv);
int cmd_compile(int argc, char **argv);
int cmd_explain(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_get(int argc, char **argv);
int cmd_prune(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_remote(int argc, char **argv);
int cmd_clear(int argc, char **argv);
int cmd_vacuum(int argc, char **argv);
int cmd_recompress(int argc, char **argv);
int cmd_path(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_version(int argc, char **argv);

#endif
