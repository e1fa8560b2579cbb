/*
 * A small read-only reader of CUBINs: the ELF header, the section headers,
 * the symbol table and the .nv.info attribute records.
 *
 * The bytes were written by someone else, and may be damaged or hostile:
 * every offset and size is checked against the buffer with arithmetic that
 * cannot overflow, every integer is read byte by byte (the buffer need not be
 * aligned), nothing recurses, and every allocation is bounded by the size of
 * the input (tables indexed by section or symbol, whose counts were checked
 * to fit in the file).
 *
 * The layout of the NVIDIA parts (EM_CUDA, e_flags, .nv.info records, the
 * cuinfo note, .nv.compat) follows public descriptions and was checked
 * against `cuobjdump -elf` and `cuobjdump -res-usage` of the fixtures in
 * tests/fixtures/cubin/.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "kcache/cubin.h"

/* ELF constants (from the System V ABI; NVIDIA's values as their tools print them). */
enum {
    ELF_HEADER_SIZE = 64, /* ELF64 */
    SHDR_SIZE = 64,
    PHDR_SIZE = 56,
    SYM_SIZE = 24,
    EM_CUDA = 190,
    ET_REL = 1,
    SHT_SYMTAB = 2,
    SHT_NOTE = 7,
    SHT_NOBITS = 8,
    SHT_CUDA_INFO = 0x70000000,
    SHT_CUDA_COMPAT = 0x70000086,
    SHN_XINDEX = 0xffff,
    STT_FUNC = 2,
    STO_CUDA_ENTRY = 0x10, /* st_other of a kernel (an entry function) */
    NOTE_CUDA_INFO = 1000, /* .note.nv.cuinfo: version, virtual SM, toolkit */
};

/* e_flags: the SM moved from the low byte to bits 8..15 with ELF ABI version 8 (CUDA 13). */
#define EF_CUDA_SM_V1(f) ((f)&0xffu)
#define EF_CUDA_ACCELERATORS_V1 0x800u
#define EF_CUDA_SM_V2(f) (((f) >> 8) & 0xffu)
#define EF_CUDA_ACCELERATORS_V2 0x8u

/* .nv.info record formats: a 4-byte header {format, attribute, 16-bit field}. */
enum {
    EIFMT_NVAL = 1, /* no value */
    EIFMT_BVAL = 2, /* a byte in the 16-bit field */
    EIFMT_HVAL = 3, /* the 16-bit field */
    EIFMT_SVAL = 4, /* the 16-bit field is the size of the payload that follows */
};

/* The attributes kcache reads; the others are skipped. */
enum {
    EIATTR_MAX_THREADS = 0x05,
    EIATTR_PARAM_CBANK = 0x0a,
    EIATTR_REQNTID = 0x10,
    EIATTR_FRAME_SIZE = 0x11,
    EIATTR_MIN_STACK_SIZE = 0x12,
    EIATTR_CBANK_PARAM_SIZE = 0x19,
    EIATTR_MAX_STACK_SIZE = 0x23,
    EIATTR_REGCOUNT = 0x2f,
    EIATTR_NUM_BARRIERS = 0x4c,
    EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET = 0x09, /* in .nv.compat: 1 for sm_90a etc. */
};

/* One section header, widened. */
typedef struct shdr {
    uint32_t name;
    uint32_t type;
    uint64_t offset;
    uint64_t size;
    uint32_t link;
    uint32_t info;
    uint64_t entsize;
} shdr;

/* What the reader needs while it works; info is what it returns. */
typedef struct reader {
    const uint8_t *data;
    size_t size;
    char *err;
    size_t errsize;
    uint64_t shoff;
    size_t shnum;
    size_t shstrndx;
    size_t nsyms;
    const uint8_t *syms; /* nsyms entries of symentsize bytes, inside data */
    uint64_t symentsize;
    shdr strtab;          /* the symbol table's string table */
    int32_t *kern_of_sec; /* shnum entries: the kernel whose .text this section is, or -1 */
    int32_t *kern_of_sym; /* nsyms entries: the kernel this symbol is, or -1 */
    int accelerated;      /* an arch-specific ("a") target */
    kcache_cubin_info *info;
} reader;

