/*
 * The GNU build-id of NVIDIA's libraries, from a file or from the copy a
 * process loaded: the key names NVRTC and nvJitLink by it, never by path.
 */
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cuda/buildid.h"

static uint64_t rd(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/*
 * Reads the NT_GNU_BUILD_ID note through the program headers of a 64-bit
 * little-endian ELF file: a few small reads, whatever the library's size.
 */
int kc_elf_build_id(const char *path, char *out, size_t out_size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return KCACHE_EIO;
    int rc = KCACHE_EIO;
    uint8_t eh[64], ph[56];
    if (pread(fd, eh, sizeof(eh), 0) != (ssize_t)sizeof(eh) || memcmp(eh, "\177ELF", 4) != 0 ||
        eh[4] != 2 || eh[5] != 1)
        goto out;
    uint64_t phoff = rd(eh + 32, 8);
    unsigned phentsize = (unsigned)rd(eh + 54, 2), phnum = (unsigned)rd(eh + 56, 2);
    if (phentsize < sizeof(ph) || phnum > 256)
        goto out;
    for (unsigned i = 0; i < phnum; i++) {
        off_t at = (off_t)(phoff + (uint64_t)i * phentsize);
        if (pread(fd, ph, sizeof(ph), at) != (ssize_t)sizeof(ph))
            goto out;
        if (rd(ph, 4) != 4 /* PT_NOTE */)
            continue;
        uint64_t off = rd(ph + 8, 8), size = rd(ph + 32, 8);
        uint8_t notes[4096];
        if (size > sizeof(notes) || pread(fd, notes, size, (off_t)off) != (ssize_t)size)
            continue;
        for (uint64_t p = 0; p + 12 <= size;) {
            uint64_t namesz = rd(notes + p, 4), descsz = rd(notes + p + 4, 4);
            uint64_t type = rd(notes + p + 8, 4);
            uint64_t name_at = p + 12, desc_at = name_at + ((namesz + 3) & ~3ull);
            uint64_t next = desc_at + ((descsz + 3) & ~3ull);
            if (next > size)
                break;
            int gnu = namesz == 4 && !memcmp(notes + name_at, "GNU", 4);
            if (type == 3 /* NT_GNU_BUILD_ID */ && gnu && descsz * 2 + 1 <= out_size) {
                for (uint64_t k = 0; k < descsz; k++)
                    snprintf(out + 2 * k, 3, "%02x", notes[desc_at + k]);
                rc = 0;
                goto out;
            }
            p = next;
        }
    }
out:
    close(fd);
    return rc;
}

struct build_id_search {
    ElfW(Addr) base;
    char *out;
    size_t out_size;
};

static int build_id_in_memory(struct dl_phdr_info *info, size_t size, void *data)
{
    struct build_id_search *s = data;
    (void)size;
    if (info->dlpi_addr != s->base)
        return 0;
    for (size_t i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        const uint8_t *n = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
        for (size_t at = 0; ph->p_type == PT_NOTE && at + sizeof(ElfW(Nhdr)) <= ph->p_memsz;) {
            ElfW(Nhdr) h;
            memcpy(&h, n + at, sizeof(h));
            size_t desc = at + sizeof(h) + ((h.n_namesz + 3) & ~3u);
            size_t next = desc + ((h.n_descsz + 3) & ~3u);
            if (next > ph->p_memsz)
                break;
            if (h.n_type == NT_GNU_BUILD_ID && h.n_namesz == 4 &&
                !memcmp(n + at + sizeof(h), "GNU", 4) && h.n_descsz * 2 < s->out_size) {
                for (size_t k = 0; k < h.n_descsz; k++)
                    snprintf(s->out + 2 * k, 3, "%02x", n[desc + k]);
                return 1;
            }
            at = next;
        }
    }
    return 1;
}

int kc_elf_loaded_build_id(void *handle, char *out, size_t out_size)
{
    struct link_map *lm = NULL;
    out[0] = '\0';
    if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm)
        return KCACHE_EIO;
    struct build_id_search s = {lm->l_addr, out, out_size};
    dl_iterate_phdr(build_id_in_memory, &s);
    return out[0] ? 0 : KCACHE_EIO;
}
