/*
 * Header lists stored once (schema/008_shared_lists.sql): kernels of one
 * header tree share their key material's header list and their header
 * inputs, each entry still reads back whole; a list goes with its last
 * entry, by delete, prune and clear; bundles carry whole entries and an
 * import shares again; a damaged or missing shared row is found by verify
 * and --fix's deletes leave the books sound.
 */
#include <kcache/bundle.h>
#include <kcache/store.h>
#include <kcache/verify.h>

#include "storetest.h"

#define N_KERNELS 20

static struct st_kernel kernels[N_KERNELS + 1];

/* Every kernel in [from, to) reads back whole (material, inputs, bytes). */
static int all_whole(kcache_store *s, unsigned from, unsigned to)
{
    int bad = 0;
    for (unsigned i = from; i < to; i++) {
        kcache_entry *e = NULL;
        int rc =
            kcache_store_get(&e, s, &kernels[i].e.key, KCACHE_GET_NO_TOUCH | KCACHE_GET_INPUTS);
        if (rc || !st_kernel_ok(e, &kernels[i])) {
            fprintf(stderr, "  kernel %u: %s\n", i, rc ? kcache_store_errmsg(s) : "not as put");
            bad++;
        }
        kcache_entry_free(e);
    }
    return bad == 0;
}

/* The bytes in use in the file: its pages less the free ones, after a checkpoint. */
static int64_t used_bytes(const char *path)
{
    return st_path_int(path, "SELECT (SELECT page_count FROM pragma_page_count) * "
                             "(SELECT page_size FROM pragma_page_size) - "
                             "(SELECT freelist_count FROM pragma_freelist_count) * "
                             "(SELECT page_size FROM pragma_page_size)");
}

/*
 * Twenty kernels of one tree: the second to the twentieth cost their own
 * rows, not another copy of the 300-header list (about 37 KiB of key
 * material and input rows each when every entry kept its own).
 */
static void test_two_entries_one_list(void)
{
    const char *path = test_path("share.db");
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK_RC(kcache_store_put(s, &kernels[0].e), 0);
    kcache_store_close(s);
    int64_t one = used_bytes(path);
    s = st_open(path, UINT64_MAX, NULL, NULL);
    for (unsigned i = 1; i < N_KERNELS; i++)
        CHECK_RC(kcache_store_put(s, &kernels[i].e), 0);
    CHECK(all_whole(s, 0, N_KERNELS));
    kcache_store_close(s);
    int64_t all = used_bytes(path);
    double per = (double)(all - one) / (N_KERNELS - 1);
    fprintf(stderr, "  one kernel: %lld bytes; each further kernel of the tree: %.0f bytes\n",
            (long long)one, per);
    CHECK(per < 2048);
    CHECK(st_path_int(path, "SELECT count(*) FROM header_list") == 1);
    CHECK(st_path_int(path, "SELECT count(*) FROM input_list") == 1);
    CHECK(st_path_int(path, "SELECT count(*) FROM input_list_item") == ST_HEADERS);
    CHECK(st_path_int(path, "SELECT count(*) FROM entry_input") == N_KERNELS); /* the sources */

    /* A kernel of another tree: a list of its own. */
    s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK_RC(kcache_store_put(s, &kernels[N_KERNELS].e), 0);
    CHECK(all_whole(s, 0, N_KERNELS + 1));
    kcache_store_close(s);
    CHECK(st_path_int(path, "SELECT count(*) FROM header_list") == 2);
    CHECK(st_path_int(path, "SELECT count(*) FROM input_list") == 2);
    st_check_books(path, "sharing");
}

