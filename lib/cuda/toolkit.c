/* The CUDA toolkit: where it is, its builds, NVRTC and nvJitLink loaded (toolkit.h). */
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/codec.h"
#include "cuda/buildid.h"
#include "cuda/toolkit.h"


static char *find_lib(const char *root, const char *name)
{
    static const char *const dirs[] = {"lib64", "lib", "targets/x86_64-linux/lib",
                                       "targets/sbsa-linux/lib"};
    char path[PATH_MAX];
    struct stat st;
    for (size_t i = 0; i < KC_ARRAY_SIZE(dirs); i++) {
        snprintf(path, sizeof(path), "%s/%s/%s", root, dirs[i], name);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
            return realpath(path, NULL);
    }
    return NULL;
}

/* The value in one line if it is "#define NAME value" (blanks around each), into out. */
static int define_in_line(char *out, size_t size, const char *l, size_t n, const char *name)
{
    const char *end = l + n, *p = l;
    size_t len = strlen(name);
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if ((size_t)(end - p) < 7 || memcmp(p, "#define", 7) != 0)
        return 0;
    p += 7;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if ((size_t)(end - p) <= len || memcmp(p, name, len) != 0 || (p[len] != ' ' && p[len] != '\t'))
        return 0;
    p += len;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    size_t v = 0;
    while (p + v < end && p[v] != ' ' && p[v] != '\t' && p[v] != '\r')
        v++;
    snprintf(out, size, "%.*s", (int)v, p);
    return 1;
}

/*
 * The value of the first "#define NAME value" line of a file, or "" (at most
 * size - 1 bytes). Read in blocks and split at newlines, not line by line
 * through stdio: cuda.h defines CUDA_VERSION 263 lines in, and fgets() made
 * this most of a CLI hit's toolkit lookup. A line longer than a block is
 * stepped over.
 */
