/*
 * The shared file system tier's files stay few whatever the number of
 * entries (inode quotas on cluster file systems run out before disk space),
 * and compaction holds the tier under its cap. Entries are made through the
 * store's API (kcache-key-5 material that the import gate accepts), not by
 * NVRTC, and published one compile at a time as the compile path does
 * (kc_shared_publish()), into a local directory: what is counted does not
 * depend on the file system (tests/remote/test_sharedfs.py runs on sshfs).
 *
 *   test_sharedfs_count [ENTRIES]   (default 10000)
 *
 * Phase 1: ENTRIES publishes under the default cap: the files of the tier
 * after every publish at most 64, every tenth entry still served afterwards
 * by a node whose store is empty. Phase 2: ENTRIES / 4 publishes under a
 * 1 MiB cap: after the last compaction the segments hold at most the cap.
 * Phase 3: a compaction lease left empty by a killed compactor is broken
 * once 5 s old, not after its full 60 s.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>

#include "remote/sharedfs.h"
#include "storetest.h"
#include "testutil.h"

#define MAX_FILES 64

struct tally {
    unsigned files;
    uint64_t bytes; /* of segments/ */
};

/* The files under the shared directory (directories not counted). */
static void count(struct tally *t, const char *dir, int segments)
{
    DIR *d = opendir(dir);
    REQUIRE(d);
    struct dirent *de;
    while ((de = readdir(d))) {
        char path[1024];
        struct stat st;
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        REQUIRE(lstat(path, &st) == 0);
        if (S_ISDIR(st.st_mode)) {
            count(t, path, !strcmp(de->d_name, "segments"));
            continue;
        }
        t->files++;
        if (segments)
            t->bytes += (uint64_t)st.st_size;
    }
    closedir(d);
}

static void tally(struct tally *t, const char *dir)
{
    memset(t, 0, sizeof(*t));
    count(t, dir, 0);
}

static void tlv(uint8_t *m, size_t *at, int tag, const void *data, size_t n)
{
    m[*at] = (uint8_t)tag;
    for (int i = 0; i < 4; i++)
        m[*at + 1 + i] = (uint8_t)(n >> (8 * i));
    memcpy(m + *at + 5, data, n);
    *at += 5 + n;
}

/* Entry n: a small CUBIN for sm_90 under kcache-key-5 material of its own. */
struct small {
    kcache_entry e;
    uint8_t material[256];
    uint8_t bytes[600];
};

static void small_make(struct small *s, unsigned n)
{
    char src[64];
    uint8_t d[32];
    size_t at = 0;
    snprintf(src, sizeof(src), "__global__ void k%u() {}\n", n);
    tlv(s->material, &at, 1, "kcache-key-5", 12);
    tlv(s->material, &at, 2, "cuda", 4);
    tlv(s->material, &at, 3, "cubin", 5);
    tlv(s->material, &at, 4, "sm_90", 5);
    tlv(s->material, &at, 5, "nvrtc-test", 10);
    tlv(s->material, &at, 9, "kern.cu", 7);
    blake2b(d, src, NULL, 32, strlen(src), 0);
    tlv(s->material, &at, 10, d, 32);
    kcache_entry e = KCACHE_ENTRY_INIT;
    blake2b(e.key.bytes, s->material, NULL, 32, at, 0);
    e.kind = KCACHE_KIND_CUBIN;
    e.arch = "sm_90";
    e.name = "kern.cu";
    e.toolchain = "test";
    e.size = 200 + n % 400;
    st_fill(s->bytes, e.size, n);
    e.data = s->bytes;
    e.key_material = s->material;
    e.key_material_size = at;
    s->e = e;
}

static kcache_store *open_node(const char *name, kc_shared **sh)
{
    char path[512], msg[256];
    snprintf(path, sizeof(path), "%s/kcache.db", test_path(name));
    REQUIRE(mkdir(test_path(name), 0700) == 0);
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    REQUIRE(kc_shared_open(sh, s, msg, sizeof(msg)) == 0);
    return s;
}

