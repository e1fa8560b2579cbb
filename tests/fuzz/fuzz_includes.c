/*
 * Fuzz target: the include scanner and resolver on source text kcache did
 * not write. The scanner must never read out of bounds, every directive it
 * returns must be a NUL-terminated string, and resolving must end (cycles,
 * computed includes that name themselves) without error other than ENOMEM,
 * on a tree of real headers the input may name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "resolve/deps.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char root[64];
static const char *const made[] = {"loop1.h", "loop2.h", "sub/c.h", "a.h", "b.h", "sub", ""};

/* The tree is this process's own: it goes when the process does. */
static void remove_tree(void)
{
    char p[256];
    for (size_t i = 0; i < sizeof(made) / sizeof(made[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", root, made[i]);
        if (remove(p) != 0 && i + 1 == sizeof(made) / sizeof(made[0]))
            rmdir(root);
    }
}

static void setup(void)
{
    if (root[0])
        return;
    snprintf(root, sizeof(root), "/tmp/kcache-fuzz-inc-%ld", (long)getpid());
    atexit(remove_tree);
    char p[256];
    mkdir(root, 0700);
    snprintf(p, sizeof(p), "%s/sub", root);
    mkdir(p, 0700);
    static const struct {
        const char *name, *text;
    } files[] = {
        {"a.h", "#include \"b.h\"\n#define NEXT \"sub/c.h\"\n#include NEXT\n"},
        {"b.h", "#pragma once\n#include <a.h>\n#if __has_include(<nope.h>)\n#endif\n"},
        {"sub/c.h", "#include \"../a.h\"\n#include \"c.h\"\n#define SELF SELF\n#include SELF\n"},
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", root, files[i].name);
        FILE *f = fopen(p, "w");
        if (f) {
            fputs(files[i].text, f);
            fclose(f);
        }
    }
    /* A loop of symlinks where a header might be looked for. */
    snprintf(p, sizeof(p), "%s/loop1.h", root);
    char q[256];
    snprintf(q, sizeof(q), "%s/loop2.h", root);
    symlink(q, p);
    symlink(p, q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    kc_directive *d;
    size_t n;
    if (kc_scan(&d, &n, (const char *)data, size) == 0) {
        for (size_t i = 0; i < n; i++) {
            if (d[i].kind < KC_DIR_INCLUDE || d[i].kind > KC_DIR_CONDITION)
                abort();
            /* An uncertain construct's text says what it is; every other is from the input. */
            if (!d[i].text || (d[i].kind != KC_DIR_UNCERTAIN && strlen(d[i].text) > size))
                abort();
            /* A spelling said to sit at `at` is there, delimited, to be rewritten in place. */
            size_t len = strlen(d[i].text);
            if (d[i].exact && (d[i].at == 0 || d[i].at + len >= size ||
                               memcmp(data + d[i].at, d[i].text, len) != 0))
                abort();
        }
        kc_directives_free(d, n);
    }
    const char *dirs[] = {root};
    const char *defines[] = {"PICK=\"a.h\"", "LOOP=LOOP"};
    kc_deps_request req = {.source = (const char *)data, .source_size = size,
                           .source_dir = root, .include_dirs = dirs, .n_include_dirs = 1,
                           .defines = defines, .n_defines = 2};
    kc_deps deps;
    char msg[256];
    int rc = kc_deps_resolve(&deps, &req, msg, sizeof(msg));
    if (rc == 0) {
        for (size_t i = 1; i < deps.n_deps; i++)
            if (strcmp(deps.deps[i - 1].name, deps.deps[i].name) > 0)
                abort(); /* sorted, so the key does not depend on discovery order */
        kc_deps_free(&deps);
    } else if (rc != KCACHE_ENOMEM && rc != KCACHE_EIO) {
        abort();
    }
    return 0;
}
