/* Edges of the store's contract, each once a bug. */
#include <ctype.h>
#include <unistd.h>

#include <kcache/verify.h>

#include "storetest.h"

/* An empty artifact is an artifact: SQLite hands its empty blob back as NULL,
 * which must not read as a damaged entry (it was deleted and counted). */
static void test_empty_artifact(kcache_store *s)
{
    kcache_entry e = KCACHE_ENTRY_INIT;
    e.key = st_key(1);
    e.kind = KCACHE_KIND_PTX;
    e.arch = "sm_90";
    e.data = NULL;
    e.size = 0;
    CHECK_RC(kcache_store_put(s, &e), 0);
    for (int i = 0; i < 2; i++) {
        kcache_entry *got = NULL;
        CHECK_RC(kcache_store_get(&got, s, &e.key, KCACHE_GET_DEFAULT), 0);
        CHECK(got && got->size == 0 && got->data && ((const char *)got->data)[0] == '\0');
        kcache_entry_free(got);
    }
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    CHECK(st && st->corrupt == 0 && st->entries == 1);
    kcache_stats_free(st);
}

static int stop_with(void *ud, const kcache_entry *e)
{
    (void)e;
    return *(const int *)ud;
}

/* A list callback may return any value, even one that looks like
 * KCACHE_ECORRUPT: it is handed back, and the file is not set aside. */
static void test_list_callback_value(kcache_store *s, const char *path)
{
    int values[] = {KCACHE_ECORRUPT, KCACHE_EFULL, 42};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++)
        CHECK_RC(kcache_store_list(s, NULL, stop_with, &values[i]), values[i]);
    kcache_entry *got = NULL;
    kcache_key k = st_key(1);
    CHECK_RC(kcache_store_get(&got, s, &k, KCACHE_GET_NO_TOUCH), 0);
    kcache_entry_free(got);
    char aside[600];
    snprintf(aside, sizeof(aside), "%s.corrupt-", path);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "ls '%s'* >/dev/null 2>&1", aside);
    CHECK(system(cmd) != 0);
}

/* A delete whose statement cannot be prepared (here: the table is gone)
 * fails with the store's message, never reading a statement it never got. */
static void test_delete_unpreparable(const char *dir)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/unpreparable.db", dir);
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    static uint8_t scratch[4096];
    CHECK_RC(st_put(s, 7, sizeof(scratch), scratch), 0);
    kcache_store_close(s);
    sqlite3 *db = NULL;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "ALTER TABLE entry RENAME TO entry_gone", NULL, NULL, NULL) ==
          SQLITE_OK);
    sqlite3_close(db);
    s = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_key k = st_key(7);
    int rc = kcache_store_delete(s, &k);
    CHECK(rc != 0 && rc != KCACHE_ENOTFOUND);
    CHECK(strstr(kcache_store_errmsg(s), "statement") != NULL);
    kcache_store_close(s);
}

static int no_entry(void *userdata, const kcache_entry *entry)
{
    (void)userdata;
    (void)entry;
    return 0;
}

/* The message for a struct of an unknown version: the versions known are
 * "1" or "1..max". */
static int version_message_is(const char *msg, const char *type, unsigned version, unsigned max,
                              const char *init)
{
    char known[32], want[300];
    if (max == 1)
        snprintf(known, sizeof(known), "1");
    else
        snprintf(known, sizeof(known), "1..%u", max);
    snprintf(want, sizeof(want),
             "%s version %u is not one this library knows (%s): initialise it with %s or %s_init()",
             type, version, known, init, type);
    if (strcmp(msg, want) == 0)
        return 1;
    fprintf(stderr, "got:  %s\nwant: %s\n", msg, want);
    return 0;
}

/* Whether a call returned KCACHE_EINVAL with the message for type at version. */
static int refused(int rc, kcache_store *s, const char *type, unsigned version, unsigned max)
{
    char init[64];
    size_t i = 0;
    for (; type[i] && i + 6 < sizeof(init); i++)
        init[i] = (char)toupper((unsigned char)type[i]);
    snprintf(init + i, sizeof(init) - i, "_INIT");
    if (rc != KCACHE_EINVAL) {
        fprintf(stderr, "%s version %u: returned %d, wanted KCACHE_EINVAL\n", type, version, rc);
        return 0;
    }
    return version_message_is(kcache_store_errmsg(s), type, version, max, init);
}

/* Options and result structs carry a version the library checks, so that a
 * caller built against other fields is told, not written past. */
