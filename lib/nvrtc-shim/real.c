/*
 * NVIDIA's NVRTC behind the drop-in: which file it is, loading it, and
 * sending a program's dlopen of NVRTC here instead of to a second real copy.
 *
 * The real library is the one the program would have loaded: the full path
 * it handed dlopen, else $KCACHE_NVRTC_REAL (what `kcache run` found with the
 * loader's own search), else the loader's search done by hand without this
 * file (LD_LIBRARY_PATH, then the toolkit kcache was built against). It is
 * loaded on first need, never on a cache hit.
 *
 * NVIDIA's library is linked with DT_SYMBOLIC, so its calls to its own entry
 * points bind inside it and never come back here.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvrtc-shim/shim.h"

#define KC_STR2(x) #x
#define KC_STR(x) KC_STR2(x)
#define KC_SONAME "libnvrtc.so." KC_STR(KC_CUDA_MAJOR)

static pthread_mutex_t real_lock = PTHREAD_MUTEX_INITIALIZER;
static char real_path[PATH_MAX];   /* "" until chosen */
static int path_chosen;
static kc_real_nvrtc real_api;
static const kc_real_nvrtc *real_loaded;
static char real_err[PATH_MAX + 128];
static char self_path[PATH_MAX];   /* this library's file */
static dev_t self_dev;
static ino_t self_ino;
static int self_known;

typedef void *(*dlopen_fn)(const char *, int);
/* glibc's dlopen, reached past the one this library defines. Read by the trampoline. */
dlopen_fn kc_next_dlopen;

static __thread int in_shim;

void kc_real_lock(void)
{
    pthread_mutex_lock(&real_lock);
}

void kc_real_unlock(void)
{
    pthread_mutex_unlock(&real_lock);
}

void kc_shim_enter(void)
{
    in_shim++;
}

void kc_shim_leave(void)
{
    in_shim--;
}

static void find_self(void)
{
    Dl_info info;
    struct stat st;
    if (self_known || !dladdr(&self_dev, &info) || !info.dli_fname)
        return;
    if (!realpath(info.dli_fname, self_path) || stat(self_path, &st) != 0)
        return;
    self_dev = st.st_dev;
    self_ino = st.st_ino;
    self_known = 1;
}

/* 1 if path is a regular file other than this library. */
static int usable(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    return !(self_known && st.st_dev == self_dev && st.st_ino == self_ino);
}

static int choose(const char *path)
{
    char real[PATH_MAX];
    if (!path || !*path || !realpath(path, real) || !usable(real))
        return 0;
    snprintf(real_path, sizeof(real_path), "%s", real);
    path_chosen = 1;
    return 1;
}

/* Caller holds real_lock. */
static void choose_path(void)
{
    if (path_chosen)
        return;
    find_self();
    if (choose(getenv("KCACHE_NVRTC_REAL")))
        return;
    const char *llp = getenv("LD_LIBRARY_PATH");
    if (llp) {
        char *dirs = strdup(llp), *save = NULL;
        for (char *d = dirs ? strtok_r(dirs, ":", &save) : NULL; d; d = strtok_r(NULL, ":", &save)) {
            char cand[PATH_MAX];
            snprintf(cand, sizeof(cand), "%s/%s", *d ? d : ".", KC_SONAME);
            if (choose(cand))
                break;
        }
        free(dirs);
        if (path_chosen)
            return;
    }
    const char *roots[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), KC_TOOLKIT_DIR};
    static const char *const subdirs[] = {"lib64", "lib", "targets/x86_64-linux/lib",
                                          "targets/sbsa-linux/lib"};
    for (size_t i = 0; i < sizeof(roots) / sizeof(*roots); i++) {
        for (size_t j = 0; roots[i] && *roots[i] && j < sizeof(subdirs) / sizeof(*subdirs); j++) {
            char cand[PATH_MAX];
            snprintf(cand, sizeof(cand), "%s/%s/%s", roots[i], subdirs[j], KC_SONAME);
            if (choose(cand))
                return;
        }
    }
}

const char *kc_real_path(void)
{
    pthread_mutex_lock(&real_lock);
    choose_path();
    const char *p = path_chosen ? real_path : NULL;
    pthread_mutex_unlock(&real_lock);
    return p;
}

int kc_real_loaded(void)
{
    pthread_mutex_lock(&real_lock);
    int loaded = real_loaded != NULL;
    pthread_mutex_unlock(&real_lock);
    return loaded;
}

const char *kc_real_error(void)
{
    return real_err;
}

static void next_dlopen_init(void)
{
    if (!kc_next_dlopen) {
        void *p = dlsym(RTLD_NEXT, "dlopen");
        memcpy(&kc_next_dlopen, &p, sizeof(p));
    }
}

#define LOAD(field, name)                                                                          \
    do {                                                                                           \
        void *p_ = dlsym(h, name);                                                                 \
        if (!p_)                                                                                   \
            missing = name;                                                                        \
        memcpy(&real_api.field, &p_, sizeof(p_));                                                  \
    } while (0)
