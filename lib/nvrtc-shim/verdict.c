/*
 * The verdict on a miss's observation (observe.c records it): each path NVRTC
 * opened or probed must be in the key's closure in the same state (a file, or
 * nothing), or be a toolkit file by its real path, one of NVRTC's own fixed
 * probes, or the system's; anything else, and the miss is not stored.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvrtc-shim/shimint.h"

/* ---- the verdict ------------------------------------------------------------------ */

/* Appends the components of s[0..n) to out at *o, each as "/name", skipping "" and ".". */
static void append_components(char *out, size_t *o, const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        while (i < n && s[i] == '/')
            i++;
        size_t len = 0;
        while (i + len < n && s[i + len] != '/')
            len++;
        if (len && !(len == 1 && s[i] == '.')) {
            out[(*o)++] = '/';
            memcpy(out + *o, s + i, len);
            *o += len;
        }
        i += len;
    }
}

/*
 * path as absolute (against cwd) with "." components and repeated slashes
 * folded; ".." is kept, since after a symbolic link it is not the lexical
 * parent. NULL if out of memory. One allocation and no snprintf: a miss
 * judges thousands of paths (2.6 ms of a CuPy miss on an H200 before).
 */
static char *absolute(const char *cwd, const char *path)
{
    size_t nc = path[0] == '/' ? 0 : strlen(cwd), np = strlen(path);
    char *out = malloc(nc + np + 3);
    if (!out)
        return NULL;
    size_t o = 0;
    append_components(out, &o, cwd, nc);
    append_components(out, &o, path, np);
    if (o == 0)
        out[o++] = '/';
    out[o] = '\0';
    return out;
}

struct known {
    char *path;
    int found;
};

static int by_path(const void *a, const void *b)
{
    return strcmp(((const struct known *)a)->path, ((const struct known *)b)->path);
}

/* One record of the observation, its path made absolute. */
struct look {
    char *path;
    int op, seen;
};

static int by_look(const void *a, const void *b)
{
    const struct look *x = a, *y = b;
    int c = strcmp(x->path, y->path);
    return c ? c : x->op != y->op ? x->op - y->op : x->seen - y->seen;
}

static int under(const char *path, const char *root)
{
    size_t n = strlen(root);
    return !strncmp(path, root, n) && (path[n] == '/' || path[n] == '\0');
}

/*
 * Whether abs is a folder above a file the closure found there: NVRTC stats
 * the folders of a header's path once it has opened the header (checked with
 * NVRTC 13 and CuPy's tree: cuda/std/version, then cuda/std and cuda). The
 * header is keyed; its folders exist as long as it does.
 */
static int above_found(const struct known *k, size_t n, const char *abs)
{
    size_t len = strlen(abs), lo = 0, hi = n;
    while (lo < hi) { /* the first path not before abs */
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(k[mid].path, abs) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < n && !strncmp(k[i].path, abs, len); i++)
        if (k[i].path[len] == '/' && k[i].found)
            return 1;
    return 0;
}

/*
 * Real paths of folders, remembered for one verdict: a compile reads many
 * files of few folders, and sorted paths come folder by folder.
 */
struct dir_memo {
    char dir[8][PATH_MAX];
    int in[8];
    unsigned next;
};

/* 1 if the folder's real path is under root, 0 if not, -1 if it does not exist. */
static int dir_in(struct dir_memo *m, const char *dir, const char *root)
{
    for (unsigned i = 0; i < 8; i++)
        if (m->dir[i][0] && !strcmp(m->dir[i], dir))
            return m->in[i];
    char real[PATH_MAX];
    int in = realpath(*dir ? dir : "/", real) ? under(real, root) : -1;
    unsigned slot = m->next++ % 8;
    snprintf(m->dir[slot], sizeof(m->dir[slot]), "%s", dir);
    m->in[slot] = in;
    return in;
}

/*
 * A toolkit file or folder by its real path (after symbolic links and ".."),
 * or nothing inside one: the nearest existing folder above it is in the
 * toolkit. Both are keyed by the toolkit's build.
 */
