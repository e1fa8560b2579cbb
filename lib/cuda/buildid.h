/* The GNU build-id of NVIDIA's libraries (buildid.c). */
#ifndef KC_BUILDID_H
#define KC_BUILDID_H

#include <stddef.h>

#include "util/common.h"

/* The build-id of the ELF file at path as hex into out. Returns 0 or KCACHE_EIO. */
int kc_elf_build_id(const char *path, char *out, size_t out_size);

/*
 * The build-id of the loaded copy behind a dlopen handle, read from its notes
 * in memory: the build that answers calls, whatever its file holds now (glibc
 * hands back a library already loaded under the same path even after the
 * file was replaced). Returns 0, or KCACHE_EIO with out empty.
 */
int kc_elf_loaded_build_id(void *handle, char *out, size_t out_size);

#endif
