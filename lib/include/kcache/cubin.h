/*
 * kcache: what is inside a CUBIN.
 *
 * A small, read-only reader of the ELF files that ptxas and nvcc write for
 * NVIDIA GPUs. It reports the SM architecture from the ELF header and, for
 * each kernel, the resources the driver needs to launch it (registers, shared,
 * local and constant memory, parameter size, a thread limit), read from the
 * symbol table, the section headers and the per-kernel .nv.info.<kernel>
 * attribute sections.
 *
 * The bytes come from outside kcache: every offset and size is checked, and a
 * damaged or hostile file yields KCACHE_EINVAL and a message, never a crash.
 *
 * Thread safety: kcache_cubin_parse() keeps no state; calls on different
 * buffers may run at the same time. A kcache_cubin_info is not changed after
 * it is returned and may be read from several threads.
 */
#ifndef KCACHE_CUBIN_H
#define KCACHE_CUBIN_H

#include <stddef.h>
#include <stdint.h>

#include <kcache/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One kernel: a function symbol marked as an entry point. Functions that are
 * not kernels (device functions of an -rdc CUBIN) are not listed. The first
 * fields read as `cuobjdump -res-usage` prints them (REG, SHARED, CONSTANT[0],
 * STACK); local_bytes is what the driver reports as the kernel's local memory.
 */
typedef struct kcache_cubin_kernel {
    const char *name;        /* symbol (mangled); owned by the info it is part of */
    uint32_t registers;      /* registers per thread */
    uint32_t shared_bytes;   /* static shared memory; from sm_90 on it can include 1 KiB that
                                the toolkit reserves, as cuobjdump's SHARED does */
    uint32_t local_bytes;    /* local memory per thread (stack frame + spills); in an -rdc
                                CUBIN a lower bound, as callees are only known after linking */
    uint32_t spill_bytes;    /* spill stores+loads bytes if the CUBIN records them, else 0
                                (CUDA 12 and 13 do not record them: ptxas -v prints them) */
    uint32_t constant_bytes; /* constant bank 0 (parameters etc.) */
    uint32_t param_bytes;    /* size of the kernel's parameters */
    uint32_t max_threads;    /* 0: not limited by the kernel (__launch_bounds__, maxntid) */
    uint32_t stack_bytes;    /* stack per thread with the callees, cuobjdump's STACK */
    uint32_t frame_bytes;    /* the kernel's own stack frame */
    uint32_t barriers;       /* named barriers used (0 where the CUBIN does not say) */
    uint32_t code_bytes;     /* size of the kernel's machine code (its .text section) */
} kcache_cubin_kernel;

/* What kcache_cubin_parse() found. */
#define KCACHE_CUBIN_INFO_VERSION 1

typedef struct kcache_cubin_info {
    unsigned version;         /* KCACHE_CUBIN_INFO_VERSION of the library that made it */
    unsigned sm;              /* e.g. 90 */
    char arch[16];            /* "sm_90", "sm_90a" (an "f" target is not recorded: "sm_100") */
    unsigned elf_abi_version; /* e_ident[EI_ABIVERSION]: 7 up to CUDA 12, 8 from CUDA 13 */
    unsigned virtual_sm;      /* the PTX target it was built from (e.g. 90), 0 if not recorded */
    unsigned toolkit_version; /* the CUDA toolkit that wrote it, e.g. 130 for 13.0; 0 if not
                                 recorded */
    unsigned relocatable;     /* 1: an object (-rdc) that needs linking before it can load */
    size_t n_kernels;
    kcache_cubin_kernel *kernels; /* n_kernels entries, sorted by name; owned by the info */
} kcache_cubin_info;

/*
 * Reads a CUBIN (an ELF file for an NVIDIA GPU) of size bytes at data, which
 * is only read and need not be aligned, and fills *out with a new info that
 * the caller frees with kcache_cubin_free(). On failure *out is NULL and, if
 * errbuf is not NULL, a one-line message is written into it (NUL-terminated,
 * truncated to errbuf_size).
 *
 * Returns 0; KCACHE_EINVAL when the bytes are not a CUBIN kcache can read (not
 * ELF, not for a GPU, damaged); KCACHE_ENOMEM.
 */
KCACHE_API int kcache_cubin_parse(kcache_cubin_info **out, const void *data, size_t size,
                                  char *errbuf, size_t errbuf_size);

/* Frees an info returned by kcache_cubin_parse(). Accepts NULL. */
KCACHE_API void kcache_cubin_free(kcache_cubin_info *info);

#ifdef __cplusplus
}
#endif

#endif /* KCACHE_CUBIN_H */