/* A list stays while an entry refers to it and goes with the last, however that goes. */
static void test_list_goes_with_last_entry(void)
{
    const char *path = test_path("delete.db");
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i <= N_KERNELS; i++)
        CHECK_RC(kcache_store_put(s, &kernels[i].e), 0);
    for (unsigned i = 0; i + 1 < N_KERNELS; i++)
        CHECK_RC(kcache_store_delete(s, &kernels[i].e.key), 0);
    CHECK(all_whole(s, N_KERNELS - 1, N_KERNELS + 1));
    st_check_books(path, "deleting all but one of a tree");
    CHECK(st_path_int(path, "SELECT count(*) FROM header_list") == 2);
    CHECK(st_path_int(path, "SELECT count(*) FROM input WHERE size < 40") == 2 * ST_HEADERS + 2);
    CHECK_RC(kcache_store_delete(s, &kernels[N_KERNELS - 1].e.key), 0);
    st_check_books(path, "deleting the last of a tree");
    CHECK(st_path_int(path, "SELECT count(*) FROM header_list") == 1);
    CHECK(st_path_int(path, "SELECT count(*) FROM input_list") == 1);
    CHECK(st_path_int(path, "SELECT count(*) FROM input_list_item") == ST_HEADERS);
    CHECK(st_path_int(path, "SELECT count(*) FROM input") == ST_HEADERS + 1);
    /* A replaced entry (the same key put again) keeps its list. */
    CHECK_RC(kcache_store_put(s, &kernels[N_KERNELS].e), 0);
    CHECK(all_whole(s, N_KERNELS, N_KERNELS + 1));
    st_check_books(path, "replacing");

    /* Prune: the whole tree evicted, its list with it. */
    for (unsigned i = 0; i < N_KERNELS; i++)
        CHECK_RC(kcache_store_put(s, &kernels[i].e), 0);
    kcache_prune_options po = KCACHE_PRUNE_OPTIONS_INIT;
    po.max_entries = 1;
    kcache_prune_result pr = KCACHE_PRUNE_RESULT_INIT;
    CHECK_RC(kcache_store_prune(&pr, s, &po), 0);
    CHECK(pr.evicted == N_KERNELS);
    st_check_books(path, "a prune");
    CHECK(st_path_int(path, "SELECT count(*) FROM header_list") == 1);
    CHECK(all_whole(s, N_KERNELS - 1, N_KERNELS)); /* the most recent one stays */

    CHECK_RC(kcache_store_clear(s), 0);
    st_check_books(path, "clearing");
    CHECK(st_path_int(path, "SELECT (SELECT count(*) FROM header_list) + (SELECT count(*) FROM "
                            "input_list) + (SELECT count(*) FROM input_list_item)") == 0);
    kcache_store_close(s);
}

/* Export carries each entry whole; the import shares the lists again. */
static void test_bundle_round_trip(void)
{
    const char *from = test_path("rt-src.db"), *bundle = test_path("rt.kcb"),
               *to = test_path("rt-dst.db");
    kcache_store *s = st_open(from, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i <= N_KERNELS; i++)
        CHECK_RC(kcache_store_put(s, &kernels[i].e), 0);
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    CHECK_RC(kcache_bundle_export(&r, s, bundle, NULL), 0);
    CHECK(r.entries == N_KERNELS + 1);
    kcache_store_close(s);
    CHECK(st_path_int(bundle, "SELECT count(*) FROM header_list") == 2);

    kcache_store *t = st_open(to, UINT64_MAX, NULL, NULL);
    CHECK(st_import(t, bundle) == N_KERNELS + 1);
    CHECK(all_whole(t, 0, N_KERNELS + 1));
    kcache_store_close(t);
    CHECK(st_path_int(to, "SELECT count(*) FROM header_list") == 2);
    CHECK(st_path_int(to, "SELECT count(*) FROM input_list") == 2);
    st_check_books(to, "an import");
}

struct damage_seen {
    unsigned n;
};

static void on_damaged(void *ud, const kcache_key *key, const char *why)
{
    (void)key;
    (void)why;
    ((struct damage_seen *)ud)->n++;
}

/* verify on the file: damaged entries found (read-only), or found and deleted (--fix). */
static unsigned verify(const char *path, int fix, unsigned *entries)
{
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = path;
    o.max_size = UINT64_MAX;
    o.read_only = !fix;
    kcache_store *s = st_open_with(&o);
    kcache_verify_result r = KCACHE_VERIFY_RESULT_INIT;
    struct damage_seen seen = {0};
    CHECK_RC(kcache_store_verify(&r, s, NULL, on_damaged, &seen), 0);
    CHECK(r.integrity_ok);
    CHECK(seen.n == r.damaged);
    *entries = (unsigned)r.entries;
    kcache_store_close(s);
    return (unsigned)r.damaged;
}

/*
 * One way of damaging the shared rows: verify finds every entry of the tree
 * (and no other) damaged without changing the file; with --fix they are
 * deleted, the list with them, the kernel of the other tree stays whole, and
 * a second verify finds nothing.
 */
