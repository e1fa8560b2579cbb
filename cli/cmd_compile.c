/*
 * kcache compile: files x architectures through the cache, in parallel with
 * -j, reporting per item what happened (hit, miss, uncached or error), the
 * key, the time and where the output went. This is what CI runs to warm a
 * cache.
 *
 * Output never claims what did not happen: a failed compile is an error row
 * with its reason; "cache" only when an entry was served or stored; an
 * output file only once it is written; outputs that would overwrite each
 * other are refused before anything is compiled.
 */
#include <blake2.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kcache/compile.h>

#include "cli.h"
#include "compile_args.h"
#include "live.h"

#define KC_CLI_MAX(a, b) ((a) > (b) ? (a) : (b))

static const char usage_text[] =
    "usage: kcache compile FILE.cu... --arch sm_90[,sm_80...] [options] [-- NVRTC-OPTIONS]\n"
    "       kcache compile --from REQUESTS.json [options]\n"
    "\n"
    "Compiles each file for each architecture through the cache: a hit is served\n"
    "from the cache, a miss is compiled with NVRTC and stored.\n"
    "\n"
    "  -a, --arch LIST         architectures, comma-separated or repeated (sm_90, sm_90a,\n"
    "                          compute_90, native)\n"
    "  -I DIR                  add a header directory (repeatable)\n"
    "  -D NAME[=VALUE]         define a macro (repeatable)\n"
    "      --std STD           C++ dialect, e.g. c++17\n"
    "      --cubin | --ptx | --ltoir   what to produce (default: cubin, or ptx for compute_XX)\n"
    "      --name-expr EXPR    a name expression to lower for every file, e.g.\n"
    "                          'tiled_gemm<float, 16>' (repeatable)\n"
    "      --name-expr FILE=EXPR  for FILE alone (FILE as given on this command line)\n"
    "      --from FILE         requests from a JSON list: {\"requests\": [{\"source\": ...,\n"
    "                          \"arch\": [...], \"name_exprs\": [...], \"options\": [...],\n"
    "                          \"kind\": ...}]}; sources relative to FILE's directory\n"
    "      --extra-digest HEX  bytes of anything kcache cannot see that changes the output\n"
    "  -o, --output PATH       write the artifacts: into a directory when PATH is one or\n"
    "                          ends in '/' (made if missing; FILE.ARCH.cubin|ptx|ltoir\n"
    "                          in it), else to the file PATH (one item only)\n"
    "  -j, --jobs N|auto       compile N items at once (default, and auto: one for\n"
    "                          each CPU this process may run on)\n"
    "      --no-cache          compile without looking up or storing\n"
    "      --remote URL        share through Redis (redis://[user:password@]host:port[/db]),\n"
    "                          S3 (s3://bucket/prefix) or HTTP (http(s)://host/path)\n"
    "                          (else KCACHE_REMOTE or remote in kcache.conf)\n"
    "      --refresh           compile even on a hit, and replace the entry\n"
    "      --require-hit       fail what the cache cannot serve, compiling nothing\n"
    "                          (KCACHE_REQUIRE_HIT, require_hit in kcache.conf)\n"
    "      --cache-key         compile nothing: print a key for CI's cache of these\n"
    "                          requests (kcache, NVRTC's build, every request's key)\n"
    "      --json              one JSON document on stdout (see kcache-json(7))\n"
    "  -q, --quiet             no per-item lines (errors and logs still shown)\n"
    "  -h, --help              this text\n"
    "\n"
    "Each row: hit (served from the cache), miss (compiled and stored), uncached\n"
    "(compiled, not stored: the warning says why) or error (with the reason).\n"
    "On a terminal, rows appear as items finish, above a progress line.\n"
    "Options after -- go to NVRTC as they are (e.g. -- -lineinfo --use_fast_math).\n"
    "Exit status: 0 when every item compiled, 1 if any failed, 2 for a usage error.\n";

enum outcome { OUT_HIT, OUT_MISS, OUT_UNCACHED, OUT_ERROR };

static const char *const outcome_names[] = {"hit", "miss", "uncached", "error"};

