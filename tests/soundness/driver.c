/*
 * The soundness harness's long-lived compiler (harness.py): reads one request
 * at a time on stdin and answers on stdout, so that one process serves a
 * whole run. That is the point of "lib" requests: kcache's per-process header
 * memo (lib/resolve/depmemo.c) only shows itself across many compiles in one
 * process.
 *
 *   lib    kcache_compiler_compile() through the public API, the store in $KCACHE_DIR
 *   cold   the same with KCACHE_COMPILE_NO_CACHE: kcache's hermetic compile
 *          with nothing looked up, what an empty cache would return
 *   nvrtc  the program's own calls: dlopen("libnvrtc.so.N"),
 *          nvrtcCreateProgram (source text, name, in-memory headers),
 *          nvrtcCompileProgram, nvrtcGetPTX. Without LD_PRELOAD this is
 *          NVIDIA's NVRTC reading the disk, the reference; with the drop-in
 *          preloaded it is the drop-in.
 *
 * Wire format, both ways: fields "TAG LEN\n" followed by LEN bytes and "\n".
 * A request is fields ending with "go": mode, arch (default compute_90; an
 * sm_XX compile's PTX is asked for all the same; "-": none, the options name
 * it), kind (ptx by default, cubin or ltoir: what is asked for, and what the
 * answer's "ptx" field then holds), cwd (chdir first, since NVRTC
 * resolves names relative to it), path (the source file; its text is read
 * here), name (the program's name; default: path), opt (repeated), hname and
 * htext (in-memory headers, in pairs). The answer is the fields status (0 or
 * the failure: kcache's code, or NVRTC's result negated minus 1000), hit,
 * keyed, store_status, message, log (the compile's log), ptx, then "end".
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kcache/compile.h>

#ifndef CUDA_MAJOR
#define CUDA_MAJOR 13
#endif
#define STR2(x) #x
#define STR(x) STR2(x)

/* NVRTC's entry points, as the program sees them (nvrtc.h is not needed). */
typedef int (*create_fn)(void **, const char *, const char *, int, const char *const *,
                         const char *const *);
typedef int (*destroy_fn)(void **);
typedef int (*compile_fn)(void *, int, const char *const *);
typedef int (*size_fn)(void *, size_t *);
typedef int (*get_fn)(void *, char *);

static struct {
    create_fn create;
    destroy_fn destroy;
    compile_fn compile;
    size_fn ptx_size, log_size, cubin_size, ltoir_size;
    get_fn ptx, log, cubin, ltoir;
} nv;

struct buf {
    char *p;
    size_t n, cap;
};

static void die(const char *what)
{
    fprintf(stderr, "soundness-driver: %s\n", what);
    exit(2);
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        die("out of memory");
    return q;
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d)
        die("out of memory");
    return d;
}

/* One field; returns 0 at end of input. tag holds 32 bytes; *val is NUL-terminated. */
static int read_field(char *tag, char **val, size_t *len)
{
    unsigned long n;
    if (scanf("%31s %lu", tag, &n) != 2)
        return 0;
    if (getchar() != '\n')
        die("bad field header");
    *val = xrealloc(NULL, n + 1);
    if (n && fread(*val, 1, n, stdin) != n)
        die("short field");
    (*val)[n] = '\0';
    if (getchar() != '\n')
        die("bad field end");
    *len = n;
    return 1;
}

static void put_field(const char *tag, const void *p, size_t n)
{
    printf("%s %zu\n", tag, n);
    fwrite(p, 1, n, stdout);
    putchar('\n');
}

static void put_int(const char *tag, long v)
{
    char s[32];
    int n = snprintf(s, sizeof(s), "%ld", v);
    put_field(tag, s, (size_t)n);
}

static char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct buf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        b.p = xrealloc(b.p, b.n + n + 1);
        memcpy(b.p + b.n, chunk, n);
        b.n += n;
    }
    fclose(f);
    b.p = xrealloc(b.p, b.n + 1);
    b.p[b.n] = '\0';
    *size = b.n;
    return b.p;
}