static int in_toolkit(struct dir_memo *m, const char *abs, int seen, const char *root)
{
    if (!root || !*root)
        return 0;
    const char *slash = strrchr(abs, '/');
    const char *base = slash ? slash + 1 : abs;
    struct stat st;
    if (seen != SEEN_ABSENT && (lstat(abs, &st) != 0 || S_ISLNK(st.st_mode) || !strcmp(base, ".") ||
                                !strcmp(base, ".."))) {
        char real[PATH_MAX];
        return realpath(abs, real) && under(real, root);
    }
    /* Not a link itself: where its folder really is says where it is. */
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", abs);
    for (;;) {
        char *cut = strrchr(dir, '/');
        if (!cut)
            return 0;
        *cut = '\0';
        int in = dir_in(m, dir, root);
        if (in >= 0)
            return in;
    }
}

/* 1 if abs is one of the names NVRTC stats for itself (see kc_observe_verdict). */
static int own_name(const kc_obs *o, const char *abs, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *own = absolute(o->cwd, names[i]);
        int same = own && !strcmp(own, abs);
        free(own);
        if (same)
            return 1;
    }
    return 0;
}

/* Everything a verdict depends on besides the observation, as one string. NULL: no memory. */
static char *closure_text(size_t *size, const kcache_made *made, const char *source_name,
                          const char *const *header_names, size_t n_headers)
{
    const char *root = made->toolkit_root ? made->toolkit_root : "";
    size_t n = strlen(source_name) + strlen(root) + 2;
    for (size_t i = 0; i < n_headers; i++)
        n += strlen(header_names[i]) + 1;
    for (size_t i = 0; i < made->n_probes; i++)
        n += strlen(made->probes[i].path) + 2;
    char *t = malloc(n), *q = t;
    if (!t)
        return NULL;
    /* Each string with its NUL. */
    q = stpcpy(q, source_name) + 1;
    q = stpcpy(q, root) + 1;
    for (size_t i = 0; i < n_headers; i++)
        q = stpcpy(q, header_names[i]) + 1;
    for (size_t i = 0; i < made->n_probes; i++) {
        *q++ = made->probes[i].found ? '1' : '0';
        q = stpcpy(q, made->probes[i].path) + 1;
    }
    *size = n;
    return t;
}

static const char *verdict(const kc_obs *o, const kcache_made *made, const char *source_name,
                           const char *const *header_names, size_t n_headers);

/*
 * What the kernel's and the driver's trees hold, observed: NVIDIA's NVRTC 13.0
 * opens nothing under /dev, /proc or /sys on a CPU-only machine (strace of a
 * CUBIN, PTX and LTO-IR compile); the names its library holds are /dev/null,
 * /dev/urandom, /proc/cpuinfo, /proc/PID/exe and /proc/self/fd/N (its own
 * descriptors); where NVRTC's cache starts the driver, the driver opens and
 * probes its device nodes (/dev/nvidia*, /dev/char/195:0, which links to
 * /dev/nvidia0). None of those is a header. But /dev/shm holds any user's
 * files, and /proc/PID/{cwd,root,fd/N} are links to any folder: a path
 * through one is judged as the path it leads to.
 */
enum sys_verdict { SYS_USER, SYS_OWN, SYS_TARGET, SYS_UNKNOWN };

/*
 * path with its symbolic links resolved (the nearest existing folder above it
 * by realpath, the rest as it is), absolute and folded; NULL if none of it
 * resolves or out of memory.
 */
static char *resolved(const char *path)
{
    char *dir = strdup(path), real[PATH_MAX];
    if (!dir)
        return NULL;
    char *rest = NULL;
    for (;;) {
        if (realpath(*dir ? dir : "/", real))
            break;
        char *cut = strrchr(dir, '/');
        if (!cut) {
            free(dir);
            return NULL;
        }
        *cut = '\0';
        rest = (char *)path + (cut - dir);
    }
    free(dir);
    return absolute(real, rest ? rest : "");
}