static void define_value(char *out, size_t size, const char *path, const char *name)
{
    out[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[16384];
    size_t have = 0;
    int eof = 0, overlong = 0;
    while (!eof) {
        ssize_t k = read(fd, buf + have, sizeof(buf) - have);
        eof = k <= 0;
        have += k > 0 ? (size_t)k : 0;
        size_t start = 0;
        for (;;) {
            const char *nl = memchr(buf + start, '\n', have - start);
            if (!nl && !eof)
                break; /* the rest of this line comes with the next read */
            size_t end = nl ? (size_t)(nl - buf) : have;
            if (!overlong && define_in_line(out, size, buf + start, end - start, name)) {
                close(fd);
                return;
            }
            overlong = 0;
            start = nl ? end + 1 : have;
            if (!nl)
                break;
        }
        memmove(buf, buf + start, have - start);
        have -= start;
        if (have == sizeof(buf)) {
            overlong = 1; /* no newline in a whole block: not a line worth reading */
            have = 0;
        }
    }
    close(fd);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * The headers' identity, short enough to sit in every entry's key material:
 * CUDA_VERSION and CCCL_VERSION name the release, and a digest of
 * version.json (runfile installs) or of the dist-info folder names
 * (pip-style installs, one per component and patch level) names the patch
 * level of every component.
 */
static char *toolkit_identity(const char *root)
{
    char path[PATH_MAX], cuda[32], cccl[32];
    snprintf(path, sizeof(path), "%s/include/cuda.h", root);
    define_value(cuda, sizeof(cuda), path, "CUDA_VERSION");
    snprintf(path, sizeof(path), "%s/include/cccl/cuda/std/__cccl/version.h", root);
    define_value(cccl, sizeof(cccl), path, "CCCL_VERSION");
    kc_buf b = {0};
    snprintf(path, sizeof(path), "%s/version.json", root);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char chunk[4096];
        ssize_t k;
        while ((k = read(fd, chunk, sizeof(chunk))) > 0 && b.size < (1u << 20))
            kc_buf_append(&b, chunk, (size_t)k);
        close(fd);
    }
    snprintf(path, sizeof(path), "%s/dist-info", root);
    DIR *d = opendir(path);
    if (d) {
        char *names[256];
        size_t n = 0;
        for (struct dirent *de; (de = readdir(d)) && n < KC_ARRAY_SIZE(names);)
            if (de->d_name[0] != '.' && (names[n] = kc_strdup(de->d_name)))
                n++;
        closedir(d);
        qsort(names, n, sizeof(*names), cmp_str);
        for (size_t i = 0; i < n; i++) {
            kc_buf_append(&b, names[i], strlen(names[i]) + 1);
            free(names[i]);
        }
    }
    char parts[40] = "none";
    if (b.size) {
        uint8_t dg[KC_DIGEST_SIZE];
        kc_digest(dg, b.data, b.size);
        for (int i = 0; i < 16; i++)
            snprintf(parts + 2 * i, 3, "%02x", dg[i]);
    }
    kc_buf_free(&b);
    char text[160];
    snprintf(text, sizeof(text), "cuda %s, cccl %s, components %s", cuda[0] ? cuda : "?",
             cccl[0] ? cccl : "?", parts);
    return kc_strdup(text);
}

int kc_toolkit_id_unknown(const char *id)
{
    size_t n = strlen(id), u = strlen(" build-id unknown");
    return !id[0] || (n >= u && !strcmp(id + n - u, " build-id unknown"));
}

/* The file's name and GNU build-id: exact to the build, read without loading it. */
static void nvrtc_identity(kc_toolkit *tk)
{
    char id[80];
    if (kc_elf_build_id(tk->nvrtc_path, id, sizeof(id)) != 0)
        snprintf(id, sizeof(id), "unknown");
    const char *base = strrchr(tk->nvrtc_path, '/');
    snprintf(tk->nvrtc_id, sizeof(tk->nvrtc_id), "%s build-id %s", base ? base + 1 : "", id);
}

int kc_toolkit_use_nvrtc(kc_toolkit *tk, const char *path, char *msg, size_t msg_size)
{
    char *real = realpath(path, NULL);
    if (!real)
        return kc_fmt(msg, msg_size, KCACHE_ENOTSUP, "no NVRTC library at %s: %s", path,
                      strerror(errno));
    free(tk->nvrtc_path);
    tk->nvrtc_path = real;
    nvrtc_identity(tk);
    return 0;
}

/*
 * pip's CUDA (nvidia/cuN with lib/libnvrtc.so.N and include/, as PyTorch's
 * and cuda-python's wheels install it) in the active Python environment,
 * $VIRTUAL_ENV else $CONDA_PREFIX, under lib/pythonX.Y/site-packages: where
 * cuda.pathfinder finds it. Returns its real path (to free) or NULL.
 */
static char *pip_cuda_root(void)
{
    static const char *const envs[] = {"VIRTUAL_ENV", "CONDA_PREFIX"};
    for (size_t i = 0; i < sizeof(envs) / sizeof(envs[0]); i++) {
        const char *prefix = getenv(envs[i]);
        char lib[PATH_MAX], cand[PATH_MAX], probe[PATH_MAX + 32];
        if (!prefix || !*prefix || snprintf(lib, sizeof(lib), "%s/lib", prefix) >= (int)sizeof(lib))
            continue;
        DIR *d = opendir(lib);
        struct dirent *e;
        char *found = NULL;
        while (d && !found && (e = readdir(d))) {
            struct stat st;
            if (strncmp(e->d_name, "python", 6) ||
                snprintf(cand, sizeof(cand), "%s/%s/site-packages/nvidia/cu%d", lib, e->d_name,
                         KC_CUDA_MAJOR) >= (int)sizeof(cand))
                continue;
            snprintf(probe, sizeof(probe), "%s/include", cand);
            if (stat(probe, &st) != 0 || !S_ISDIR(st.st_mode))
                continue;
            snprintf(probe, sizeof(probe), "%s/lib/libnvrtc.so.%d", cand, KC_CUDA_MAJOR);
            if (stat(probe, &st) == 0)
                found = realpath(cand, NULL);
        }
        if (d)
            closedir(d);
        if (found)
            return found;
    }
    return NULL;
}

int kc_toolkit_find(kc_toolkit *tk, const char *explicit_root, char *msg, size_t msg_size)
{
    memset(tk, 0, sizeof(*tk));
    const char *root = explicit_root;
    if (!root || !*root)
        root = getenv("CUDA_HOME");
    if (!root || !*root)
        root = getenv("CUDA_PATH");
    if (!root || !*root)
        root = KC_TOOLKIT_DIR;
    tk->root = realpath(root, NULL);
    /* None there, none given by the caller: pip's, where a Python user has it. */
    if (!tk->root && !(explicit_root && *explicit_root) && (tk->root = pip_cuda_root()))
        root = tk->root;
    if (!tk->root && explicit_root && *explicit_root)
        return kc_fmt(msg, msg_size, KCACHE_ENOTSUP,
                      "no CUDA toolkit at %s: set CUDA_HOME to the toolkit's directory", root);
    if (!tk->root)
        return kc_fmt(msg, msg_size, KCACHE_ENOTSUP,
                      "no CUDA toolkit at %s: set CUDA_HOME to the toolkit's directory, or "
                      "activate a Python environment with pip's nvidia-cuda-nvrtc "
                      "(nvidia/cu%d)",
                      root, KC_CUDA_MAJOR);
    char name[64];
    snprintf(name, sizeof(name), "libnvrtc.so.%d", KC_CUDA_MAJOR);
    tk->nvrtc_path = find_lib(tk->root, name);
    snprintf(name, sizeof(name), "libnvJitLink.so.%d", KC_CUDA_MAJOR);
    tk->nvjitlink_path = find_lib(tk->root, name);
    if (!tk->nvrtc_path) {
        int rc = kc_fmt(msg, msg_size, KCACHE_ENOTSUP,
                        "no libnvrtc.so.%d under %s: set CUDA_HOME to a CUDA %d toolkit",
                        KC_CUDA_MAJOR, tk->root, KC_CUDA_MAJOR);
        kc_toolkit_free(tk);
        return rc;
    }
    char id[80];
    nvrtc_identity(tk);
    const char *base;
    if (tk->nvjitlink_path) {
        if (kc_elf_build_id(tk->nvjitlink_path, id, sizeof(id)) != 0)
            snprintf(id, sizeof(id), "unknown");
        base = strrchr(tk->nvjitlink_path, '/');
        snprintf(tk->nvjitlink_id, sizeof(tk->nvjitlink_id), "%s build-id %s",
                 base ? base + 1 : "", id);
    }
    tk->identity = toolkit_identity(tk->root);
    if (!tk->identity) {
        kc_toolkit_free(tk);
        return kc_fmt(msg, msg_size, KCACHE_ENOMEM, "out of memory");
    }
    return 0;
}

void kc_toolkit_free(kc_toolkit *tk)
{
    free(tk->root);
    free(tk->nvrtc_path);
    free(tk->nvjitlink_path);
    free(tk->identity);
    memset(tk, 0, sizeof(*tk));
}

/*
 * One loaded copy per process and per library file. dlopen is thread-safe;
 * the lock only keeps the table of loaded copies consistent.
 */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

struct loaded {
    char path[PATH_MAX];
    void *api;
    char build_id[80]; /* of the copy loaded, from its notes in memory; "" if none */
};
static struct loaded loaded_nvrtc, loaded_nvjitlink;
static void (*nvrtc_load_hook)(void *handle);

void kc_toolkit_on_nvrtc_load(void (*fn)(void *handle))
{
    pthread_mutex_lock(&load_lock);
    nvrtc_load_hook = fn;
    pthread_mutex_unlock(&load_lock);
}

/* Tables of a library loaded before another file of it: kept for their users. */
struct retired {
    struct retired *next;
    void *api;
};
static struct retired *retired_tables;

/* One entry point of a table: where its pointer goes, and its symbol. */
struct entry_point {
    size_t offset;
    const char *symbol;
};

#define KC_EP(type, field, symbol) {offsetof(type, field), symbol}

#define KC_NVRTC_POINT(Name) KC_EP(kc_nvrtc, Name, "nvrtc" #Name),
static const struct entry_point nvrtc_points[] = {KC_NVRTC_POINTS(KC_NVRTC_POINT)};

#define KC_NVJITLINK_POINT(Name) KC_EP(kc_nvjitlink, Name, "__nvJitLink" #Name "_13_0"),
static const struct entry_point nvjitlink_points[] = {KC_NVJITLINK_POINTS(KC_NVJITLINK_POINT)};

static int nvrtc_usable(void *table, void *h)
{
    kc_nvrtc *api = table;
    (void)h;
    return api->Version(&api->major, &api->minor) == NVRTC_SUCCESS;
}

static int nvjitlink_usable(void *table, void *h)
{
    kc_nvjitlink *api = table;
    nvJitLinkResult (*version)(unsigned *, unsigned *);
    void *pv = dlsym(h, "nvJitLinkVersion");
    memcpy(&version, &pv, sizeof(pv));
    return pv && version(&api->major, &api->minor) == NVJITLINK_SUCCESS;
}

struct library {
    struct loaded *loaded;
    const char *what; /* "NVRTC" */
    size_t size;      /* of its table */
    const struct entry_point *points;
    size_t n_points;
    int (*usable)(void *table, void *h);
};

static int has_interp(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    for (size_t i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_INTERP)
            *(int *)data = 1;
    return 1; /* the first object is the program: enough */
}

/*
 * A program linked with -static has no dynamic loader (no PT_INTERP), and
 * glibc's static dlopen brings a second C library along with NVRTC: it
 * crashes inside NVRTC on the first miss. Refused with a message instead;
 * linking libkcache.a into a dynamically linked program is fine. Called
 * under load_lock.
 */
static int static_program(char *msg, size_t msg_size, const char *what)
{
    static int checked, is_static;
    if (!checked) {
        int interp = 0;
        dl_iterate_phdr(has_interp, &interp);
        is_static = !interp;
        checked = 1;
    }
    if (!is_static)
        return 0;
    return kc_fmt(msg, msg_size, KCACHE_ENOTSUP,
                  "this program is linked statically (-static), and glibc cannot load %s into "
                  "it: link the program dynamically (linking libkcache.a is fine)", what);
}


/*
 * The table of entry points of the library at path: loaded once per process
 * and per file, and kept (the handle stays open, like any NVRTC user's).
 */
static int load(const struct library *lib, const char *path, void **out, char *msg,
                size_t msg_size)
{
    int rc = 0;
    pthread_mutex_lock(&load_lock);
    if (lib->loaded->api && strcmp(lib->loaded->path, path) == 0) {
        *out = lib->loaded->api;
        goto out;
    }
    if ((rc = static_program(msg, msg_size, lib->what)))
        goto out;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        rc = kc_fmt(msg, msg_size, KCACHE_ENOTSUP, "cannot load %s (%s): %s", lib->what, path,
                    dlerror());
        goto out;
    }
    uint8_t *table = kc_calloc(1, lib->size);
    if (!table) {
        rc = kc_fmt(msg, msg_size, KCACHE_ENOMEM, "out of memory");
        goto out;
    }
    int missing = 0;
    for (size_t i = 0; i < lib->n_points; i++) {
        void *p = dlsym(h, lib->points[i].symbol);
        missing |= !p;
        memcpy(table + lib->points[i].offset, &p, sizeof(p));
    }
    if (missing || !lib->usable(table, h)) {
        free(table);
        rc = kc_fmt(msg, msg_size, KCACHE_ENOTSUP, "%s is not a usable %s", path, lib->what);
        goto out;
    }
    if (lib->loaded->api) {
        /* Another file of the library: compilers may still use the old table. */
        struct retired *old = kc_malloc(sizeof(*old));
        if (old) {
            *old = (struct retired){retired_tables, lib->loaded->api};
            retired_tables = old;
        }
    }
    snprintf(lib->loaded->path, sizeof(lib->loaded->path), "%s", path);
    lib->loaded->api = table;
    kc_elf_loaded_build_id(h, lib->loaded->build_id, sizeof(lib->loaded->build_id));
    if (lib->loaded == &loaded_nvrtc && nvrtc_load_hook)
        nvrtc_load_hook(h); /* before its first compile */
    *out = table;
out:
    pthread_mutex_unlock(&load_lock);
    return rc;
}