struct item {
    const struct compile_unit *unit;
    const char *arch;
    char label[160];        /* "saxpy.cu sm_90" for the progress line */
    char planned[4096];     /* the output path foreseen before compiling ("" if none) */
    kcache_result *result;
    int rc;
    char message[4400];     /* why it failed, when the result does not say */
    char output[4096];      /* the output path, once written */
    int evicted;            /* stored, then evicted by the cap before the command ended */
    int printed;
};

struct job {
    kcache_compiler *compiler;
    const struct compile_args *args;
    const char *output;
    int output_is_dir;
    struct item *items;
    size_t n_items;
    size_t next;
    pthread_mutex_t lock;
    size_t next_slot;
    struct live live;
    int stream;             /* print rows as they finish (stdout is a terminal) */
    int file_w, arch_w;     /* column widths, fixed before the first row */
    size_t n_threads;       /* items compiled at once */
};

static const char *ext_of(kcache_kind kind)
{
    const char *name = kcache_kind_name(kind);
    return name ? name : "bin";
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}


/* DIR/STEM.ARCH.EXT for an item; arch and kind as the compile will have them. */
static void dir_output(char *out, size_t size, const char *dir, const char *file, const char *arch,
                       kcache_kind kind)
{
    const char *base = base_name(file);
    size_t stem = strlen(base);
    const char *dot = strrchr(base, '.');
    if (dot && dot != base)
        stem = (size_t)(dot - base);
    snprintf(out, size, "%s/%.*s.%s.%s", dir, (int)stem, base, arch, ext_of(kind));
}

/*
 * The output each item will write, worked out before anything is compiled:
 * the kind follows the architecture as the library decides it (compute_XX
 * gives PTX). "native" is only known after the driver answers; its name is
 * checked again when written.
 */
static void plan_output(const struct job *job, struct item *it)
{
    if (!job->output)
        return;
    if (!job->output_is_dir) {
        snprintf(it->planned, sizeof(it->planned), "%s", job->output);
        return;
    }
    char norm[32];
    if (!strcmp(it->arch, "native") || kcache_arch_normalize(norm, sizeof(norm), it->arch))
        return;
    kcache_kind kind = it->unit->kind;
    if (!kind)
        kind = !strncmp(norm, "compute_", 8) ? KCACHE_KIND_PTX : KCACHE_KIND_CUBIN;
    dir_output(it->planned, sizeof(it->planned), job->output, it->unit->source, norm, kind);
}

/* Two items that would write one file: refused now, not found out later. */
static int check_outputs(struct job *job)
{
    for (size_t i = 0; i < job->n_items; i++)
        plan_output(job, &job->items[i]);
    for (size_t i = 0; i < job->n_items; i++) {
        const struct item *a = &job->items[i];
        for (size_t k = i + 1; a->planned[0] && k < job->n_items; k++) {
            const struct item *b = &job->items[k];
            if (strcmp(a->planned, b->planned) != 0)
                continue;
            if (a->unit == b->unit)
                return cli_usage_error("compile", "%s is given twice for %s", a->unit->source,
                                       a->arch);
            return cli_usage_error("compile", "%s and %s would both write %s: compile them "
                                   "into separate -o directories", a->unit->source,
                                   b->unit->source, a->planned);
        }
    }
    if (job->output && !job->output_is_dir) {
        /* One file: its directory must be there, or the compile is wasted. */
        char *dir = strdup(job->output);
        if (!dir)
            return cli_error("out of memory");
        char *slash = strrchr(dir, '/');
        struct stat st;
        int bad = 0;
        if (slash && slash != dir) {
            *slash = '\0';
            bad = stat(dir, &st) != 0 || !S_ISDIR(st.st_mode);
        }
        if (bad)
            cli_usage_error("compile", "cannot write %s: directory %s does not exist",
                            job->output, dir);
        free(dir);
        if (bad)
            return CLI_USAGE;
    }
    return CLI_OK;
}

static enum outcome outcome_of(const struct item *it)
{
    const kcache_result *r = it->result;
    if (it->rc || !r)
        return OUT_ERROR;
    if (r->hit)
        return OUT_HIT;
    return r->keyed && !r->store_status ? OUT_MISS : OUT_UNCACHED;
}