static void load_nvrtc(void)
{
    if (nv.create)
        return;
    /* By soname, as a program does: the drop-in when it is preloaded. */
    void *h = dlopen("libnvrtc.so." STR(CUDA_MAJOR), RTLD_NOW);
    if (!h)
        die(dlerror());
#define SYM(field, name)                                                                           \
    do {                                                                                           \
        void *s_ = dlsym(h, name);                                                                 \
        if (!s_)                                                                                   \
            die("NVRTC lacks " name);                                                              \
        memcpy(&nv.field, &s_, sizeof(s_));                                                        \
    } while (0)
    SYM(create, "nvrtcCreateProgram");
    SYM(destroy, "nvrtcDestroyProgram");
    SYM(compile, "nvrtcCompileProgram");
    SYM(ptx_size, "nvrtcGetPTXSize");
    SYM(ptx, "nvrtcGetPTX");
    SYM(log_size, "nvrtcGetProgramLogSize");
    SYM(log, "nvrtcGetProgramLog");
    SYM(cubin_size, "nvrtcGetCUBINSize");
    SYM(cubin, "nvrtcGetCUBIN");
    SYM(ltoir_size, "nvrtcGetLTOIRSize");
    SYM(ltoir, "nvrtcGetLTOIR");
#undef SYM
}

struct request {
    char *mode, *arch, *kind, *cwd, *path, *name;
    char **opts, **hnames, **htexts;
    size_t n_opts, n_hnames, n_htexts;
};

static void push(char ***v, size_t *n, char *s)
{
    *v = xrealloc(*v, (*n + 1) * sizeof(**v));
    (*v)[(*n)++] = s;
}

static void request_free(struct request *r)
{
    free(r->mode);
    free(r->arch);
    free(r->kind);
    free(r->cwd);
    free(r->path);
    free(r->name);
    for (size_t i = 0; i < r->n_opts; i++)
        free(r->opts[i]);
    for (size_t i = 0; i < r->n_hnames; i++)
        free(r->hnames[i]);
    for (size_t i = 0; i < r->n_htexts; i++)
        free(r->htexts[i]);
    free(r->opts);
    free(r->hnames);
    free(r->htexts);
    memset(r, 0, sizeof(*r));
}

/* A message on one line, for the harness's reasons. */
static void one_line(char *s)
{
    for (; *s; s++)
        if (*s == '\n' || *s == '\r')
            *s = ' ';
}

static void answer(long status, int hit, int keyed, long store_status, const char *message,
                   const char *log, const void *ptx, size_t ptx_size)
{
    put_int("status", status);
    put_int("hit", hit);
    put_int("keyed", keyed);
    put_int("store_status", store_status);
    char *m = xstrdup(message ? message : "");
    one_line(m);
    put_field("message", m, strlen(m));
    free(m);
    put_field("log", log ? log : "", log ? strlen(log) : 0);
    put_field("ptx", ptx, ptx_size);
    put_field("end", "", 0);
    fflush(stdout);
}

static void do_lib(kcache_compiler *c, const struct request *r, int cold)
{
    kcache_request q = KCACHE_REQUEST_INIT;
    q.source_path = r->path;
    q.source_name = r->name;
    q.arch = !r->arch ? "compute_90" : strcmp(r->arch, "-") ? r->arch : NULL;
    q.output = !r->kind || !strcmp(r->kind, "ptx") ? KCACHE_KIND_PTX
               : !strcmp(r->kind, "cubin")       ? KCACHE_KIND_CUBIN
                                                 : KCACHE_KIND_LTOIR;
    q.n_options = r->n_opts;
    q.options = (const char *const *)r->opts;
    q.n_headers = r->n_hnames;
    q.header_names = (const char *const *)r->hnames;
    q.header_contents = (const char *const *)r->htexts;
    q.flags = cold ? KCACHE_COMPILE_NO_CACHE : 0;
    kcache_result *res = NULL;
    int rc = kcache_compiler_compile(&res, c, &q);
    if (!res) {
        answer(rc, 0, 0, 0, "no result", "", "", 0);
        return;
    }
    /* On a failed compile, the message and the log; otherwise why it was not stored. */
    const char *msg = res->store_message;
    char *both = NULL;
    if (rc) {
        size_t n = strlen(res->message) + (res->log ? strlen(res->log) : 0) + 4;
        both = xrealloc(NULL, n);
        snprintf(both, n, "%s: %s", res->message, res->log ? res->log : "");
        msg = both;
    }
    answer(rc, res->hit, res->keyed, res->store_status, msg, res->log,
           res->data ? res->data : "", res->data ? res->size : 0);
    free(both);
    kcache_result_free(res);
}