/* Publishes entries [from, to) from a node of its own; the most files seen after any. */
static unsigned publish(const char *shared, unsigned from, unsigned to, const char *node)
{
    kc_shared *sh = NULL;
    kcache_store *s = open_node(node, &sh);
    unsigned most = 0;
    struct small e;
    for (unsigned n = from; n < to; n++) {
        small_make(&e, n);
        kc_shared_publish(sh, &e.e);
        struct tally t;
        tally(&t, shared);
        most = t.files > most ? t.files : most;
        if ((n + 1 - from) % 1000 == 0)
            printf("%s: %u published, %u files (at most %u so far), segments %.1f KiB\n", node,
                   n + 1 - from, t.files, most, (double)t.bytes / 1024);
    }
    kc_shared_close(sh);
    kcache_store_close(s);
    return most;
}

int main(int argc, char **argv)
{
    unsigned entries = argc > 1 ? (unsigned)atoi(argv[1]) : 10000;
    char shared[512];
    snprintf(shared, sizeof(shared), "%s", test_path("shared"));
    REQUIRE(mkdir(shared, 0755) == 0);
    setenv("KCACHE_SHARED", shared, 1);
    unsetenv("KCACHE_SHARED_MAX_SIZE");
    unsetenv("KCACHE_TEST_SHARED_COMPACT_AT");

    /* Phase 1: the default cap (1 GiB), nothing evicted. */
    double t0 = st_now();
    unsigned most = publish(shared, 0, entries, "pub");
    struct tally t;
    tally(&t, shared);
    printf("%u entries published in %.1f s: at most %u files at any time, %u at the end, "
           "segments %.1f KiB\n",
           entries, st_now() - t0, most, t.files, (double)t.bytes / 1024);
    CHECK(most <= MAX_FILES);

    kc_shared *sh = NULL;
    kcache_store *late = open_node("late", &sh);
    unsigned missing = 0;
    struct small e;
    for (unsigned n = 0; n < entries; n += 10) {
        small_make(&e, n);
        kcache_entry *got = NULL;
        if (kcache_store_get(&got, late, &e.e.key, 0) != 0 && kc_shared_fetch(&got, sh, &e.e.key) != 1) {
            missing++;
            continue;
        }
        CHECK(got->size == e.e.size && !memcmp(got->data, e.e.data, e.e.size));
        kcache_entry_free(got);
    }
    printf("every tenth entry asked on a later node: %u missing\n", missing);
    CHECK(missing == 0);
    kc_shared_close(sh);
    kcache_store_close(late);

    /* Phase 2: a 1 MiB cap over a tier of its own. */
    char capped[512];
    snprintf(capped, sizeof(capped), "%s", test_path("capped"));
    REQUIRE(mkdir(capped, 0755) == 0);
    setenv("KCACHE_SHARED", capped, 1);
    setenv("KCACHE_SHARED_MAX_SIZE", "1M", 1);
    most = publish(capped, 0, entries / 4, "pub2");
    kcache_store *s = open_node("compactor", &sh);
    int rc = kc_shared_compact(sh);
    tally(&t, capped);
    printf("%u entries under a 1 MiB cap: at most %u files, after a compaction (%d) %u files, "
           "segments %.1f KiB\n",
           entries / 4, most, rc, t.files, (double)t.bytes / 1024);
    CHECK(rc == 0);
    CHECK(most <= MAX_FILES);
    CHECK(t.bytes <= 1024 * 1024);
    kc_shared_close(sh);
    kcache_store_close(s);

    /* Phase 3: a lease left empty 10 s ago (its maker killed between the create and the
     * write) does not stop compaction for the lease's full age. */
    char leased[512], lease[600];
    snprintf(leased, sizeof(leased), "%s", test_path("leased"));
    REQUIRE(mkdir(leased, 0755) == 0);
    snprintf(lease, sizeof(lease), "%s/compact.lease", leased);
    test_write_text(lease, "");
    struct timeval then[2];
    gettimeofday(&then[0], NULL);
    then[0].tv_sec -= 10;
    then[1] = then[0];
    REQUIRE(utimes(lease, then) == 0);
    setenv("KCACHE_SHARED", leased, 1);
    unsetenv("KCACHE_SHARED_MAX_SIZE");
    most = publish(leased, 0, 40, "pub3");
    tally(&t, leased);
    struct stat st;
    printf("40 entries under an empty lease 10 s old: at most %u files, %u at the end, "
           "lease %s\n", most, t.files, stat(lease, &st) == 0 ? "still there" : "gone");
    CHECK(t.files < 32);
    return test_failures ? 1 : 0;
}
