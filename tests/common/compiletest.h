/*
 * Helpers shared by the compile tests: a compiler over a store (or none),
 * with the default toolkit or one the test made; a program's first compile
 * in a process of its own, and what it left (a counter, its output).
 */
#ifndef KC_COMPILETEST_H
#define KC_COMPILETEST_H

#include <kcache/compile.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda/toolkit.h"
#include "testutil.h"

/* A compiler on s (NULL: no store), with the toolkit at root (NULL: the one found). */
static inline kcache_compiler *ct_compiler(kcache_store *s, const char *root)
{
    kcache_compiler_options o = KCACHE_COMPILER_OPTIONS_INIT;
    o.store = s;
    o.no_store = s == NULL;
    o.toolkit_root = root;
    kcache_compiler *c = NULL;
    char err[512];
    if (kcache_compiler_new(&c, &o, err, sizeof(err)) != 0)
        fprintf(stderr, "compiler (toolkit %s): %s\n", root ? root : "found", err);
    REQUIRE(c);
    return c;
}

/*
 * The toolkit found and its NVRTC: 0 with *tk (the caller frees it) and
 * *api, or 1, said on stderr, where there is none (the test skips).
 */
static inline int ct_nvrtc_find(kc_toolkit *tk, const kc_nvrtc **api)
{
    char msg[512];
    if (kc_toolkit_find(tk, NULL, msg, sizeof(msg)) != 0 ||
        kc_nvrtc_get(tk, api, msg, sizeof(msg)) != 0) {
        fprintf(stderr, "skipped: %s\n", msg);
        return 1;
    }
    return 0;
}

/* 1, said on stderr, where no toolkit with an NVRTC is found (the test skips), else 0. */
static inline int ct_no_nvrtc(void)
{
    kc_toolkit tk;
    const kc_nvrtc *api;
    if (ct_nvrtc_find(&tk, &api))
        return 1;
    kc_toolkit_free(&tk);
    return 0;
}

/* The store at db, opened (NULL, said on stderr, when it cannot be). */
static inline kcache_store *ct_store_open(const char *db)
{
    kcache_store_options so = KCACHE_STORE_OPTIONS_INIT;
    so.path = db;
    kcache_store *s = NULL;
    char err[512];
    if (kcache_store_open(&s, &so, err, sizeof(err)) != 0)
        fprintf(stderr, "%s: %s\n", db, err);
    return s;
}

/* What one process saw of its compile (ct_compile_in_child()'s exit status). */
enum { CT_HIT = 1, CT_BY_CLOSURE = 2, CT_FAILED = 4 };

/* A request for name on arch, output kind, with options (the caller sets its source). */
static inline kcache_request ct_request(const char *name, const char *arch, kcache_kind kind,
                                        const char *const *options, size_t n_options)
{
    kcache_request r = KCACHE_REQUEST_INIT;
    r.source_name = name;
    r.arch = arch;
    r.output = kind;
    r.options = options;
    r.n_options = n_options;
    return r;
}

/*
 * Compiles source to PTX for compute_90 with options on the cache at db in a
 * new process, as a program's first compile, the program named name (NULL:
 * its file's name): with key_first, the process first asks for the key as a
 * hit finds it (KCACHE_COMPILE_KEY_REMEMBERED: from a kept closure it comes
 * without key material, from a resolution with it). The PTX goes to out.
 * Returns what it saw (CT_*); says the compile's time as `what`, when given.
 */
static inline int ct_compile_named_in_child(const char *db, const char *source, const char *name,
                                            const char *const *options, size_t n_options,
                                            int key_first, const char *out, const char *what)
{
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        kcache_store *s = ct_store_open(db);
        if (!s)
            _exit(CT_FAILED);
        kcache_compiler *c = ct_compiler(s, NULL);
        kcache_request r = ct_request(name, "compute_90", KCACHE_KIND_PTX, options, n_options);
        r.source_path = source;
        int seen = 0;
        kcache_result *res = NULL;
        if (key_first) {
            r.flags = KCACHE_COMPILE_KEY_ONLY | KCACHE_COMPILE_KEY_REMEMBERED;
            if (kcache_compiler_compile(&res, c, &r) != 0)
                seen |= CT_FAILED;
            else if (res->key_material_size == 0)
                seen |= CT_BY_CLOSURE;
            kcache_result_free(res);
            r.flags = 0;
        }
        if (kcache_compiler_compile(&res, c, &r) != 0 || !res->keyed) {
            fprintf(stderr, "%s: %s\n", source, res ? res->message : "no result");
            seen |= CT_FAILED;
        } else {
            test_spit(out, res->data, res->size);
            seen |= res->hit ? CT_HIT : 0;
            if (what)
                fprintf(stderr, "%s: %s in %.3f ms%s\n", what, res->hit ? "hit" : "miss",
                        (double)res->elapsed_ns / 1e6,
                        seen & CT_BY_CLOSURE ? ", by the closure" : "");
        }
        kcache_result_free(res);
        kcache_compiler_free(c);
        kcache_store_close(s);
        _exit(seen);
    }
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid && WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* ct_compile_named_in_child() with the program named by its file's name. */
static inline int ct_compile_in_child(const char *db, const char *source,
                                      const char *const *options, size_t n_options, int key_first,
                                      const char *out, const char *what)
{
    return ct_compile_named_in_child(db, source, NULL, options, n_options, key_first, out, what);
}

/* The counter called name of the store at db (0 when it has none). */
static inline uint64_t ct_counter(const char *db, const char *name)
{
    kcache_store *s = ct_store_open(db);
    REQUIRE(s);
    uint64_t v = 0;
    if (kcache_store_counter(&v, s, name) != 0)
        v = 0;
    kcache_store_close(s);
    return v;
}

/* 1 if the file at path holds the text what, else 0. */
static inline int ct_file_says(const char *path, const char *what)
{
    size_t n = 0;
    uint8_t *data = test_slurp(path, &n);
    int says = data && memmem(data, n, what, strlen(what)) != NULL;
    free(data);
    return says;
}

#endif