static void test_versions_checked(kcache_store *s, const char *dir)
{
    kcache_prune_result pr = KCACHE_PRUNE_RESULT_INIT;
    pr.version = 0;
    CHECK_RC(kcache_store_prune(&pr, s, NULL), KCACHE_EINVAL);
    CHECK(strstr(kcache_store_errmsg(s), "KCACHE_PRUNE_RESULT_INIT") != NULL);
    pr.version = KCACHE_PRUNE_RESULT_VERSION;
    CHECK_RC(kcache_store_prune(&pr, s, NULL), 0);
    CHECK(pr.version == KCACHE_PRUNE_RESULT_VERSION);

    kcache_verify_result vr = KCACHE_VERIFY_RESULT_INIT;
    vr.version = KCACHE_VERIFY_RESULT_VERSION + 1;
    CHECK_RC(kcache_store_verify(&vr, s, NULL, NULL, NULL), KCACHE_EINVAL);

    char bundle[600];
    snprintf(bundle, sizeof(bundle), "%s/versions.kcache", dir);
    kcache_bundle_options bo = KCACHE_BUNDLE_OPTIONS_INIT;
    bo.version = 0;
    CHECK_RC(kcache_bundle_export(NULL, s, bundle, &bo), KCACHE_EINVAL);
    kcache_bundle_result br = KCACHE_BUNDLE_RESULT_INIT;
    br.version = 7;
    CHECK_RC(kcache_bundle_export(&br, s, bundle, NULL), KCACHE_EINVAL);
    CHECK(access(bundle, F_OK) != 0);
    br.version = KCACHE_BUNDLE_RESULT_VERSION;
    CHECK_RC(kcache_bundle_export(&br, s, bundle, NULL), 0);
    CHECK(br.version == KCACHE_BUNDLE_RESULT_VERSION && br.entries == 1);

    /* One wording for every struct: which struct, the version given, the
     * versions this build knows, and how to make one it does. */
    kcache_prune_options po = KCACHE_PRUNE_OPTIONS_INIT;
    po.version = 7;
    CHECK_RC(kcache_store_prune(NULL, s, &po), KCACHE_EINVAL);
    CHECK(version_message_is(kcache_store_errmsg(s), "kcache_prune_options", 7,
                             KCACHE_PRUNE_OPTIONS_VERSION, "KCACHE_PRUNE_OPTIONS_INIT"));
    kcache_filter f = KCACHE_FILTER_INIT;
    f.version = 0;
    CHECK_RC(kcache_store_list(s, &f, no_entry, NULL), KCACHE_EINVAL);
    CHECK(version_message_is(kcache_store_errmsg(s), "kcache_filter", 0, KCACHE_FILTER_VERSION,
                             "KCACHE_FILTER_INIT"));
    bo.version = 0;
    CHECK_RC(kcache_bundle_export(NULL, s, bundle, &bo), KCACHE_EINVAL);
    CHECK(version_message_is(kcache_store_errmsg(s), "kcache_bundle_options", 0,
                             KCACHE_BUNDLE_OPTIONS_VERSION, "KCACHE_BUNDLE_OPTIONS_INIT"));
    /* The options are checked first, then the result; a refused batch is none. */
    kcache_recompress_options ro = KCACHE_RECOMPRESS_OPTIONS_INIT;
    kcache_recompress_result rr = KCACHE_RECOMPRESS_RESULT_INIT;
    ro.version = 0;
    rr.version = 7;
    CHECK(refused(kcache_store_recompress(&rr, s, &ro), s, "kcache_recompress_options", 0,
                  KCACHE_RECOMPRESS_OPTIONS_VERSION));
    CHECK(refused(kcache_store_recompress(&rr, s, NULL), s, "kcache_recompress_result", 7,
                  KCACHE_RECOMPRESS_RESULT_VERSION));
    kcache_batch_options bao = KCACHE_BATCH_OPTIONS_INIT;
    kcache_batch *batch = NULL;
    bao.version = 7;
    CHECK(refused(kcache_batch_new(&batch, s, &bao), s, "kcache_batch_options", 7,
                  KCACHE_BATCH_OPTIONS_VERSION) && !batch);
    kcache_namespace_stats ns = KCACHE_NAMESPACE_STATS_INIT;
    ns.version = 0;
    CHECK(refused(kcache_store_namespace_stats(&ns, s, "edges"), s, "kcache_namespace_stats", 0,
                  KCACHE_NAMESPACE_STATS_VERSION));

    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    CHECK(st && st->version == KCACHE_STATS_VERSION);
    kcache_stats_free(st);
}

int main(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("edges.db"));
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    test_empty_artifact(s);
    test_list_callback_value(s, path);
    {
        char dir[512];
        snprintf(dir, sizeof(dir), "%s", path);
        *strrchr(dir, '/') = '\0';
        test_versions_checked(s, dir);
    }
    kcache_store_close(s);
    CHECK(st_integrity_ok(path));
    char dir[512];
    snprintf(dir, sizeof(dir), "%s", path);
    *strrchr(dir, '/') = '\0';
    test_delete_unpreparable(dir);
    return test_done();
}
