/* The artifacts bench_store stores: compiled corpus CUBINs, or bytes shaped like them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <zstd.h>

#include "bench_artifacts.h"
#include "compare/cmp_util.h"

static const char *nvcc, *corpus, *workdir;

void artifacts_configure(const char *nvcc_path, const char *corpus_dir, const char *work_dir)
{
    nvcc = nvcc_path;
    corpus = corpus_dir;
    workdir = work_dir;
}

/* Runs nvcc (in the corpus directory) unless out already exists. */
static int nvcc_compile(const char *out, const char *src, int cccl)
{
    if (cmp_file_size(out) > 0)
        return 0;
    if (!nvcc || access(nvcc, X_OK) != 0 || !corpus)
        return -1;
    char tmp[4200], inc[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp-%ld", out, (long)getpid());
    snprintf(inc, sizeof(inc), "-I%s", corpus);
    /* The toolkit's CCCL headers sit beside nvcc's bin/. */
    char cccl_inc[4096];
    snprintf(cccl_inc, sizeof(cccl_inc), "-I%s", nvcc);
    char *slash = strrchr(cccl_inc, '/');
    if (slash)
        *slash = '\0';
    slash = strrchr(cccl_inc, '/');
    if (slash)
        snprintf(slash, sizeof(cccl_inc) - (size_t)(slash - cccl_inc), "/include/cccl");
    const char *argv[12];
    int n = 0;
    argv[n++] = nvcc;
    argv[n++] = "-cubin";
    argv[n++] = "-arch=sm_90";
    if (cccl) {
        argv[n++] = "-std=c++17";
        argv[n++] = cccl_inc;
    }
    argv[n++] = inc;
    argv[n++] = "-o";
    argv[n++] = tmp;
    argv[n++] = src;
    argv[n] = NULL;
    fprintf(stderr, "compiling %s with nvcc ...\n", src);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (chdir(corpus) != 0)
            _exit(127);
        execv(nvcc, (char *const *)argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || rename(tmp, out) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* A real CUBIN from the corpus, or random bytes of a typical size, labelled. */
void corpus_cubin(struct blob *b, const char *name, const char *src, int cccl,
                         size_t fallback_size)
{
    char out[4096], srcpath[4096];
    snprintf(out, sizeof(out), "%s/%s.sm_90.cubin", workdir, name);
    if (src[0] == '/' || !corpus)
        snprintf(srcpath, sizeof(srcpath), "%s", src);
    else
        snprintf(srcpath, sizeof(srcpath), "%s/%s", corpus, src);
    memset(b, 0, sizeof(*b));
    if (nvcc_compile(out, srcpath, cccl) == 0 && cmp_load_file(out, &b->data, &b->size) == 0) {
        b->real = 1;
        snprintf(b->what, sizeof(b->what), "%s (nvcc sm_90)", name);
        return;
    }
    snprintf(b->fallback, sizeof(b->fallback),
             "%s: nvcc or the corpus is missing (nvcc=%s corpus=%s); used %zu synthetic "
             "bytes instead",
             name, nvcc ? nvcc : "none", corpus ? corpus : "none",
             fallback_size);
    b->size = fallback_size;
    b->data = cmp_xmalloc(b->size);
    /* Half random, half zero: roughly what a CUBIN's entropy looks like. */
    cmp_fill_random(b->data, b->size / 2, fallback_size);
    memset(b->data + b->size / 2, 0, b->size - b->size / 2);
    snprintf(b->what, sizeof(b->what), "%s (SYNTHETIC)", name);
}

/*
 * A CUBIN-like artifact of any size: the 16-byte words (one SASS instruction
 * each on sm_90) of real CUBINs, in an order shuffled per copy. Byte
 * statistics are a real CUBIN's, but repeats are not whole-file copies that
 * zstd would find and collapse.
 */
void cubin_like(struct blob *out, const struct blob *src, size_t size, uint64_t seed)
{
    out->size = size;
    out->data = cmp_xmalloc(size);
    out->real = 0;
    size_t words = src->size / 16;
    size_t *perm = cmp_xmalloc(words * sizeof(*perm));
    uint64_t st = seed;
    size_t pos = 0;
    for (unsigned copy = 0; pos < size; copy++) {
        for (size_t i = 0; i < words; i++)
            perm[i] = i;
        /* The first copy keeps its order (the ELF header stays a header). */
        if (copy > 0) {
            for (size_t i = words - 1; i > 0; i--) {
                size_t j = (size_t)(cmp_splitmix(&st) % (i + 1));
                size_t t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
        }
        for (size_t i = 0; i < words && pos < size; i++) {
            size_t n = size - pos < 16 ? size - pos : 16;
            memcpy(out->data + pos, src->data + perm[i] * 16, n);
            pos += n;
        }
    }
    free(perm);
}

void free_blob(struct blob *b)
{
    free(b->data);
    b->data = NULL;
}

size_t zstd_frame(uint8_t **out, const void *data, size_t n)
{
    ZSTD_CCtx *c = ZSTD_createCCtx();
    if (!c)
        cmp_fail("out of memory");
    ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, FLOOR_ZSTD_LEVEL);
    ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
    ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 1);
    size_t bound = ZSTD_compressBound(n);
    *out = cmp_xmalloc(bound);
    size_t z = ZSTD_compress2(c, *out, bound, data, n);
    ZSTD_freeCCtx(c);
    if (ZSTD_isError(z))
        cmp_fail("zstd: %s", ZSTD_getErrorName(z));
    return z;
}