/* Cached: an entry was served from the cache or stored in it. */
static int cached(const struct item *it)
{
    const kcache_result *r = it->result;
    return r && r->keyed && (r->hit || (!r->store_status && r->data));
}

static const char *reason(const struct item *it)
{
    if (it->message[0])
        return it->message;
    if (it->result && it->result->message[0])
        return it->result->message;
    return kcache_strerror(it->rc);
}

/*
 * NVRTC says only "NVRTC_ERROR_COMPILATION" or "_INVALID_OPTION"; the log says
 * what is wrong. The row gets the log's first error line: the library's
 * message for a compile that failed (with a hint where it has one), else the
 * log's own.
 */
static void log_reason(struct item *it)
{
    const kcache_result *r = it->result;
    const char *log = r ? r->log : NULL;
    if ((it->rc == KCACHE_ECOMPILE || it->rc == KCACHE_EINVAL) && r && r->message[0] &&
        !strstr(r->message, "did not compile (see the log)")) {
        snprintf(it->message, sizeof(it->message), "%s", r->message);
        return;
    }
    for (const char *line = log; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        const char *e = strstr(line, "error");
        if (e && (size_t)(e - line) < n) {
            /* Control bytes from a source's text must not reach the terminal. */
            size_t k = 0;
            for (size_t i = 0; i < n && k + 1 < sizeof(it->message) && k < 300; i++)
                it->message[k++] = (unsigned char)line[i] < 0x20 ? ' ' : line[i];
            it->message[k] = '\0';
            return;
        }
        line = end ? end + 1 : NULL;
    }
}

static void run_item(struct job *job, struct item *it)
{
    kcache_request req;
    compile_args_request(job->args, &req, it->unit, it->arch);
    it->rc = kcache_compiler_compile(&it->result, job->compiler, &req);
    if (it->rc)
        log_reason(it);
    if (it->rc || !it->result)
        return;
    if (!job->output)
        return;
    char path[4096];
    if (job->output_is_dir)
        dir_output(path, sizeof(path), job->output, it->unit->source, it->result->arch,
                   it->result->kind);
    else
        snprintf(path, sizeof(path), "%s", job->output);
    /* "native" resolved only now: it must not land on another item's file. */
    if (!it->planned[0]) {
        pthread_mutex_lock(&job->lock);
        int taken = 0;
        for (size_t i = 0; i < job->n_items; i++)
            taken |= &job->items[i] != it && (!strcmp(job->items[i].planned, path) ||
                                              !strcmp(job->items[i].output, path));
        if (!taken)
            snprintf(it->planned, sizeof(it->planned), "%s", path);
        pthread_mutex_unlock(&job->lock);
        if (taken) {
            snprintf(it->message, sizeof(it->message),
                     "%s is another item's output: not written", path);
            it->rc = KCACHE_EINVAL;
            return;
        }
    }
    if (cli_write_output(path, it->result->data, it->result->size, it->message,
                         sizeof(it->message)) != 0) {
        it->rc = KCACHE_EIO;
        return;
    }
    /* Read by other workers checking a "native" item's name: under the lock. */
    pthread_mutex_lock(&job->lock);
    snprintf(it->output, sizeof(it->output), "%s", path);
    pthread_mutex_unlock(&job->lock);
}

static void print_row(const struct job *job, const struct item *it)
{
    const kcache_result *r = it->result;
    enum outcome o = outcome_of(it);
    char t[64], hex[KCACHE_KEY_HEX_SIZE] = "-";
    /* A failed compile's key names nothing in the cache: not shown. */
    if (r && r->keyed && o != OUT_ERROR)
        kcache_key_hex(hex, &r->key);
    /* No warning says why for a cache that is off: the row does, after the output if any. */
    const char *off =
        o != OUT_ERROR && r && r->store_status == KCACHE_EDISABLED && r->store_message[0]
            ? r->store_message
            : NULL;
    const char *where = o == OUT_ERROR ? reason(it)
                        : it->output[0] ? it->output
                        : r && r->remote_hit ? "cache (from the remote)"
                        : cached(it) ? "cache"
                        : off ? off : "-";
    int off_after = off && where != off;
    printf("%-8s  %-*s  %-*s  %-12.12s  %10s  %s%s%s%s\n", outcome_names[o], job->arch_w,
           r && r->arch && r->arch[0] ? r->arch : it->arch, job->file_w, it->unit->source,
           hex, r ? cli_format_duration(t, sizeof(t), r->elapsed_ns) : "-",
           where, off_after ? " (" : "", off_after ? off : "", off_after ? ")" : "");
}

