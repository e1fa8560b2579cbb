/*
 * NVIDIA's NVRTC behind the drop-in: which file it is, loading it, and
 * sending a program's dlopen of NVRTC here instead of to a second real copy.
 *
 * The real library is the one the program would have loaded, found the way
 * the loader would have found it had the drop-in not been there first:
 *   - $KCACHE_NVRTC_REAL, when a user sets it (`kcache run` does not);
 *   - the full path the program handed dlopen (cuda.pathfinder's choice after
 *     its own search, pip's nvidia/cu13/lib);
 *   - for a dlopen by name, the search of the object that called dlopen
 *     (its return address says which);
 *   - else the search of the first loaded object that NEEDs NVRTC (a
 *     program linked with -lnvrtc, or an extension module such as CuPy's,
 *     whose RUNPATH names pip's nvidia/cu13/lib), else of the program;
 *   - else the toolkit kcache was built against.
 * A search is the loader's own list for that object (dlinfo's
 * RTLD_DI_SERINFO: DT_RPATH of it and the program when it has no DT_RUNPATH,
 * LD_LIBRARY_PATH, its DT_RUNPATH, $ORIGIN expanded, the default folders),
 * with the loader's cache (/etc/ld.so.cache) read where the loader reads it,
 * before the default folders. Not followed: glibc-hwcaps subfolders, which
 * NVIDIA's wheels and toolkits do not use. The path is chosen on first need
 * without loading the library; it is loaded on first need, never on a hit.
 *
 * NVIDIA's library is linked with DT_SYMBOLIC, so its calls to its own entry
 * points bind inside it and never come back here. It loads its
 * libnvrtc-builtins by name through its own DT_RPATH ($ORIGIN), so the
 * builtins are always the chosen library's own.
 *
 * The drop-in holds NVRTC's soname from the start, so that a program linked
 * with NVRTC does not load NVIDIA's library on a hit. A program that asks
 * whether NVRTC is loaded (dlopen with RTLD_NOLOAD, as cuda.pathfinder does
 * before it searches) is answered as it would be without kcache: yes only
 * once it has loaded NVRTC itself, by a dlopen or by a loaded object that
 * NEEDs it. Otherwise its search would stop at "already loaded" and never
 * name the library it would have chosen.
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda/buildid.h"
#include "nvrtc-shim/observe.h"
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
static char real_build_id[80];     /* of the loaded copy, from its own notes; "" if none */
static char self_path[PATH_MAX];   /* this library's file */
static dev_t self_dev;
static ino_t self_ino;
static int self_known;

typedef void *(*dlopen_fn)(const char *, int);
/* glibc's dlopen, reached past the one this library defines. Read by the trampoline. */
dlopen_fn kc_next_dlopen;

static __thread int in_shim;
static int program_opened; /* the program has dlopen()ed NVRTC, so it holds a handle */

/* What kc_shim_dlopen_name returns for "not loaded": the trampoline returns NULL. */
const char kc_dlopen_none[1];

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

/* ---- the loader's search -------------------------------------------------- */

#if defined(__x86_64__)
#define KC_CACHE_ARCH 0x0300 /* ldconfig's FLAG_X8664_LIB64 */
#elif defined(__aarch64__)
#define KC_CACHE_ARCH 0x0a00 /* FLAG_AARCH64_LIB64 */
#endif