/* 1 if abs is /proc/{self,thread-self,PID}[/task/TID]/{cwd,root,fd/N}[/...]; *fd_only when it ends at fd/N. */
static int proc_link(const char *abs, int *fd_only)
{
    static const char digits[] = "0123456789";
    if (strncmp(abs, "/proc/", 6) != 0)
        return 0;
    size_t at = 6, n = strcspn(abs + at, "/");
    if (!((n == 4 && !strncmp(abs + at, "self", 4)) ||
          (n == 11 && !strncmp(abs + at, "thread-self", 11)) ||
          (n && strspn(abs + at, digits) == n)))
        return 0;
    at += n;
    if (!strncmp(abs + at, "/task/", 6) && (n = strspn(abs + at + 6, digits)) > 0)
        at += 6 + n;
    *fd_only = 0;
    if (!strncmp(abs + at, "/cwd", 4))
        at += 4;
    else if (!strncmp(abs + at, "/root", 5))
        at += 5;
    else if (!strncmp(abs + at, "/fd/", 4) && (n = strspn(abs + at + 4, digits)) > 0)
        at += 4 + n, *fd_only = abs[at] == '\0';
    else
        return 0;
    return abs[at] == '/' || abs[at] == '\0';
}

/* Whether abs is the system's or NVRTC's own cache (SYS_OWN), a user's, or leads to *target. */
static enum sys_verdict system_path(const char *abs, int op, char **target)
{
    static const char *const driver[] = {"/dev/nvidia", "/dev/char/", "/dev/dri/"};
    *target = NULL;
    if (under(abs, "/proc") || under(abs, "/sys")) {
        int fd_only = 0;
        if (!proc_link(abs, &fd_only))
            return SYS_OWN; /* made by the kernel, never a user's file */
        if (fd_only && op != OP_OPEN)
            return SYS_OWN; /* a question on a descriptor, whose open was seen */
        *target = resolved(abs);
        return *target && !under(*target, "/proc") ? SYS_TARGET : SYS_UNKNOWN;
    }
    if (under(abs, "/dev")) {
        struct stat st;
        if (!strcmp(abs, "/dev"))
            return SYS_OWN;
        for (size_t i = 0; i < sizeof(driver) / sizeof(*driver); i++)
            if (!strncmp(abs, driver[i], strlen(driver[i])))
                return SYS_OWN;
        if ((*target = resolved(abs)) && strcmp(*target, abs) != 0)
            return SYS_TARGET; /* /dev/fd/N, /dev/stdin, a /dev/shm that is a link */
        free(*target);
        *target = NULL;
        if (stat(abs, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)))
            return SYS_OWN;
        return SYS_USER;
    }
    char cache[PATH_MAX];
    const char *env = getenv("CUDA_CACHE_PATH"), *home = getenv("HOME");
    int n = env && *env     ? snprintf(cache, sizeof(cache), "%s/", env)
            : home && *home ? snprintf(cache, sizeof(cache), "%s/.nv/ComputeCache/", home)
                            : -1;
    return n > 0 && (size_t)n < sizeof(cache) && !strncmp(abs, cache, (size_t)n) ? SYS_OWN
                                                                               : SYS_USER;
}

const char *kc_observe_verdict(kc_obs *o, const kcache_made *made, const char *source_name,
                               const char *const *header_names, size_t n_headers)
{
    if (!o)
        return R_INCOMPLETE;
    if (o->taint)
        return o->taint;
    size_t size = 0;
    char *text = closure_text(&size, made, source_name, header_names, n_headers);
    if (!text)
        return R_INCOMPLETE;
    if (o->judged_closure && o->judged_size == size && !memcmp(o->judged_closure, text, size)) {
        free(text);
        return o->judged;
    }
    free(o->judged_closure);
    o->judged_closure = text;
    o->judged_size = size;
    return o->judged = verdict(o, made, source_name, header_names, n_headers);
}

/* What one verdict compares each path with. */
struct judging {
    const kc_obs *o;
    const struct known *k;
    size_t n;
    const char *source;
    const char *const *header_names;
    size_t n_headers;
    struct dir_memo *memo;
    const char *toolkit_root;
};