int kc_nvrtc_get(const kc_toolkit *tk, const kc_nvrtc **out, char *msg, size_t msg_size)
{
    static const struct library nvrtc = {&loaded_nvrtc, "NVRTC", sizeof(kc_nvrtc),
                                         nvrtc_points, KC_ARRAY_SIZE(nvrtc_points),
                                         nvrtc_usable};
    void *api = NULL;
    int rc = load(&nvrtc, tk->nvrtc_path, &api, msg, msg_size);
    *out = api;
    return rc;
}

static int loaded_is(const struct loaded *l, const char *path, const char *id)
{
    const char *named = strstr(id, " build-id ");
    pthread_mutex_lock(&load_lock);
    int same = named && path && l->api && !strcmp(l->path, path) && l->build_id[0] &&
               !strcmp(named + strlen(" build-id "), l->build_id);
    pthread_mutex_unlock(&load_lock);
    return same;
}

int kc_nvrtc_loaded_is_keyed(const kc_toolkit *tk)
{
    return loaded_is(&loaded_nvrtc, tk->nvrtc_path, tk->nvrtc_id);
}

int kc_nvjitlink_loaded_is_keyed(const kc_toolkit *tk)
{
    return loaded_is(&loaded_nvjitlink, tk->nvjitlink_path, tk->nvjitlink_id);
}

