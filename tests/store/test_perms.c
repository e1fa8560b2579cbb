/*
 * Permissions: what kcache creates is its user's alone, and nothing planted
 * where it writes makes it write somewhere else.
 *
 *   - with umask 0 (so that only kcache's own modes count): the directories
 *     it creates are 0700; the database, its -wal and -shm, a damaged file it
 *     sets aside, the bundles it exports and the config file it writes are 0600;
 *   - symlinks planted at the names kcache writes (the -wal and -shm of a new
 *     cache, an export's temporary file and its companions, the config file's
 *     temporary file) point to victim files outside: after kcache's work the
 *     victims are byte for byte as they were;
 *   - a cache directory writable by others is reported through the log.
 */
#include <dirent.h>
#include <fcntl.h>
#include <kcache/bundle.h>
#include <kcache/config.h>

#include "util/common.h"
#include "results.h"
#include "storetest.h"

static uint8_t scratch[8000];
static unsigned modes_checked, modes_wrong, symlinks_planted, victims_touched, warnings_ok;

static void expect_mode(const char *path, unsigned want, const char *what)
{
    struct stat st;
    modes_checked++;
    if (lstat(path, &st) != 0) {
        fprintf(stderr, "%s: %s does not exist\n", what, path);
        modes_wrong++;
        test_failures++;
        return;
    }
    if ((st.st_mode & 07777) != want) {
        fprintf(stderr, "%s: %s has mode %04o, wanted %04o\n", what, path,
                (unsigned)(st.st_mode & 07777), want);
        modes_wrong++;
        test_failures++;
    }
}

static kcache_store *open_at(const char *path, struct st_log *l)
{
    memset(l, 0, sizeof(*l));
    return st_open(path, UINT64_MAX, st_log_fn, l);
}

/* ---- modes -------------------------------------------------------------------------- */