/* Whether the log says nothing more than the row's reason (its one line, at its end). */
static int log_is_reason(const struct item *it)
{
    const char *log = it->result ? it->result->log : NULL;
    size_t n = log ? strlen(log) : 0;
    while (n && (log[n - 1] == '\n' || log[n - 1] == ' '))
        n--;
    size_t m = strlen(it->message);
    /* The row may say more around it ("NVRTC refused an option: LOG"). */
    return n && outcome_of(it) == OUT_ERROR && m >= n && !strncmp(log, it->message + m - n, n);
}

/*
 * The log and the diagnostics of one item, on stderr, each said once: a
 * failed item's reason is in its row, and on stderr only when no row is
 * printed (-q); a log that is only that reason is not repeated.
 */
static void print_messages(const struct item *it, int row_shown)
{
    const kcache_result *r = it->result;
    if (r && r->log && *r->log && !(row_shown && log_is_reason(it)))
        fprintf(stderr, "%s%s", r->log, r->log[strlen(r->log) - 1] == '\n' ? "" : "\n");
    if (outcome_of(it) == OUT_ERROR && !row_shown)
        cli_error("%s (%s): %s", it->unit->source, it->arch, reason(it));
    else if (r && r->store_status && r->store_status != KCACHE_EDISABLED)
        cli_warn("%s (%s): not cached: %s", it->unit->source, it->arch, r->store_message);
}

static void *worker(void *arg)
{
    struct job *job = arg;
    pthread_mutex_lock(&job->lock);
    size_t slot = job->next_slot++;
    pthread_mutex_unlock(&job->lock);
    for (;;) {
        pthread_mutex_lock(&job->lock);
        size_t i = job->next < job->n_items ? job->next++ : job->n_items;
        if (i < job->n_items)
            live_begin(&job->live, slot, job->items[i].label);
        pthread_mutex_unlock(&job->lock);
        if (i >= job->n_items)
            break;
        struct item *it = &job->items[i];
        run_item(job, it);
        pthread_mutex_lock(&job->lock);
        live_end(&job->live, slot);
        if (job->stream) {
            /* The row above the progress line, as soon as it is known. */
            live_clear(&job->live);
            fflush(stdout);
            print_messages(it, !job->args->quiet);
            if (!job->args->quiet)
                print_row(job, it);
            fflush(stdout);
            it->printed = 1;
        }
        live_redraw(&job->live);
        pthread_mutex_unlock(&job->lock);
    }
    return NULL;
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp(a, b);
}

/*
 * CI's cache key for these requests (--cache-key): kcache's version, NVRTC's
 * build and the key of every request, which covers its source, headers,
 * options and NVRTC, so that it changes exactly when an entry the job needs
 * changes; the request's order does not count. What comes before the last
 * '-' is the prefix to restore an older cache of the same toolchain from.
 */