/* NULL if what NVRTC did at abs (op, what it saw) is covered, else the reason. */
static const char *judge_path(const struct judging *j, int op, int seen, const char *abs,
                              int depth)
{
    static const char *const nvrtc_names[] = {"__nv_nvrtc_builtin_header.h", "__nv_name_map"};
    const kc_obs *o = j->o;
    const char *pwd = o->pwd, *why = NULL;
    struct known key = {(char *)abs, 0};
    const struct known *hit = j->n ? bsearch(&key, j->k, j->n, sizeof(*j->k), by_path) : NULL;
    char *target = NULL;
    enum sys_verdict sys = SYS_USER;
    if (hit) {
        /* The resolver keys what is not a regular file as nothing there. */
        if (hit->found != (seen == SEEN_FILE))
            why = R_CHANGED;
    } else if (op == OP_STAT &&
               (!strcmp(abs, j->source) ||
                (seen != SEEN_FILE &&
                 (under(j->source, abs) || !strcmp(abs, o->cwd) || own_name(o, abs, &pwd, 1))) ||
                own_name(o, abs, nvrtc_names, 2) ||
                own_name(o, abs, j->header_names, j->n_headers))) {
        /* NVRTC's own: the program's name and the folders above it, the
         * working directory and $PWD (which names it when both are one), the names
         * of its builtin header and of its name-expression map, the names of
         * the headers handed over in memory; it stats them and never opens
         * them (test_sound.py shows a file there changes nothing). */
    } else if (op == OP_STAT && seen == SEEN_DIR && above_found(j->k, j->n, abs)) {
        /* A folder of a keyed header's path, which NVRTC stats after opening it. */
    } else if ((sys = system_path(abs, op, &target)) == SYS_OWN) {
        /* The system's, never a header (system_path says which). */
    } else if (sys == SYS_TARGET && depth < 4) {
        why = judge_path(j, op, seen, target, depth + 1);
    } else if (sys != SYS_USER || !in_toolkit(j->memo, abs, seen, j->toolkit_root)) {
        why = R_UNPREDICTED;
        char what[PATH_MAX + 64];
        snprintf(what, sizeof(what), "%s %s, which the key does not cover",
                 op == OP_OPEN ? "an open of" : "a look at", abs);
        kc_obs_say_why(what);
    }
    free(target);
    return why;
}

static const char *verdict(const kc_obs *o, const kcache_made *made, const char *source_name,
                           const char *const *header_names, size_t n_headers)
{
    const char *why = NULL;
    size_t n = made->n_probes, n_seen = 0;
    struct known *k = calloc(n + 1, sizeof(*k));
    struct look *saw = NULL;
    struct dir_memo *memo = calloc(1, sizeof(*memo));
    char *source = absolute(o->cwd, source_name);
    if (!k || !source || !memo) {
        why = R_INCOMPLETE;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (!(k[i].path = absolute(o->cwd, made->probes[i].path))) {
            why = R_INCOMPLETE;
            goto out;
        }
        k[i].found = made->probes[i].found;
    }
    qsort(k, n, sizeof(*k), by_path);
    /* Each path NVRTC looked at, once per way it looked and what it found. */
    for (size_t at = 0; at < o->used; n_seen++)
        at += ((size_t)(unsigned char)o->arena[at + 2] | (size_t)(unsigned char)o->arena[at + 3]
                                                             << 8) +
              5;
    if (!(saw = calloc(n_seen + 1, sizeof(*saw)))) {
        why = R_INCOMPLETE;
        goto out;
    }
    for (size_t at = 0, i = 0; i < n_seen; i++) {
        const char *r = o->arena + at;
        at += ((size_t)(unsigned char)r[2] | (size_t)(unsigned char)r[3] << 8) + 5;
        saw[i].op = r[0];
        saw[i].seen = r[1];
        if (!(saw[i].path = absolute(o->cwd, r + 4))) {
            why = R_INCOMPLETE;
            goto out;
        }
    }
    qsort(saw, n_seen, sizeof(*saw), by_look);
    struct judging j = {o, k, n, source, header_names, n_headers, memo, made->toolkit_root};
    for (size_t i = 0; i < n_seen && !why; i++) {
        if (i && !by_look(&saw[i - 1], &saw[i]))
            continue;
        why = judge_path(&j, saw[i].op, saw[i].seen, saw[i].path, 0);
    }
out:
    for (size_t i = 0; saw && i < n_seen; i++)
        free(saw[i].path);
    free(saw);
    free(memo);
    for (size_t i = 0; k && i < n; i++)
        free(k[i].path);
    free(k);
    free(source);
    return why;
}