/* The info and the storage of the names its kernels point to, freed together. */
typedef struct info_alloc {
    kcache_cubin_info pub; /* first: kcache_cubin_free() gets a pointer to it */
    char *names;
} info_alloc;

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static uint32_t clamp_u32(uint64_t v)
{
    return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

KC_PRINTF(3, 4) static int fail(reader *r, int code, const char *fmt, ...)
{
    if (r->err && r->errsize) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err, r->errsize, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* True if [off, off + len) lies inside the buffer. */
static int in_bounds(const reader *r, uint64_t off, uint64_t len)
{
    return off <= r->size && len <= r->size - off;
}

static void read_shdr(const reader *r, size_t i, shdr *out)
{
    /* The table was checked to lie inside the buffer in read_header(). */
    const uint8_t *p = r->data + r->shoff + (uint64_t)i * SHDR_SIZE;
    out->name = get_u32(p);
    out->type = get_u32(p + 4);
    out->offset = get_u64(p + 24);
    out->size = get_u64(p + 32);
    out->link = get_u32(p + 40);
    out->info = get_u32(p + 44);
    out->entsize = get_u64(p + 56);
}

/*
 * The NUL-terminated string at off in the string table section st, or NULL
 * if it does not lie inside the section (sections with data were checked to
 * lie inside the buffer).
 */
static const char *str_at(const reader *r, const shdr *st, uint64_t off)
{
    if (st->type == SHT_NOBITS || off >= st->size)
        return NULL;
    const char *s = (const char *)r->data + st->offset + off;
    return memchr(s, '\0', st->size - off) ? s : NULL;
}

static int read_header(reader *r)
{
    const uint8_t *d = r->data;
    if (r->size < 4 || memcmp(d,
                              "\x7f"
                              "ELF",
                              4) != 0)
        return fail(r, KCACHE_EINVAL, "not a CUBIN: the data does not start with an ELF header");
    if (r->size < ELF_HEADER_SIZE)
        return fail(r, KCACHE_EINVAL, "the CUBIN is truncated: %zu bytes, shorter than its header",
                    r->size);
    if (d[4] != 2)
        return fail(r, KCACHE_EINVAL, "not a 64-bit ELF file: only 64-bit CUBINs can be read");
    if (d[5] != 1)
        return fail(r, KCACHE_EINVAL, "not a little-endian ELF file: not a CUBIN");
    unsigned machine = get_u16(d + 18);
    if (machine != EM_CUDA)
        return fail(r, KCACHE_EINVAL,
                    "not a CUBIN: the ELF file is for machine %u, not an NVIDIA GPU (%u)", machine,
                    (unsigned)EM_CUDA);

    kcache_cubin_info *info = r->info;
    info->elf_abi_version = d[8];
    info->relocatable = get_u16(d + 16) == ET_REL;
    uint32_t flags = get_u32(d + 48);
    if (info->elf_abi_version >= 8) {
        info->sm = EF_CUDA_SM_V2(flags);
        r->accelerated = (flags & EF_CUDA_ACCELERATORS_V2) != 0;
    } else {
        info->sm = EF_CUDA_SM_V1(flags);
        r->accelerated = (flags & EF_CUDA_ACCELERATORS_V1) != 0;
    }
    if (info->sm == 0)
        return fail(r, KCACHE_EINVAL, "the CUBIN names no SM architecture (ELF flags 0x%x)",
                    (unsigned)flags);

    r->shoff = get_u64(d + 40);
    unsigned shentsize = get_u16(d + 58);
    uint64_t shnum = get_u16(d + 60);
    uint64_t shstrndx = get_u16(d + 62);
    if (r->shoff == 0)
        return fail(r, KCACHE_EINVAL, "the CUBIN has no section headers");
    if (shentsize != SHDR_SIZE)
        return fail(r, KCACHE_EINVAL, "the CUBIN is damaged: section headers of %u bytes, not %u",
                    shentsize, (unsigned)SHDR_SIZE);
    if (!in_bounds(r, r->shoff, SHDR_SIZE))
        return fail(r, KCACHE_EINVAL,
                    "the CUBIN is truncated: its section headers lie past its end (%zu bytes)",
                    r->size);
    /* More than 0xff00 sections: the counts are in section 0 (extended numbering). */
    const uint8_t *s0 = d + r->shoff;
    if (shnum == 0)
        shnum = get_u64(s0 + 32);
    if (shstrndx == SHN_XINDEX)
        shstrndx = get_u32(s0 + 40);
    /* Bounds the tables allocated per section: at most size / 64 entries. */
    if (shnum == 0 || shnum > (r->size - r->shoff) / SHDR_SIZE)
        return fail(r, KCACHE_EINVAL,
                    "the CUBIN is truncated or damaged: %llu section headers do not fit in it",
                    (unsigned long long)shnum);
    if (shstrndx >= shnum)
        return fail(r, KCACHE_EINVAL, "the CUBIN is damaged: no section name table");
    r->shnum = (size_t)shnum;
    r->shstrndx = (size_t)shstrndx;

    /*
     * The program headers (what the driver loads) come last in a CUBIN: a
     * truncated copy loses them first. Only their extent is checked.
     */
    uint64_t phoff = get_u64(d + 32);
    uint64_t phentsize = get_u16(d + 54), phnum = get_u16(d + 56);
    if (phnum != 0) {
        if (phentsize < PHDR_SIZE || !in_bounds(r, phoff, phnum * phentsize))
            return fail(r, KCACHE_EINVAL,
                        "the CUBIN is truncated or damaged: its program headers lie past its end");
        for (uint64_t i = 0; i < phnum; i++) {
            const uint8_t *ph = d + phoff + i * phentsize;
            if (!in_bounds(r, get_u64(ph + 8), get_u64(ph + 32)))
                return fail(r, KCACHE_EINVAL,
                            "the CUBIN is truncated or damaged: segment %llu lies past its end",
                            (unsigned long long)i);
        }
    }
    return 0;
}

/*
 * Checks that every section with contents lies inside the buffer; section 0
 * too, as e_shstrndx may name it.
 */
static int check_sections(reader *r)
{
    for (size_t i = 0; i < r->shnum; i++) {
        shdr sh;
        read_shdr(r, i, &sh);
        if (sh.type != SHT_NOBITS && !in_bounds(r, sh.offset, sh.size))
            return fail(r, KCACHE_EINVAL,
                        "the CUBIN is truncated or damaged: section %zu lies past its end", i);
    }
    return 0;
}

static int find_symtab(reader *r)
{
    for (size_t i = 1; i < r->shnum; i++) {
        shdr sh;
        read_shdr(r, i, &sh);
        if (sh.type != SHT_SYMTAB)
            continue;
        if (sh.size == 0)
            return 0; /* no symbols */
        if (sh.entsize < SYM_SIZE || sh.entsize > sh.size)
            return fail(r, KCACHE_EINVAL, "the CUBIN is damaged: bad symbol table entry size %llu",
                        (unsigned long long)sh.entsize);
        if (sh.link == 0 || sh.link >= r->shnum)
            return fail(r, KCACHE_EINVAL, "the CUBIN is damaged: its symbol table has no names");
        r->syms = r->data + sh.offset;
        r->symentsize = sh.entsize;
        r->nsyms = (size_t)(sh.size / sh.entsize); /* <= size / 24: the buffer is that large */
        if (r->nsyms > INT32_MAX)
            return fail(r, KCACHE_EINVAL, "the CUBIN has too many symbols (%zu)", r->nsyms);
        read_shdr(r, sh.link, &r->strtab);
        return 0;
    }
    /* A CUBIN without symbols has no kernels; the header is still worth reporting. */
    return 0;
}

/* Kernels are functions marked as entry points. */
static int is_kernel(const uint8_t *sym)
{
    return (sym[4] & 0xf) == STT_FUNC && (sym[5] & STO_CUDA_ENTRY) != 0;
}

/* A kernel found in the symbol table, before sorting. */
typedef struct found {
    const char *name; /* inside the buffer */
    uint32_t sym;     /* symbol index */
    uint32_t text;    /* its section, 0 if unknown */
} found;

static int cmp_found(const void *a, const void *b)
{
    return strcmp(((const found *)a)->name, ((const found *)b)->name);
}

/*
 * Lists the kernels, sorted by name, with their names copied into one block
 * that the info owns, and fills the tables that map symbols and sections to
 * them.
 */
static int collect_kernels(reader *r, info_alloc *ia)
{
    size_t n = 0, names_size = 0;
    for (size_t i = 0; i < r->nsyms; i++) {
        const uint8_t *sym = r->syms + i * r->symentsize;
        if (!is_kernel(sym))
            continue;
        const char *name = str_at(r, &r->strtab, get_u32(sym));
        if (!name || !*name)
            return fail(r, KCACHE_EINVAL, "the CUBIN is damaged: kernel symbol %zu has no name", i);
        /*
         * Distinct names take distinct bytes of the string table. Symbols
         * that share one long name could otherwise make the copy, and this
         * loop, far larger than the input.
         */
        names_size += strlen(name) + 1;
        if (names_size > r->strtab.size)
            return fail(r, KCACHE_EINVAL, "the CUBIN is damaged: its kernels share names");
        n++;
    }
    if (n == 0)
        return 0;

    int rc = 0;
    found *f = kc_malloc(n * sizeof(*f));
    ia->pub.kernels = kc_calloc(n, sizeof(*ia->pub.kernels));
    ia->names = kc_malloc(names_size);
    r->kern_of_sym = kc_malloc(r->nsyms * sizeof(*r->kern_of_sym));
    r->kern_of_sec = kc_malloc(r->shnum * sizeof(*r->kern_of_sec));
    if (!f || !ia->pub.kernels || !ia->names || !r->kern_of_sym || !r->kern_of_sec) {
        rc = fail(r, KCACHE_ENOMEM, "out of memory reading a CUBIN of %zu bytes", r->size);
        goto out;
    }

    size_t j = 0;
    for (size_t i = 0; i < r->nsyms; i++) {
        const uint8_t *sym = r->syms + i * r->symentsize;
        if (!is_kernel(sym))
            continue;
        uint16_t shndx = get_u16(sym + 6); /* past the table (or SHN_XINDEX): unknown */
        f[j].name = str_at(r, &r->strtab, get_u32(sym));
        f[j].sym = (uint32_t)i;
        f[j].text = shndx < r->shnum ? shndx : 0;
        j++;
    }
    qsort(f, n, sizeof(*f), cmp_found);

    for (size_t i = 0; i < r->nsyms; i++)
        r->kern_of_sym[i] = -1;
    for (size_t i = 0; i < r->shnum; i++)
        r->kern_of_sec[i] = -1;
    char *at = ia->names;
    for (size_t i = 0; i < n; i++) {
        kcache_cubin_kernel *k = &ia->pub.kernels[i];
        size_t len = strlen(f[i].name) + 1;
        memcpy(at, f[i].name, len);
        k->name = at;
        at += len;
        r->kern_of_sym[f[i].sym] = (int32_t)i;
        if (f[i].text) {
            shdr sh;
            read_shdr(r, f[i].text, &sh);
            r->kern_of_sec[f[i].text] = (int32_t)i;
            k->code_bytes = clamp_u32(sh.size);
            /* Before ELF ABI 8 the .text's sh_info also held the register count. */
            if (r->info->elf_abi_version < 8)
                k->registers = sh.info >> 24;
        }
    }
    ia->pub.n_kernels = n;
out:
    free(f);
    return rc;
}

/* The kernel that symbol index sym names, or NULL. */
static kcache_cubin_kernel *kernel_of_sym(const reader *r, uint32_t sym)
{
    if (!r->kern_of_sym || sym >= r->nsyms || r->kern_of_sym[sym] < 0)
        return NULL;
    return &r->info->kernels[r->kern_of_sym[sym]];
}

/* The kernel whose .text section has index sec, or NULL. */
static kcache_cubin_kernel *kernel_of_sec(const reader *r, uint32_t sec)
{
    if (!r->kern_of_sec || sec >= r->shnum || r->kern_of_sec[sec] < 0)
        return NULL;
    return &r->info->kernels[r->kern_of_sec[sec]];
}

/* x * y * z of a block shape, saturated. */
static uint32_t threads_of(const uint8_t *p)
{
    uint64_t x = get_u32(p), y = get_u32(p + 4), z = get_u32(p + 8);
    uint64_t xy = x * y; /* both < 2^32: no overflow */
    if (xy != 0 && z > UINT64_MAX / xy)
        return UINT32_MAX;
    return clamp_u32(xy * z);
}

/*
 * One attribute record. sec_kernel is the kernel of a per-kernel
 * .nv.info.<name> section (NULL for the global .nv.info); attributes of the
 * indexed form name their kernel by symbol index instead.
 */
static void apply_attr(const reader *r, kcache_cubin_kernel *sec_kernel, unsigned fmt,
                       unsigned attr, uint16_t field, const uint8_t *payload)
{
    size_t len = fmt == EIFMT_SVAL ? field : 0;
    /* Indexed: {symbol, value}. */
    kcache_cubin_kernel *ik = len >= 8 ? kernel_of_sym(r, get_u32(payload)) : NULL;
    uint32_t ival = len >= 8 ? get_u32(payload + 4) : 0;

    switch (attr) {
    case EIATTR_REGCOUNT:
        if (ik)
            ik->registers = ival;
        break;
    case EIATTR_FRAME_SIZE:
        if (ik)
            ik->frame_bytes = ival;
        break;
    case EIATTR_MIN_STACK_SIZE:
    case EIATTR_MAX_STACK_SIZE:
        if (ik)
            ik->stack_bytes = KC_MAX(ik->stack_bytes, ival);
        break;
    case EIATTR_MAX_THREADS:
        if (sec_kernel && len >= 12)
            sec_kernel->max_threads = threads_of(payload);
        break;
    case EIATTR_REQNTID:
        /* A required block shape also limits it; .maxntid, where both exist, is the limit. */
        if (sec_kernel && len >= 12 && sec_kernel->max_threads == 0)
            sec_kernel->max_threads = threads_of(payload);
        break;
    case EIATTR_CBANK_PARAM_SIZE:
        if (sec_kernel && fmt == EIFMT_HVAL)
            sec_kernel->param_bytes = field;
        break;
    case EIATTR_PARAM_CBANK:
        /* {constant bank symbol, offset:16 | size:16}: the size where no CBANK_PARAM_SIZE. */
        if (sec_kernel && len >= 8 && sec_kernel->param_bytes == 0)
            sec_kernel->param_bytes = get_u32(payload + 4) >> 16;
        break;
    case EIATTR_NUM_BARRIERS:
        if (ik)
            ik->barriers = ival;
        else if (sec_kernel && (fmt == EIFMT_BVAL || fmt == EIFMT_HVAL))
            sec_kernel->barriers = fmt == EIFMT_BVAL ? (field & 0xffu) : field;
        break;
    default:
        break;
    }
}

/*
 * Walks the records of one .nv.info section. Returns 0, or KCACHE_EINVAL for a
 * record that runs past its section. A format this reader does not know ends
 * the walk quietly: the length of its record is unknown.
 */
static int walk_info(reader *r, size_t index, const shdr *sh, kcache_cubin_kernel *sec_kernel)
{
    const uint8_t *p = r->data + sh->offset;
    uint64_t n = sh->size, off = 0;
    while (n - off >= 4) {
        unsigned fmt = p[off], attr = p[off + 1];
        uint16_t field = get_u16(p + off + 2);
        const uint8_t *payload = p + off + 4;
        uint64_t next;
        if (fmt == EIFMT_SVAL) {
            if (field > n - off - 4)
                return fail(r, KCACHE_EINVAL,
                            "the CUBIN is damaged: an attribute runs past the end of section %zu",
                            index);
            next = off + 4 + field;
        } else if (fmt >= EIFMT_NVAL && fmt <= EIFMT_HVAL) {
            next = off + 4;
        } else {
            break;
        }
        if (sh->type == SHT_CUDA_COMPAT) {
            /* CUDA 13 marks sm_90a here rather than in e_flags. */
            if (attr == EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET && fmt == EIFMT_BVAL &&
                (field & 0xffu) == 1)
                r->accelerated = 1;
        } else {
            apply_attr(r, sec_kernel, fmt, attr, field, payload);
        }
        off = next;
    }
    return 0;
}

/* .note.nv.cuinfo: {u16 version, u16 virtual SM, u32 toolkit version}. */
static void read_notes(reader *r, const shdr *sh)
{
    const uint8_t *p = r->data + sh->offset;
    uint64_t n = sh->size, off = 0;
    while (n - off >= 12) {
        uint64_t namesz = get_u32(p + off), descsz = get_u32(p + off + 4);
        uint32_t type = get_u32(p + off + 8);
        uint64_t name_pad = (namesz + 3) & ~UINT64_C(3), desc_pad = (descsz + 3) & ~UINT64_C(3);
        if (name_pad > n - off - 12 || descsz > n - off - 12 - name_pad)
            return; /* damaged: the rest of the note section is ignored */
        const uint8_t *desc = p + off + 12 + name_pad;
        if (type == NOTE_CUDA_INFO && descsz >= 8) {
            r->info->virtual_sm = get_u16(desc + 2);
            r->info->toolkit_version = get_u32(desc + 4);
        }
        if (desc_pad > n - off - 12 - name_pad)
            return;
        off += 12 + name_pad + desc_pad;
    }
}

/*
 * True if the name at off in the string table st starts with prefix. Only
 * the prefix is read: scanning every name to its end would let many sections
 * that share one long name take time quadratic in the input.
 */
static int name_has_prefix(const reader *r, const shdr *st, uint64_t off, const char *prefix)
{
    size_t len = strlen(prefix);
    if (st->type == SHT_NOBITS || off >= st->size || len > st->size - off)
        return 0;
    return memcmp(r->data + st->offset + off, prefix, len) == 0;
}

/* Sizes of the sections that belong to one kernel, named .nv.<what>.<kernel>. */
static void section_sizes(reader *r, const shdr *names, const shdr *sh)
{
    static const struct {
        const char *prefix;
        size_t field; /* offset in kcache_cubin_kernel */
    } per_kernel[] = {
        {".nv.shared.", offsetof(kcache_cubin_kernel, shared_bytes)},
        {".nv.constant0.", offsetof(kcache_cubin_kernel, constant_bytes)},
        {".nv.local.", offsetof(kcache_cubin_kernel, local_bytes)},
    };
    /* sh_info links the section to the kernel's .text section. */
    kcache_cubin_kernel *k = kernel_of_sec(r, sh->info);
    if (!k)
        return;
    for (size_t i = 0; i < KC_ARRAY_SIZE(per_kernel); i++) {
        if (name_has_prefix(r, names, sh->name, per_kernel[i].prefix)) {
            uint32_t v = clamp_u32(sh->size);
            memcpy((char *)k + per_kernel[i].field, &v, sizeof(v));
            return;
        }
    }
}

static int read_sections(reader *r)
{
    shdr names;
    read_shdr(r, r->shstrndx, &names);
    for (size_t i = 1; i < r->shnum; i++) {
        shdr sh;
        read_shdr(r, i, &sh);
        if (sh.type == SHT_NOTE) {
            read_notes(r, &sh);
            continue;
        }
        if (sh.type == SHT_CUDA_INFO || sh.type == SHT_CUDA_COMPAT) {
            /* Per-kernel .nv.info.<name> sections link to the kernel's .text in sh_info. */
            kcache_cubin_kernel *k = sh.type == SHT_CUDA_INFO ? kernel_of_sec(r, sh.info) : NULL;
            int rc = walk_info(r, i, &sh, k);
            if (rc)
                return rc;
            continue;
        }
        section_sizes(r, &names, &sh);
    }
    return 0;
}

KCACHE_API int kcache_cubin_parse(kcache_cubin_info **out, const void *data, size_t size,
                                  char *errbuf, size_t errbuf_size)
{
    reader r = {.data = data, .size = size, .err = errbuf, .errsize = errbuf_size};
    int rc;
    if (errbuf && errbuf_size)
        errbuf[0] = '\0';
    if (!out)
        return fail(&r, KCACHE_EINVAL, "kcache_cubin_parse: out is NULL");
    *out = NULL;
    if (!data && size)
        return fail(&r, KCACHE_EINVAL, "kcache_cubin_parse: data is NULL");

    info_alloc *ia = kc_calloc(1, sizeof(*ia));
    if (!ia)
        return fail(&r, KCACHE_ENOMEM, "out of memory reading a CUBIN");
    ia->pub.version = KCACHE_CUBIN_INFO_VERSION;
    r.info = &ia->pub;

    if ((rc = read_header(&r)) || (rc = check_sections(&r)) || (rc = find_symtab(&r)) ||
        (rc = collect_kernels(&r, ia)) || (rc = read_sections(&r)))
        goto out;
    snprintf(ia->pub.arch, sizeof(ia->pub.arch), "sm_%u%s", ia->pub.sm, r.accelerated ? "a" : "");
    /* The driver's local memory: the stack (or, unknown before linking, the frame) + .nv.local. */
    for (size_t i = 0; i < ia->pub.n_kernels; i++) {
        kcache_cubin_kernel *k = &ia->pub.kernels[i];
        uint64_t local = (uint64_t)KC_MAX(k->stack_bytes, k->frame_bytes) + k->local_bytes;
        k->local_bytes = clamp_u32(local);
    }
    *out = &ia->pub;
    ia = NULL;
out:
    free(r.kern_of_sym);
    free(r.kern_of_sec);
    kcache_cubin_free(ia ? &ia->pub : NULL);
    return rc;
}

KCACHE_API void kcache_cubin_free(kcache_cubin_info *info)
{
    if (!info)
        return;
    info_alloc *ia = (info_alloc *)info;
    free(ia->pub.kernels);
    free(ia->names);
    free(ia);
}