static int print_cache_key(const struct job *job, int json)
{
    const char *id = kcache_compiler_nvrtc_id(job->compiler);
    const char *build = id ? strstr(id, "build-id ") : NULL;
    char nvrtc[16], prefix[64], hex[KCACHE_KEY_HEX_SIZE];
    snprintf(nvrtc, sizeof(nvrtc), "%.12s", build ? build + 9 : "unknown");
    char (*keys)[KCACHE_KEY_HEX_SIZE] = calloc(job->n_items + 1, sizeof(*keys));
    if (!keys)
        return cli_error("out of memory");
    size_t failed = 0, uncached = 0;
    for (size_t i = 0; i < job->n_items; i++) {
        const struct item *it = &job->items[i];
        if (it->rc || !it->result) {
            print_messages(it, 1);
            print_row(job, it);
            failed++;
        } else if (!it->result->keyed) {
            uncached++;
        } else {
            kcache_key_hex(keys[i], &it->result->key);
        }
    }
    if (failed) {
        free(keys);
        return cli_error("%zu of %zu items could not be keyed: no cache key", failed,
                         job->n_items);
    }
    qsort(keys, job->n_items, sizeof(*keys), cmp_key);
    blake2b_state b;
    unsigned char digest[12];
    blake2b_init(&b, sizeof(digest));
    blake2b_update(&b, (const uint8_t *)"kcache-ci-key-1", 16);
    blake2b_update(&b, (const uint8_t *)(id ? id : ""), id ? strlen(id) + 1 : 1);
    for (size_t i = 0; i < job->n_items; i++)
        blake2b_update(&b, (const uint8_t *)keys[i], sizeof(keys[i]));
    blake2b_final(&b, digest, sizeof(digest));
    free(keys);
    for (size_t i = 0; i < sizeof(digest); i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    snprintf(prefix, sizeof(prefix), "kcache-%s-nvrtc-%s-", kcache_version(), nvrtc);
    if (json) {
        char key[128];
        snprintf(key, sizeof(key), "%s%s", prefix, hex);
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_object_begin(&j, NULL);
        cli_json_string(&j, "cache_key", key);
        cli_json_string(&j, "restore_prefix", prefix);
        cli_json_uint(&j, "keyed", job->n_items - uncached);
        cli_json_uint(&j, "uncached", uncached);
        cli_json_object_end(&j);
        cli_json_finish(&j);
    } else {
        printf("%s%s\n", prefix, hex);
    }
    return CLI_OK;
}

static void print_json(const struct job *job, const size_t counts[4], size_t evicted)
{
    cli_json j;
    cli_json_init(&j, stdout);
    cli_json_object_begin(&j, NULL);
    cli_json_array_begin(&j, "items");
    for (size_t i = 0; i < job->n_items; i++) {
        const struct item *it = &job->items[i];
        const kcache_result *r = it->result;
        enum outcome o = outcome_of(it);
        cli_json_object_begin(&j, NULL);
        cli_json_string(&j, "source", it->unit->source);
        cli_json_string(&j, "arch", r && r->arch && r->arch[0] ? r->arch : it->arch);
        cli_json_string(&j, "status", o == OUT_ERROR ? "error" : "ok");
        cli_json_string(&j, "outcome", outcome_names[o]);
        cli_json_string(&j, "message", o == OUT_ERROR ? reason(it) : r ? r->message : "");
        cli_json_bool(&j, "hit", r && r->hit);
        cli_json_bool(&j, "remote_hit", r && r->remote_hit);
        cli_json_bool(&j, "cached", cached(it));
        cli_json_bool(&j, "evicted", it->evicted);
        if (it->output[0])
            cli_json_string(&j, "output", it->output);
        else
            cli_json_null(&j, "output");
        if (r) {
            char hex[KCACHE_KEY_HEX_SIZE];
            kcache_key_hex(hex, &r->key);
            const char *kind = kcache_kind_name(r->kind);
            cli_json_string(&j, "kind", kind ? kind : "");
            if (r->keyed)
                cli_json_string(&j, "key", hex);
            else
                cli_json_null(&j, "key");
            cli_json_uint(&j, "size", r->size);
            cli_json_double(&j, "elapsed_ms", (double)r->elapsed_ns / 1e6);
            cli_json_double(&j, "compile_ms", (double)r->compile_ns / 1e6);
            cli_json_string(&j, "store_message", r->store_message);
            cli_json_string(&j, "log", r->log);
            cli_json_pairs(&j, "lowered_names", "name_expr", r->name_exprs, "lowered",
                           r->lowered_names, r->n_names);
        }
        cli_json_object_end(&j);
    }
    cli_json_array_end(&j);
    cli_json_uint(&j, "hits", counts[OUT_HIT]);
    cli_json_uint(&j, "misses", counts[OUT_MISS]);
    cli_json_uint(&j, "uncached", counts[OUT_UNCACHED]);
    cli_json_uint(&j, "errors", counts[OUT_ERROR]);
    cli_json_uint(&j, "evicted", evicted);
    cli_json_uint(&j, "jobs", job->n_threads);
    cli_json_object_end(&j);
    cli_json_finish(&j);
}

/* One counter's row, not the whole of stats: this runs twice on every hit. */
static uint64_t evictions_now(kcache_store *store)
{
    uint64_t n = 0;
    if (store && kcache_store_counter(&n, store, "evictions") != 0)
        n = 0;
    return n;
}

/*
 * Whether the cap took back what this command stored: a cache too small for
 * one build evicts its own entries, and CI would warm nothing without a word.
 */
static size_t mark_evicted(struct job *job, kcache_store *store)
{
    size_t n = 0;
    for (size_t i = 0; i < job->n_items; i++) {
        struct item *it = &job->items[i];
        if (!it->result || it->result->hit || !cached(it))
            continue;
        kcache_entry *e = NULL;
        if (kcache_store_get(&e, store, &it->result->key,
                             KCACHE_GET_NO_TOUCH | KCACHE_GET_NO_DATA) == KCACHE_ENOTFOUND) {
            it->evicted = 1;
            n++;
        }
        kcache_entry_free(e);
    }
    return n;
}

static int build_items(struct job *job, const struct compile_args *a)
{
    for (size_t u = 0; u < a->n_units; u++)
        job->n_items += a->units[u].n_archs;
    job->items = calloc(job->n_items ? job->n_items : 1, sizeof(*job->items));
    if (!job->items)
        return cli_error("out of memory");
    size_t n = 0;
    job->file_w = 4;
    job->arch_w = 5;
    for (size_t u = 0; u < a->n_units; u++) {
        const struct compile_unit *unit = &a->units[u];
        job->file_w = KC_CLI_MAX(job->file_w, (int)strlen(unit->source));
        for (size_t k = 0; k < unit->n_archs; k++) {
            struct item *it = &job->items[n++];
            char norm[32];
            it->unit = unit;
            it->arch = unit->archs[k];
            /* The row shows the normalised architecture ("90" -> sm_90). */
            int w = kcache_arch_normalize(norm, sizeof(norm), it->arch) == 0
                        ? (int)strlen(norm) : KC_CLI_MAX((int)strlen(it->arch), 8);
            job->arch_w = KC_CLI_MAX(job->arch_w, w);
            snprintf(it->label, sizeof(it->label), "%s %s", base_name(unit->source), it->arch);
        }
    }
    return CLI_OK;
}

/* Compiles every item of job on up to jobs threads, this one among them. */
static void run_workers(struct job *job, size_t jobs)
{
    pthread_mutex_init(&job->lock, NULL);
    size_t n_threads = jobs < job->n_items ? jobs : job->n_items;
    job->n_threads = n_threads ? n_threads : 1;
    pthread_t *threads = calloc(n_threads ? n_threads : 1, sizeof(*threads));
    size_t started = 0;
    /* --cache-key's compiler has no store, so it did not learn which variables
     * NVRTC reads when it was made: the first request learns it, by a probe that
     * forks (compile/nvenv.c) and is safe only while this process has one
     * thread. So that request is keyed before the workers start. */
    if (job->args->cache_key && n_threads > 1)
        run_item(job, &job->items[job->next++]);
    for (size_t t = 1; threads && t < n_threads; t++)
        if (pthread_create(&threads[started], NULL, worker, job) == 0)
            started++;
    worker(job);
    for (size_t t = 0; t < started; t++)
        pthread_join(threads[t], NULL);
    free(threads);
    pthread_mutex_destroy(&job->lock);
}

int cmd_compile(int argc, char **argv)
{
    struct compile_args a;
    int status = compile_args_parse(&a, "compile", usage_text, argc, argv);
    if (status < 0 && a.cache_key && a.output)
        status = cli_usage_error("compile", "--cache-key compiles nothing: -o has nothing to "
                                 "write");
    if (status >= 0) {
        compile_args_free(&a);
        return status;
    }
    struct job job;
    memset(&job, 0, sizeof(job));
    job.args = &a;
    job.output = a.output;
    kcache_compiler *compiler = NULL;
    if ((status = build_items(&job, &a)) != CLI_OK)
        goto out;
    /*
     * One rule for -o: a directory is one that exists or a name ending in '/'
     * (made if missing); anything else is a file, which only one item can
     * write. A name that is neither is refused for several items rather than
     * guessed at: "-o single.cubin" becoming a directory surprises.
     */
    char output_dir[4096];
    if (job.output) {
        struct stat st;
        size_t n = strlen(job.output);
        int slash = n > 0 && job.output[n - 1] == '/';
        job.output_is_dir = slash || (stat(job.output, &st) == 0 && S_ISDIR(st.st_mode));
        if (!job.output_is_dir && job.n_items > 1) {
            status = cli_usage_error("compile", "-o %s: %zu items need a directory: an existing "
                                     "one, or '%s/' to make it", job.output, job.n_items,
                                     job.output);
            goto out;
        }
        while (slash && n > 1 && job.output[n - 1] == '/')
            n--;
        snprintf(output_dir, sizeof(output_dir), "%.*s", (int)n, job.output);
        if (job.output_is_dir)
            job.output = output_dir;
    }
    if ((status = check_outputs(&job)) != CLI_OK)
        goto out;
    if (job.output_is_dir && mkdir(job.output, 0777) != 0 && errno != EEXIST) {
        status = cli_usage_error("compile", "cannot make directory %s: %s", job.output,
                                 strerror(errno));
        goto out;
    }
    if ((status = compile_args_compiler(&a, &compiler)) != CLI_OK)
        goto out;
    job.compiler = compiler;
    kcache_store *store = kcache_compiler_store(compiler);
    uint64_t evictions = evictions_now(store);
    /* A terminal sees each result as it comes; a pipe gets them in the order given. */
    job.stream = !a.json && isatty(STDOUT_FILENO);
    live_init(&job.live, job.n_items, !a.json && job.n_items > 1);
    run_workers(&job, (size_t)a.jobs);
    live_finish(&job.live);
    if (a.cache_key) {
        status = print_cache_key(&job, a.json);
        goto out;
    }

    size_t counts[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < job.n_items; i++)
        counts[outcome_of(&job.items[i])]++;
    size_t evicted = store && evictions_now(store) != evictions ? mark_evicted(&job, store) : 0;
    for (size_t i = 0; !a.json && i < job.n_items; i++)
        if (!job.items[i].printed)
            print_messages(&job.items[i], !a.quiet);
    if (a.json) {
        print_json(&job, counts, evicted);
    } else if (!a.quiet) {
        for (size_t i = 0; i < job.n_items; i++)
            if (!job.items[i].printed)
                print_row(&job, &job.items[i]);
    }
    if (evicted) {
        char cap[32], n[48];
        cli_warn("the cap (%s) evicted %zu of the %s this command stored: raise it (e.g. "
                 "'kcache config max_size 8G', or 0 for none)",
                 cli_format_cap(cap, sizeof(cap), kcache_store_max_size(store)), evicted,
                 cli_plural(n, sizeof(n), counts[OUT_MISS], "entry", "entries"));
    }
    /* Scripts that read only stderr still learn that something failed, without the
     * reason a second time. */
    if (counts[OUT_ERROR] && !a.quiet && !a.json)
        cli_error("%zu of %zu %s failed: the reason is in %s row", counts[OUT_ERROR],
                  job.n_items, job.n_items == 1 ? "item" : "items",
                  counts[OUT_ERROR] == 1 ? "its" : "each one's");
    status = counts[OUT_ERROR] ? CLI_FAIL : CLI_OK;
out:
    for (size_t i = 0; job.items && i < job.n_items; i++)
        kcache_result_free(job.items[i].result);
    free(job.items);
    kcache_compiler_free(compiler);
    compile_args_free(&a);
    return status;
}