#define LOAD_NVRTC(Name) LOAD(Name, "nvrtc" #Name);

const kc_real_nvrtc *kc_real(void)
{
    pthread_mutex_lock(&real_lock);
    if (real_loaded)
        goto out;
    choose_path();
    if (!path_chosen) {
        snprintf(real_err, sizeof(real_err),
                 "kcache: no NVIDIA %s found: set KCACHE_NVRTC_REAL to its path", KC_SONAME);
        goto out;
    }
    next_dlopen_init();
    void *h = kc_next_dlopen ? kc_next_dlopen(real_path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h) {
        snprintf(real_err, sizeof(real_err), "kcache: cannot load NVRTC %s: %s", real_path,
                 dlerror());
        goto out;
    }
    const char *missing = NULL;
    KC_NVRTC_POINTS(LOAD_NVRTC)
    KC_SHIM_MORE_POINTS(LOAD_NVRTC)
    LOAD(CPEx, "__nvrtcCPEx");
    if (missing) {
        snprintf(real_err, sizeof(real_err), "kcache: %s has no %s: not the NVRTC %s expects",
                 real_path, missing, KC_SONAME);
        goto out; /* the handle stays: a program may still have it open */
    }
    real_loaded = &real_api;
out:
    pthread_mutex_unlock(&real_lock);
    return real_loaded;
}

/* ---- a program's dlopen of NVRTC ----------------------------------------- */

static int is_nvrtc_name(const char *file)
{
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    /* libnvrtc.so, libnvrtc.so.13, libnvrtc.so.13.0.88; never libnvrtc-builtins. */
    return !strcmp(base, "libnvrtc.so") || !strncmp(base, "libnvrtc.so.", 12);
}

/*
 * What the trampoline below hands glibc's dlopen: this library's own path for
 * an NVRTC of ours (the major version kcache was built for), else the name
 * unchanged. A full path asked for names the real library, if none was
 * chosen yet. Calls from inside the shim (libkcache loading NVRTC) pass.
 */
const char *kc_shim_dlopen_name(const char *file);
const char *kc_shim_dlopen_name(const char *file)
{
    next_dlopen_init();
    if (!file || in_shim || !is_nvrtc_name(file))
        return file;
    pthread_mutex_lock(&real_lock);
    find_self();
    const char *use = file;
    if (self_known) {
        char real[PATH_MAX];
        int ours = 1;
        if (strchr(file, '/')) {
            /* Another major version (libnvrtc.so.12) is not ours to replace. */
            const char *base = strrchr(file, '/') + 1;
            if (realpath(file, real) && strcmp(real, self_path) != 0) {
                ours = !strcmp(base, "libnvrtc.so") || !strcmp(base, KC_SONAME) ||
                       !strncmp(base, KC_SONAME ".", strlen(KC_SONAME) + 1) ||
                       !strncmp(strrchr(real, '/') + 1, KC_SONAME, strlen(KC_SONAME));
                if (ours && !path_chosen && !real_loaded && usable(real)) {
                    snprintf(real_path, sizeof(real_path), "%s", real);
                    path_chosen = 1;
                }
            }
        } else {
            /* By name: libnvrtc.so.13, or with a minor version (PyTorch has asked
             * for libnvrtc.so.11.2); the loader would give these our soname's file. */
            ours = !strcmp(file, "libnvrtc.so") || !strcmp(file, KC_SONAME) ||
                   !strncmp(file, KC_SONAME ".", strlen(KC_SONAME) + 1);
        }
        if (ours)
            use = self_path;
    }
    pthread_mutex_unlock(&real_lock);
    return use;
}

/*
 * dlopen itself is a jump, not a call: glibc's dlopen finds the caller's
 * RUNPATH from its return address, and a program's libraries that dlopen
 * their neighbours by name rely on that. So the name is worked out first,
 * then glibc's dlopen is entered with the program's own return address.
 */
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlopen\n"
        ".type dlopen, @function\n"
        "dlopen:\n"
        "    endbr64\n" /* a landing pad where indirect branches are checked (CET) */
        "    push %rsi\n"
        "    call kc_shim_dlopen_name\n"
        "    pop %rsi\n"
        "    mov %rax, %rdi\n"
        "    jmp *kc_next_dlopen(%rip)\n"
        ".size dlopen, .-dlopen\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl dlopen\n"
        ".type dlopen, %function\n"
        "dlopen:\n"
        "    stp x1, x30, [sp, #-16]!\n"
        "    bl kc_shim_dlopen_name\n"
        "    ldp x1, x30, [sp], #16\n"
        "    adrp x16, kc_next_dlopen\n"
        "    ldr x16, [x16, :lo12:kc_next_dlopen]\n"
        "    br x16\n"
        ".size dlopen, .-dlopen\n");
#else
#error "the drop-in NVRTC needs a dlopen trampoline for this architecture"
#endif