static void damaged_case(const char *name, const char *sql)
{
    const char *path = test_path(name);
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i <= N_KERNELS; i++)
        CHECK_RC(kcache_store_put(s, &kernels[i].e), 0);
    kcache_store_close(s);
    st_sql(path, sql);
    unsigned entries = 0;
    unsigned found = verify(path, 0, &entries);
    if (found != N_KERNELS)
        fprintf(stderr, "  %s: verify found %u damaged of %u\n", name, found, entries);
    CHECK(found == N_KERNELS && entries == N_KERNELS + 1);
    CHECK(st_path_int(path, "SELECT count(*) FROM entry") == N_KERNELS + 1); /* read-only: kept */
    CHECK(verify(path, 1, &entries) == N_KERNELS);
    CHECK(verify(path, 1, &entries) == 0 && entries == 1);
    st_check_books(path, name);
    s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK(all_whole(s, N_KERNELS, N_KERNELS + 1));
    kcache_store_close(s);
}

static void test_damaged_shared_rows(void)
{
    /* An entry's own part of its material (kernels 0 to 19 are rows 1 to 20). */
    damaged_case("rest.db", "UPDATE entry_info SET key_material = CAST(substr(key_material, 1,"
                            " 20) || X'ff' || substr(key_material, 22) AS BLOB) WHERE id <= 20");
    /* The header list's bytes (kernel 0's tree is list 1). */
    damaged_case("bytes.db", "UPDATE header_list SET data = CAST(substr(data, 1, 100) ||"
                             " X'ff' || substr(data, 102) AS BLOB) WHERE id = 1");
    /* The list's row gone. */
    damaged_case("gone.db", "DELETE FROM header_list WHERE id = 1");
    /* An item of the shared input list gone. */
    damaged_case("item.db", "DELETE FROM input_list_item WHERE list_id = 1 AND seq = 7");
    /* An input of the list altered. */
    damaged_case("input.db",
                 "UPDATE input SET data = X'2f2f20646f6f6d6564' WHERE id ="
                 " (SELECT input_id FROM input_list_item WHERE list_id = 1 AND seq = 3)");
}

/* Kernel i as a hit reads it (no inputs): 1 when its bytes and key material are as put. */
static int hit_whole(kcache_store *s, unsigned i)
{
    kcache_entry *e = NULL;
    int ok = kcache_store_get(&e, s, &kernels[i].e.key, KCACHE_GET_NO_TOUCH) == 0 &&
             e->size == kernels[i].e.size && !memcmp(e->data, kernels[i].e.data, e->size) &&
             e->key_material_size == kernels[i].material_size &&
             !memcmp(e->key_material, kernels[i].material, kernels[i].material_size);
    kcache_entry_free(e);
    return ok;
}

/*
 * A handle decodes a list its hits share twice at most (shared.c,
 * kc_decoded_keep: kept from the second): what it keeps are the bytes of
 * the list's digest, so its later hits read no row, not even one damaged
 * since; a new handle reads the row, and verify, in any handle, checks the
 * row itself.
 */
static void test_decoded_once(void)
{
    const char *path = test_path("decoded.db");
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i < N_KERNELS; i++)
        CHECK_RC(kcache_store_put(s, &kernels[i].e), 0);
    kcache_store_close(s);
    s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK(hit_whole(s, 0)); /* decoded: noted */
    CHECK(hit_whole(s, 1)); /* decoded again: kept */
    st_sql(path, "UPDATE header_list SET data = CAST(substr(data, 1, 100) ||"
                 " X'ff' || substr(data, 102) AS BLOB) WHERE id = 1");
    unsigned whole = 0;
    for (unsigned i = 2; i < N_KERNELS; i++)
        whole += (unsigned)hit_whole(s, i);
    if (whole != N_KERNELS - 2)
        fprintf(stderr, "  decoded: %u of %u later hits whole\n", whole, N_KERNELS - 2);
    CHECK(whole == N_KERNELS - 2);
    kcache_verify_result r = KCACHE_VERIFY_RESULT_INIT;
    CHECK_RC(kcache_store_verify(&r, s, NULL, NULL, NULL), 0);
    CHECK(r.damaged == N_KERNELS);
    kcache_store_close(s);
}

int main(void)
{
    for (unsigned i = 0; i < N_KERNELS; i++)
        st_kernel_make(&kernels[i], i, 0);
    st_kernel_make(&kernels[N_KERNELS], N_KERNELS, 1);
    test_two_entries_one_list();
    test_list_goes_with_last_entry();
    test_bundle_round_trip();
    test_damaged_shared_rows();
    test_decoded_once();
    for (unsigned i = 0; i <= N_KERNELS; i++)
        st_kernel_free(&kernels[i]);
    return test_done();
}