int kc_nvjitlink_get(const kc_toolkit *tk, const kc_nvjitlink **out, char *msg, size_t msg_size)
{
    static const struct library nvjitlink = {&loaded_nvjitlink, "nvJitLink", sizeof(kc_nvjitlink),
                                             nvjitlink_points, KC_ARRAY_SIZE(nvjitlink_points),
                                             nvjitlink_usable};
    if (!tk->nvjitlink_path)
        return kc_fmt(msg, msg_size, KCACHE_ENOTSUP,
                      "no libnvJitLink.so.%d under %s: linking needs nvJitLink", KC_CUDA_MAJOR,
                      tk->root);
    void *api = NULL;
    int rc = load(&nvjitlink, tk->nvjitlink_path, &api, msg, msg_size);
    *out = api;
    return rc;
}

/* Any NVRTC this process loaded: a second library's compiles are judged alike. */
static atomic_int restrict_kept;

int kc_nvrtc_opts_restrict(size_t n, const char *const *opts)
{
    for (size_t i = 0; i < n; i++) {
        /* NVRTC strips white space around an option: " --restrict " asks too. */
        const char *o = opts[i];
        if (!o)
            continue;
        while (isspace((unsigned char)*o))
            o++;
        size_t len = strlen(o);
        while (len && isspace((unsigned char)o[len - 1]))
            len--;
        if ((len == 9 && !memcmp(o, "-restrict", 9)) || (len == 10 && !memcmp(o, "--restrict", 10)))
            return 1;
    }
    return 0;
}

void kc_nvrtc_note_options(size_t n, const char *const *opts)
{
    if (kc_nvrtc_opts_restrict(n, opts))
        atomic_store(&restrict_kept, 1);
}

int kc_nvrtc_restrict_kept(void)
{
    return atomic_load(&restrict_kept);
}
