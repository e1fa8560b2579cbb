/*
 * Fuzz target: the CUBIN reader on arbitrary bytes. Whatever the input,
 * kcache_cubin_parse() either reads it or refuses it with KCACHE_EINVAL and a
 * one-line message; what it returns is consistent; nothing leaks.
 */
#include <kcache/cubin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kcache_cubin_info *info = NULL;
    char err[256];
    int rc = kcache_cubin_parse(&info, data, size, err, sizeof(err));
    if (rc != 0) {
        if (rc != KCACHE_EINVAL && rc != KCACHE_ENOMEM)
            abort();
        if (info != NULL || err[0] == '\0' || strchr(err, '\n'))
            abort();
        return 0;
    }
    if (!info || info->sm == 0 || info->sm > 255 || strncmp(info->arch, "sm_", 3) != 0)
        abort();
    if (info->n_kernels && !info->kernels)
        abort();
    for (size_t i = 0; i < info->n_kernels; i++) {
        const kcache_cubin_kernel *k = &info->kernels[i];
        /* Reads every name to its end: a name that is not terminated shows here. */
        if (!k->name || strlen(k->name) == 0)
            abort();
        if (i > 0 && strcmp(info->kernels[i - 1].name, k->name) > 0)
            abort(); /* documented as sorted */
        if (k->local_bytes < k->stack_bytes || k->local_bytes < k->frame_bytes)
            abort();
    }
    kcache_cubin_free(info);
    return 0;
}