static void test_modes(void)
{
    char dir[600], path[700], side[720];
    snprintf(dir, sizeof(dir), "%s/new/deeper", test_dir());
    snprintf(path, sizeof(path), "%s/kcache.db", dir);
    struct st_log l;
    kcache_store *s = open_at(path, &l);
    for (unsigned i = 0; i < 5; i++)
        CHECK_RC(st_put(s, i, sizeof(scratch), scratch), 0);
    /* While it is open: the WAL and the index exist. */
    expect_mode(test_path("new"), 0700, "a directory kcache made");
    expect_mode(dir, 0700, "a directory kcache made");
    expect_mode(path, 0600, "the database");
    snprintf(side, sizeof(side), "%s-wal", path);
    expect_mode(side, 0600, "the WAL");
    snprintf(side, sizeof(side), "%s-shm", path);
    expect_mode(side, 0600, "the shared-memory index");
    snprintf(side, sizeof(side), "%s-lock", path);
    expect_mode(side, 0600, "the lock that tells whether others use the cache");

    /* An export. */
    char bundle[700];
    snprintf(bundle, sizeof(bundle), "%s/out.kcache", test_dir());
    CHECK_RC(kcache_bundle_export(NULL, s, bundle, NULL), 0);
    expect_mode(bundle, 0600, "an exported bundle");
    kcache_store_close(s);

    /* A damaged file set aside: the one kcache made, damaged in place. */
    FILE *f = fopen(path, "r+b");
    REQUIRE(f);
    REQUIRE(fwrite("this is no longer a database", 1, 28, f) == 28);
    REQUIRE(fclose(f) == 0);
    snprintf(side, sizeof(side), "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof(side), "%s-shm", path);
    unlink(side);
    s = open_at(path, &l);
    CHECK(l.warnings == 1 && strstr(l.last, ".corrupt-"));
    kcache_store_close(s);
    DIR *d = opendir(dir);
    REQUIRE(d);
    int found = 0;
    for (struct dirent *de; (de = readdir(d));)
        if (strstr(de->d_name, ".corrupt-")) {
            char aside[1000];
            snprintf(aside, sizeof(aside), "%s/%s", dir, de->d_name);
            expect_mode(aside, 0600, "a damaged file set aside");
            found++;
        }
    closedir(d);
    CHECK(found == 1);

    /* The config file, written by kcache config set. */
    char cdir[600];
    snprintf(cdir, sizeof(cdir), "%s/conf/dir", test_dir());
    setenv("KCACHE_DIR", cdir, 1);
    kcache_config *c = NULL;
    char err[512];
    REQUIRE(kcache_config_load(&c, NULL, 0, err, sizeof(err)) == 0);
    CHECK_RC(kcache_config_set(c, "max_size", "1G"), 0);
    char conf[700];
    snprintf(conf, sizeof(conf), "%s", kcache_config_file(c));
    expect_mode(conf, 0600, "the config file");
    expect_mode(cdir, 0700, "a directory made for the config file");
    kcache_config_free(c);
    unsetenv("KCACHE_DIR");
}

/* ---- symlinks planted where kcache writes --------------------------------------------- */

static char victim[700];
static const char victim_text[] = "a file of the user's that kcache must never write\n";

static void plant(const char *at)
{
    unlink(at);
    REQUIRE(symlink(victim, at) == 0);
    symlinks_planted++;
}

static void check_victim(const char *what)
{
    FILE *f = fopen(victim, "rb");
    char buf[256] = "";
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    if (n != strlen(victim_text) || memcmp(buf, victim_text, n) != 0) {
        fprintf(stderr, "%s: the file a planted symlink points to was written\n", what);
        victims_touched++;
        test_failures++;
        test_write_text(victim, victim_text);
    }
}

static void test_symlinks(void)
{
    char outside[600];
    snprintf(outside, sizeof(outside), "%s/outside", test_dir());
    REQUIRE(mkdir(outside, 0700) == 0);
    snprintf(victim, sizeof(victim), "%s/victim.txt", outside);
    test_write_text(victim, victim_text);

    /* The -wal and -shm of a cache about to be created. */
    char dir[600], path[700], side[720];
    snprintf(dir, sizeof(dir), "%s/links", test_dir());
    REQUIRE(mkdir(dir, 0700) == 0);
    snprintf(path, sizeof(path), "%s/kcache.db", dir);
    snprintf(side, sizeof(side), "%s-wal", path);
    plant(side);
    snprintf(side, sizeof(side), "%s-shm", path);
    plant(side);
    struct st_log l;
    memset(&l, 0, sizeof(l));
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = path;
    o.max_size = UINT64_MAX;
    o.log = st_log_fn;
    o.log_userdata = &l;
    kcache_store *s = NULL;
    char err[512] = "";
    int rc = kcache_store_open(&s, &o, err, sizeof(err));
    if (rc == 0) {
        rc = st_put(s, 1, sizeof(scratch), scratch);
        if (rc)
            snprintf(err, sizeof(err), "%s", kcache_store_errmsg(s));
        kcache_store_close(s);
    }
    printf("symlinks planted as -wal and -shm: %s%s\n", rc ? "refused: " : "cache works",
           rc ? err : "");
    /* Refused, saying which file and what to do. */
    CHECK(rc == KCACHE_EIO && strstr(err, "symbolic link") && strstr(err, "-wal"));
    check_victim("symlinks planted as the -wal and -shm of a new cache");

    /* An export's temporary file and its companions. */
    snprintf(path, sizeof(path), "%s/cache2.db", dir);
    s = st_open(path, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i < 3; i++)
        REQUIRE(st_put(s, i, sizeof(scratch), scratch) == 0);
    char bundle[700], tmp[760];
    snprintf(bundle, sizeof(bundle), "%s/out.kcache", dir);
    static const char *const sides[] = {"", "-journal", "-wal", "-shm"};
    for (size_t i = 0; i < KC_ARRAY_SIZE(sides); i++) {
        snprintf(tmp, sizeof(tmp), "%s.tmp-%ld%s", bundle, (long)getpid(), sides[i]);
        plant(tmp);
    }
    CHECK_RC(kcache_bundle_export(NULL, s, bundle, NULL), 0);
    kcache_store_close(s);
    check_victim("symlinks planted at an export's temporary names");
    struct stat st;
    CHECK(lstat(bundle, &st) == 0 && S_ISREG(st.st_mode));

    /* The bundle name itself: replaced by the new file, the link's target untouched. */
    plant(bundle);
    s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK_RC(kcache_bundle_export(NULL, s, bundle, NULL), 0);
    kcache_store_close(s);
    check_victim("a symlink planted at the bundle's name");

    /* The config file's temporary name. */
    char cdir[700];
    snprintf(cdir, sizeof(cdir), "%s/conf", dir);
    REQUIRE(mkdir(cdir, 0700) == 0);
    setenv("KCACHE_DIR", cdir, 1);
    kcache_config *c = NULL;
    REQUIRE(kcache_config_load(&c, NULL, 0, err, sizeof(err)) == 0);
    snprintf(tmp, sizeof(tmp), "%s.tmp-%ld", kcache_config_file(c), (long)getpid());
    plant(tmp);
    CHECK_RC(kcache_config_set(c, "max_size", "2G"), 0);
    kcache_config_free(c);
    unsetenv("KCACHE_DIR");
    check_victim("a symlink planted at the config file's temporary name");

    /* A damaged file with a link as its -shm: refused, nothing written through the link. */
    snprintf(path, sizeof(path), "%s/damaged.db", dir);
    test_write_text(path, "not a database, and long enough to be looked at: xxxxxxxxxxxxxxxxxxxxxx"
                          "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n");
    snprintf(side, sizeof(side), "%s-shm", path);
    plant(side);
    o.path = path;
    s = NULL;
    CHECK_RC(kcache_store_open(&s, &o, err, sizeof(err)), KCACHE_EIO);
    kcache_store_close(s);
    check_victim("a symlink planted as a damaged file's -shm");
}

/* ---- a directory others can write -------------------------------------------------------- */

static void test_open_dir_warning(void)
{
    char dir[600], path[700];
    snprintf(dir, sizeof(dir), "%s/shared", test_dir());
    REQUIRE(mkdir(dir, 0777) == 0);
    REQUIRE(chmod(dir, 0777) == 0);
    snprintf(path, sizeof(path), "%s/kcache.db", dir);
    struct st_log l;
    kcache_store *s = open_at(path, &l);
    kcache_store_close(s);
    if (l.warnings >= 1 && strstr(l.last, "writable by other users") && strstr(l.last, dir))
        warnings_ok++;
    else {
        fprintf(stderr, "a cache directory of mode 0777: no warning (%d, %s)\n", l.warnings,
                l.last);
        test_failures++;
    }
    /* A private one: no warning. */
    REQUIRE(chmod(dir, 0700) == 0);
    s = open_at(path, &l);
    kcache_store_close(s);
    CHECK(l.warnings == 0);
    warnings_ok += l.warnings == 0;
}

int main(void)
{
    umask(0);
    test_modes();
    test_symlinks();
    test_open_dir_warning();
    printf("permissions: %u modes checked, %u wrong; %u symlinks planted, %u victims written; "
           "%u warnings as expected\n",
           modes_checked, modes_wrong, symlinks_planted, victims_touched, warnings_ok);
    test_record("perms", "modes=%u\tmodes_wrong=%u\tsymlinks=%u\tvictims_written=%u",
                modes_checked, modes_wrong, symlinks_planted, victims_touched);
    return test_done();
}