static uint32_t u32_at(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/*
 * Chooses what the loader's cache says the soname is: /etc/ld.so.cache in
 * glibc's format ("glibc-ld.so.cache1.1", after the old format's table when
 * both are there). 1 if chosen.
 */
static int choose_from_cache(void)
{
    int fd = open("/etc/ld.so.cache", O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return 0;
    if (fstat(fd, &st) != 0 || st.st_size < 48 || st.st_size > (64 << 20)) {
        close(fd);
        return 0;
    }
    size_t size = (size_t)st.st_size;
    const unsigned char *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return 0;
    static const char old_magic[] = "ld.so-1.7.0", new_magic[] = "glibc-ld.so.cache1.1";
    size_t at = 0;
    if (!memcmp(m, old_magic, sizeof(old_magic) - 1)) {
        /* The old table (12-byte entries), then the new format, 8-byte aligned. */
        at = (16 + (size_t)u32_at(m + 12) * 12 + 7) & ~(size_t)7;
    }
    int chosen = 0;
    if (at + 48 <= size && !memcmp(m + at, new_magic, sizeof(new_magic) - 1)) {
        size_t n = u32_at(m + at + 20);
        for (size_t i = 0; i < n && !chosen && at + 48 + (i + 1) * 24 <= size; i++) {
            const unsigned char *e = m + at + 48 + i * 24;
            uint32_t flags = u32_at(e), key = u32_at(e + 4), value = u32_at(e + 8);
#ifdef KC_CACHE_ARCH
            if ((flags & 0xff) != 3 || (flags & 0xff00) != KC_CACHE_ARCH)
                continue; /* not this architecture's libc6 */
#endif
            if (key >= size || value >= size || !memchr(m + key, '\0', size - key) ||
                !memchr(m + value, '\0', size - value))
                break;
            if (!strcmp((const char *)m + key, KC_SONAME))
                chosen = choose((const char *)m + value);
        }
    }
    munmap((void *)m, size);
    return chosen;
}

/*
 * Chooses what the loader would load for the soname on behalf of the object
 * `requester` (a link_map, which glibc's dlinfo takes as a handle). 1 if chosen.
 */
static int choose_by_search(void *requester)
{
    Dl_serinfo head;
    if (!requester || dlinfo(requester, RTLD_DI_SERINFOSIZE, &head) != 0 || head.dls_size == 0)
        return 0;
    Dl_serinfo *si = malloc(head.dls_size);
    if (!si)
        return 0;
    si->dls_size = head.dls_size;
    si->dls_cnt = head.dls_cnt;
    int chosen = 0, cache_done = 0;
    if (dlinfo(requester, RTLD_DI_SERINFO, si) == 0) {
        for (unsigned i = 0; i < si->dls_cnt && !chosen; i++) {
            /* The loader reads its cache after RUNPATH, before the default folders. */
            if ((si->dls_serpath[i].dls_flags & LA_SER_DEFAULT) && !cache_done++ &&
                (chosen = choose_from_cache()))
                break;
            char cand[PATH_MAX];
            const char *d = si->dls_serpath[i].dls_name;
            size_t n = strlen(d);
            snprintf(cand, sizeof(cand), "%s%s%s", d, n && d[n - 1] == '/' ? "" : "/", KC_SONAME);
            chosen = choose(cand);
        }
    }
    free(si);
    return chosen;
}

/* 1 if the loaded object lm NEEDs the soname (and is not this library). */
static int needs_nvrtc(const struct link_map *lm)
{
    const ElfW(Dyn) *d = lm->l_ld;
    const char *strtab = NULL;
    for (const ElfW(Dyn) *e = d; e && e->d_tag != DT_NULL; e++)
        if (e->d_tag == DT_STRTAB)
            strtab = (const char *)(e->d_un.d_ptr < lm->l_addr ? e->d_un.d_ptr + lm->l_addr
                                                               : e->d_un.d_ptr);
    for (const ElfW(Dyn) *e = d; strtab && e && e->d_tag != DT_NULL; e++)
        if (e->d_tag == DT_NEEDED && !strcmp(strtab + e->d_un.d_val, KC_SONAME))
            return 1;
    return 0;
}

/* The program's link_map, the head of the loaded objects; NULL if unknown. */
static struct link_map *program_map(void)
{
    struct link_map *lm = NULL;
    void *main_handle = dlopen(NULL, RTLD_NOW | RTLD_NOLOAD);
    if (!main_handle || dlinfo(main_handle, RTLD_DI_LINKMAP, &lm) != 0)
        return NULL;
    return lm;
}

/* The first loaded object that NEEDs NVRTC; NULL if none. */
static struct link_map *first_needing(void)
{
    for (struct link_map *l = program_map(); l; l = l->l_next) {
        Dl_info info;
        /* This library NEEDs nothing of the kind, but is skipped by name all the same. */
        if (dladdr(l->l_ld, &info) && info.dli_fname && self_known) {
            char real[PATH_MAX];
            if (realpath(info.dli_fname, real) && !strcmp(real, self_path))
                continue;
        }
        if (needs_nvrtc(l))
            return l;
    }
    return NULL;
}

/* The first loaded object that NEEDs NVRTC, else the program. */
static void *requester_of_needed(void)
{
    struct link_map *l = first_needing();
    return l ? l : program_map();
}

/* The toolkit's library, when no search found one. Caller holds real_lock. */
static void choose_toolkit(void)
{
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

/* Caller holds real_lock. */
static void choose_path(void)
{
    if (path_chosen)
        return;
    find_self();
    if (choose(getenv("KCACHE_NVRTC_REAL")) || choose_by_search(requester_of_needed()))
        return;
    choose_toolkit();
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
    kc_observe_audit(h);
    kc_elf_loaded_build_id(h, real_build_id, sizeof(real_build_id)); /* "" if none */
    real_loaded = &real_api;
out:
    pthread_mutex_unlock(&real_lock);
    return real_loaded;
}

const char *kc_real_build_id(void)
{
    pthread_mutex_lock(&real_lock);
    const char *id = real_loaded && real_build_id[0] ? real_build_id : NULL;
    pthread_mutex_unlock(&real_lock);
    return id;
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
 * unchanged; kc_dlopen_none when the program asks with RTLD_NOLOAD whether
 * NVRTC is loaded and, without kcache, it would not be. A full path the
 * program opens names the real library, if none was chosen yet; a question
 * (RTLD_NOLOAD) chooses nothing. Calls from inside the shim (libkcache
 * loading NVRTC) pass.
 */
const char *kc_shim_dlopen_name(const char *file, int flags, const void *caller);
const char *kc_shim_dlopen_name(const char *file, int flags, const void *caller)
{
    next_dlopen_init();
    if (!file || in_shim || !is_nvrtc_name(file))
        return file;
    const int asking = (flags & RTLD_NOLOAD) != 0;
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
                if (ours && !asking && !path_chosen && !real_loaded &&
                    !getenv("KCACHE_NVRTC_REAL") && usable(real)) {
                    snprintf(real_path, sizeof(real_path), "%s", real);
                    path_chosen = 1;
                }
            }
        } else {
            /* By name: libnvrtc.so.13, or with a minor version (PyTorch has asked
             * for libnvrtc.so.11.2); the loader would give these our soname's file. */
            ours = !strcmp(file, "libnvrtc.so") || !strcmp(file, KC_SONAME) ||
                   !strncmp(file, KC_SONAME ".", strlen(KC_SONAME) + 1);
            /* What the caller's own search would have given it. */
            Dl_info info;
            void *caller_map = NULL;
            if (ours && !asking && !path_chosen && !real_loaded && !getenv("KCACHE_NVRTC_REAL") &&
                dladdr1(caller, &info, &caller_map, RTLD_DL_LINKMAP))
                choose_by_search(caller_map);
        }
        if (ours && asking && !program_opened && !first_needing())
            use = kc_dlopen_none;
        else if (ours)
            use = self_path;
        if (ours && !asking)
            program_opened = 1;
    }
    pthread_mutex_unlock(&real_lock);
    if (use == kc_dlopen_none)
        dlerror(); /* glibc's dlopen clears the thread's last error, also when it finds nothing */
    return use;
}

/*
 * dlopen itself is a jump, not a call: glibc's dlopen finds the caller's
 * RUNPATH from its return address, and a program's libraries that dlopen
 * their neighbours by name rely on that. So the name is worked out first,
 * then glibc's dlopen is entered with the program's own return address; or,
 * for kc_dlopen_none, NULL is returned as glibc's dlopen returns it for an
 * RTLD_NOLOAD of what is not loaded.
 */
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlopen\n"
        ".type dlopen, @function\n"
        "dlopen:\n"
        "    endbr64\n" /* a landing pad where indirect branches are checked (CET) */
        "    push %rsi\n"
        "    mov 8(%rsp), %rdx\n"        /* the caller's return address: whose search */
        "    call kc_shim_dlopen_name\n" /* (file, flags, caller) */
        "    pop %rsi\n"
        "    lea kc_dlopen_none(%rip), %rdi\n"
        "    cmp %rdi, %rax\n"
        "    je 1f\n"
        "    mov %rax, %rdi\n"
        "    jmp *kc_next_dlopen(%rip)\n"
        "1:  xor %eax, %eax\n"
        "    ret\n"
        ".size dlopen, .-dlopen\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl dlopen\n"
        ".type dlopen, %function\n"
        "dlopen:\n"
        "    stp x1, x30, [sp, #-16]!\n"
        "    mov x2, x30\n"            /* the caller's return address: whose search */
        "    bl kc_shim_dlopen_name\n" /* (file, flags, caller) */
        "    ldp x1, x30, [sp], #16\n"
        "    adrp x16, kc_dlopen_none\n"
        "    add x16, x16, :lo12:kc_dlopen_none\n"
        "    cmp x0, x16\n"
        "    b.eq 1f\n"
        "    adrp x16, kc_next_dlopen\n"
        "    ldr x16, [x16, :lo12:kc_next_dlopen]\n"
        "    br x16\n"
        "1:  mov x0, #0\n"
        "    ret\n"
        ".size dlopen, .-dlopen\n");
#else
#error "the drop-in NVRTC needs a dlopen trampoline for this architecture"
#endif
