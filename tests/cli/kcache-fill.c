/*
 * kcache-fill: puts synthetic entries into a cache for the CLI tests, through
 * the public API, so that they do not need a compiler.
 *
 *   kcache-fill DB N [--arch A] [--kind K] [--size BYTES] [--seed S]
 *               [--inputs] [--names] [--data FILE] [--namespace NS]
 *               [--caller-key KEY]
 *
 * With --namespace, the entries are a caller's (kcache_store_put_keyed()):
 * keys "key-SEED-I" in NS, or the one key --caller-key KEY (an entry whose key
 * another writer owns, forged).
 *
 * Prints each new key (64 hex digits) on its own line. The same seed gives
 * the same keys and bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <blake2.h>
#include <kcache/store.h>

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static int usage(void)
{
    fprintf(stderr, "usage: kcache-fill DB N [--arch A] [--kind K] [--size BYTES] [--seed S] "
                    "[--inputs] [--names] [--data FILE] [--namespace NS] [--caller-key KEY] "
                    "[--hits H]\n");
    return 2;
}

static void *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *p = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (p = malloc((size_t)n + 1)) &&
            fread(p, 1, (size_t)n, f) != (size_t)n) {
            free(p);
            p = NULL;
        }
        *size = (size_t)n;
    }
    fclose(f);
    return p;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return usage();
    const char *db = argv[1], *arch = "sm_90", *data_file = NULL, *ns = NULL, *forged = NULL;
    long n = atol(argv[2]);
    kcache_kind kind = KCACHE_KIND_CUBIN;
    size_t size = 4096;
    uint64_t seed = 1;
    int with_inputs = 0, with_names = 0;
    long hits = 0; /* gets of each caller's entry once stored, counted as hits */
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--inputs"))
            with_inputs = 1;
        else if (!strcmp(a, "--names"))
            with_names = 1;
        else if (!v)
            return usage();
        else if (!strcmp(a, "--arch"))
            arch = v, i++;
        else if (!strcmp(a, "--kind") && kcache_kind_parse(&kind, v) == 0)
            i++;
        else if (!strcmp(a, "--size"))
            size = (size_t)strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--seed"))
            seed = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--data"))
            data_file = v, i++;
        else if (!strcmp(a, "--namespace"))
            ns = v, i++;
        else if (!strcmp(a, "--caller-key"))
            forged = v, i++;
        else if (!strcmp(a, "--hits") && v)
            hits = atol(v), i++;
        else
            return usage();
    }
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = db;
    o.max_size = UINT64_MAX;
    kcache_store *store;
    char err[512];
    if (kcache_store_open(&store, &o, err, sizeof(err))) {
        fprintf(stderr, "kcache-fill: %s\n", err);
        return 1;
    }
    size_t file_size = 0;
    unsigned char *file = data_file ? read_file(data_file, &file_size) : NULL;
    if (data_file && !file) {
        fprintf(stderr, "kcache-fill: cannot read %s\n", data_file);
        kcache_store_close(store);
        return 1;
    }
    unsigned char *data = malloc(size + 1);
    int rc = data ? 0 : 1;
    uint64_t s = seed * 1000003u;
    for (long e = 0; e < n && !rc; e++) {
        kcache_entry en = KCACHE_ENTRY_INIT;
        /* Keys from (seed, index) alone, so that other sizes or data keep the keys; each the
         * BLAKE2b-256 of its key material, as kcache's own are (an import checks it). */
        uint64_t ks = seed * UINT64_C(0x100000001B3) + (uint64_t)e * 7919u;
        uint8_t material[KCACHE_KEY_SIZE];
        for (int b = 0; b < KCACHE_KEY_SIZE; b += 8) {
            uint64_t r = next(&ks);
            memcpy(material + b, &r, 8);
        }
        blake2b(en.key.bytes, material, NULL, KCACHE_KEY_SIZE, sizeof(material), 0);
        /* Half random, half repeated: compressible like a real CUBIN, yet distinct. */
        for (size_t b = 0; b < size; b++)
            data[b] = b < size / 2 ? (unsigned char)next(&s) : (unsigned char)(b % 7);
        char name[64], src[128], hdr[64], expr[64], lowered[64];
        snprintf(name, sizeof(name), "kernel_%llu_%ld.cu", (unsigned long long)seed, e);
        snprintf(src, sizeof(src), "#include \"common.cuh\"\n__global__ void k%ld() {}\n", e);
        snprintf(hdr, sizeof(hdr), "// shared header, seed %llu\n", (unsigned long long)seed);
        snprintf(expr, sizeof(expr), "k%ld", e);
        snprintf(lowered, sizeof(lowered), "_Z%dk%ldv", e < 10 ? 2 : 3, e);
        const char *exprs[] = {expr}, *lows[] = {lowered};
        kcache_input inputs[2] = {
            {KCACHE_INPUT_SOURCE, name, src, strlen(src)},
            {KCACHE_INPUT_HEADER, "common.cuh", hdr, strlen(hdr)},
        };
        en.kind = kind;
        en.arch = arch;
        en.name = name;
        en.data = file ? (const void *)file : data;
        en.size = file ? file_size : size;
        en.log = "warning: synthetic entry";
        en.toolchain = "kcache-fill";
        en.compile_ns = 1000000;
        en.key_material = material;
        en.key_material_size = sizeof(material);
        if (with_names) {
            en.n_names = 1;
            en.name_exprs = exprs;
            en.lowered_names = lows;
        }
        if (with_inputs) {
            en.n_inputs = 2;
            en.inputs = inputs;
        }
        char caller_key[256];
        snprintf(caller_key, sizeof(caller_key), "key-%llu-%ld", (unsigned long long)seed, e);
        if (forged)
            snprintf(caller_key, sizeof(caller_key), "%s", forged);
        if (ns && (rc = kcache_key_caller(&en.key, ns, caller_key, strlen(caller_key))) == 0)
            rc = kcache_store_put_keyed(store, ns, caller_key, strlen(caller_key), en.data,
                                        en.size);
        else if (!ns)
            rc = kcache_store_put(store, &en);
        for (long h = 0; ns && !rc && h < hits; h++) {
            kcache_entry *got = NULL;
            rc = kcache_store_get_keyed(&got, store, ns, caller_key, strlen(caller_key), 0);
            kcache_entry_free(got);
        }
        if (rc) {
            fprintf(stderr, "kcache-fill: %s\n", kcache_store_errmsg(store));
            break;
        }
        char hex[KCACHE_KEY_HEX_SIZE];
        kcache_key_hex(hex, &en.key);
        printf("%s\n", hex);
    }
    free(data);
    free(file);
    kcache_store_close(store);
    return rc ? 1 : 0;
}