static void do_nvrtc(const struct request *r)
{
    load_nvrtc();
    size_t size = 0;
    char *src = read_file(r->path, &size);
    if (!src) {
        answer(-2000, 0, 0, 0, strerror(errno), "", "", 0);
        return;
    }
    void *prog = NULL;
    int rc = nv.create(&prog, src, r->name ? r->name : r->path, (int)r->n_hnames,
                       (const char *const *)r->htexts, (const char *const *)r->hnames);
    free(src);
    if (rc) {
        answer(-1000 - rc, 0, 0, 0, "nvrtcCreateProgram failed", "", "", 0);
        return;
    }
    const char **opts = xrealloc(NULL, (r->n_opts + 1) * sizeof(*opts));
    for (size_t i = 0; i < r->n_opts; i++)
        opts[i] = r->opts[i];
    char arch[64];
    snprintf(arch, sizeof(arch), "-arch=%s", r->arch ? r->arch : "compute_90");
    opts[r->n_opts] = arch;
    int n_opts = (int)r->n_opts + (!r->arch || strcmp(r->arch, "-") != 0);
    rc = nv.compile(prog, n_opts, opts);
    free(opts);
    char *log = NULL, *ptx = NULL;
    size_t log_n = 0, ptx_n = 0;
    if (nv.log_size(prog, &log_n) == 0 && log_n) {
        log = xrealloc(NULL, log_n + 1);
        if (nv.log(prog, log))
            log[0] = '\0';
        log[log_n] = '\0';
    }
    /* The artifact asked for; an answer of the wrong kind or none at all is an answer too. */
    int is_ptx = !r->kind || !strcmp(r->kind, "ptx");
    size_fn get_size = is_ptx ? nv.ptx_size : !strcmp(r->kind, "cubin") ? nv.cubin_size : nv.ltoir_size;
    get_fn get = is_ptx ? nv.ptx : !strcmp(r->kind, "cubin") ? nv.cubin : nv.ltoir;
    int get_rc = 0;
    if (rc == 0 && (get_rc = get_size(prog, &ptx_n)) == 0 && ptx_n) {
        ptx = xrealloc(NULL, ptx_n);
        if ((get_rc = get(prog, ptx)) != 0)
            ptx_n = 0;
        else if (is_ptx && ptx[ptx_n - 1] == '\0')
            ptx_n--;
    }
    if (rc == 0 && get_rc)
        rc = 100 + get_rc; /* compiled, but not to the kind asked for */
    answer(rc ? -1000 - rc : 0, 0, 0, 0, log ? log : "", log, ptx ? ptx : "", ptx ? ptx_n : 0);
    free(log);
    free(ptx);
    nv.destroy(&prog);
}

int main(void)
{
    kcache_compiler *c = NULL;
    char tag[32];
    char *val;
    size_t len;
    struct request r = {0};
    while (read_field(tag, &val, &len)) {
        if (!strcmp(tag, "mode")) {
            r.mode = val;
        } else if (!strcmp(tag, "arch")) {
            r.arch = val;
        } else if (!strcmp(tag, "kind")) {
            r.kind = val;
        } else if (!strcmp(tag, "cwd")) {
            r.cwd = val;
        } else if (!strcmp(tag, "path")) {
            r.path = val;
        } else if (!strcmp(tag, "name")) {
            r.name = val;
        } else if (!strcmp(tag, "opt")) {
            push(&r.opts, &r.n_opts, val);
        } else if (!strcmp(tag, "hname")) {
            push(&r.hnames, &r.n_hnames, val);
        } else if (!strcmp(tag, "htext")) {
            push(&r.htexts, &r.n_htexts, val);
        } else if (!strcmp(tag, "go")) {
            free(val);
            if (!r.mode || !r.path || r.n_hnames != r.n_htexts)
                die("incomplete request");
            if (r.cwd && chdir(r.cwd) != 0)
                die("cannot chdir");
            if (!strcmp(r.mode, "nvrtc")) {
                do_nvrtc(&r);
            } else {
                if (!c) {
                    kcache_compiler_options o = KCACHE_COMPILER_OPTIONS_INIT;
                    char err[512];
                    if (kcache_compiler_new(&c, &o, err, sizeof(err)))
                        die(err);
                }
                do_lib(c, &r, !strcmp(r.mode, "cold"));
            }
            request_free(&r);
        } else {
            die("unknown field");
        }
    }
    request_free(&r);
    kcache_compiler_free(c);
    return 0;
}
