/*
 * The size cap as a user sees it with ls -l: after a prune to a size, and
 * after every put into a capped store, database plus WAL on disk are at or
 * under the cap, and what goes is what was used least recently.
 */
#include "util/common.h"
#include "storetest.h"

#define ART_MAX (200 * 1024)

static uint8_t scratch[ART_MAX];

static void test_prune_to_cap(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("prune.db"));
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    unsigned n = 0;
    while (st_disk(path) < (UINT64_C(12) << 20))
        CHECK_RC(st_put(s, n++, ART_MAX, scratch), 0);
    uint64_t full = st_disk(path);
    static const uint64_t caps[] = {UINT64_C(8) << 20, UINT64_C(4) << 20, UINT64_C(1) << 20,
                                    UINT64_C(256) << 10, UINT64_C(128) << 10};
    uint64_t entries_before = n;
    for (size_t i = 0; i < KC_ARRAY_SIZE(caps); i++) {
        kcache_prune_options o = KCACHE_PRUNE_OPTIONS_INIT;
        kcache_prune_result r = KCACHE_PRUNE_RESULT_INIT;
        o.max_size = caps[i];
        double t0 = st_now();
        CHECK_RC(kcache_store_prune(&r, s, &o), 0);
        double dt = st_now() - t0;
        uint64_t disk = st_disk(path);
        printf("prune to %llu: evicted %llu entries, disk %llu -> %llu bytes (reported %llu), "
               "%.1f ms\n",
               (unsigned long long)caps[i], (unsigned long long)r.evicted,
               (unsigned long long)r.disk_before, (unsigned long long)disk,
               (unsigned long long)r.disk_after, dt * 1e3);
        CHECK(disk <= caps[i]);
        CHECK(r.disk_after == disk);
        CHECK(r.evicted > 0);
        kcache_stats *st = NULL;
        CHECK_RC(kcache_store_stats(&st, s), 0);
        REQUIRE(st);
        CHECK(st->entries + r.evicted == entries_before);
        CHECK(st->file_bytes + st->wal_bytes == disk);
        entries_before = st->entries;
        kcache_stats_free(st);
    }
    /* A dry run changes nothing. */
    kcache_prune_options o = KCACHE_PRUNE_OPTIONS_INIT;
    kcache_prune_result r = KCACHE_PRUNE_RESULT_INIT;
    o.max_size = 1;
    o.dry_run = 1;
    uint64_t before = st_disk(path);
    CHECK_RC(kcache_store_prune(&r, s, &o), 0);
    CHECK(st_disk(path) == before);
    kcache_store_close(s);
    CHECK(st_disk(path) <= caps[KC_ARRAY_SIZE(caps) - 1]);
    CHECK(st_integrity_ok(path));
    printf("filled to %llu bytes with %u entries\n", (unsigned long long)full, n);
}

static void test_cap_on_put(void)
{
    const uint64_t cap = UINT64_C(3) << 20;
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("capped.db"));
    kcache_store *s = st_open(path, cap, NULL, NULL);
    CHECK(kcache_store_max_size(s) == cap);
    uint64_t worst = 0;
    unsigned over = 0;
    for (unsigned n = 0; n < 300; n++) {
        CHECK_RC(st_put(s, n, ART_MAX, scratch), 0);
        uint64_t disk = st_disk(path);
        worst = KC_MAX(worst, disk);
        if (disk > cap) {
            over++;
            fprintf(stderr, "after put %u: %llu bytes on disk, cap %llu\n", n,
                    (unsigned long long)disk, (unsigned long long)cap);
        }
        /* What was just put is there: eviction takes the least recently used. */
        kcache_entry *e = NULL;
        kcache_key k = st_key(n);
        CHECK_RC(kcache_store_get(&e, s, &k, KCACHE_GET_NO_TOUCH), 0);
        CHECK(st_entry_ok(e, n, ART_MAX, scratch));
        kcache_entry_free(e);
    }
    CHECK(over == 0);
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    REQUIRE(st);
    printf("300 puts under a %llu-byte cap: at most %llu bytes on disk, %llu entries left, "
           "%llu evictions\n",
           (unsigned long long)cap, (unsigned long long)worst, (unsigned long long)st->entries,
           (unsigned long long)st->evictions);
    CHECK(st->evictions > 0 && st->entries < 300);
    kcache_stats_free(st);
    kcache_store_close(s);
    CHECK(st_disk(path) <= cap);
    CHECK(st_integrity_ok(path));
}

/* Least recently used goes first: an entry that keeps being hit stays. */
static void test_lru_order(void)
{
    const uint64_t cap = UINT64_C(2) << 20;
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("lru.db"));
    kcache_store *s = st_open(path, cap, NULL, NULL);
    kcache_key hot = st_key(1), cold = st_key(2);
    CHECK_RC(st_put(s, 1, ART_MAX, scratch), 0);
    CHECK_RC(st_put(s, 2, ART_MAX, scratch), 0);
    uint64_t evictions = 0;
    for (unsigned n = 3; n < 200 && evictions < 20; n++) {
        kcache_entry *e = NULL;
        /* Hits are recorded later, in batches; a millisecond apart so they order. */
        usleep(1000);
        CHECK_RC(kcache_store_get(&e, s, &hot, KCACHE_GET_DEFAULT), 0);
        kcache_entry_free(e);
        CHECK_RC(st_put(s, n, ART_MAX, scratch), 0);
        kcache_stats *st = NULL;
        CHECK_RC(kcache_store_stats(&st, s), 0);
        evictions = st ? st->evictions : 0;
        kcache_stats_free(st);
    }
    CHECK(evictions >= 20);
    kcache_entry *e = NULL;
    CHECK_RC(kcache_store_get(&e, s, &hot, KCACHE_GET_NO_TOUCH), 0);
    CHECK(st_entry_ok(e, 1, ART_MAX, scratch));
    kcache_entry_free(e);
    CHECK_RC(kcache_store_get(&e, s, &cold, KCACHE_GET_NO_TOUCH), KCACHE_ENOTFOUND);
    kcache_store_close(s);
}

int main(void)
{
    double t0 = st_now();
    test_prune_to_cap();
    test_cap_on_put();
    test_lru_order();
    printf("cap tests: %.2f s\n", st_now() - t0);
    return test_done();
}
