/*
 * What kcache finds at a cache's path when someone else was there first, and
 * what it must do: recover without a manual rm (another database moved over
 * the file under a WAL with frames, interior pages zeroed, lease rows that
 * break the schema, a cache still being created by another process), refuse
 * what is not its user's (another user's cache, a symbolic link where the
 * database should be), and run from a copy of the build under a directory
 * only its owner may enter, by a path with a space.
 *
 *   test_hostile_files              every case
 *   test_hostile_files fifo ...     only these cases (names below)
 */
#include <kcache/bundle.h>
#include <dirent.h>
#include <sys/inotify.h>
#include <sys/time.h>

#include "casetest.h"

#define NOBODY 65534

/* ---- another database moved over the file under a WAL with frames -------------------- */

/* db's WAL left with frames, then other (a cache of its own, all in its file) moved over db. */
static kcache_store *frames_then_moved_over(int tc, const char *db, const char *other, int hold)
{
    /* A cache checkpointed whole, so that the frames after it are only changes to its pages. */
    kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
    for (unsigned i = 10; i < 10 + (hold ? 3u : 0u); i++)
        REQUIRE(put_real(s, i, NULL, NULL) == 0);
    kcache_store_close(s);
    /* The frames of a process killed after its puts: a close would empty the WAL. */
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        kcache_store *c = st_open(db, UINT64_MAX, NULL, NULL);
        for (unsigned i = 0; i < 2; i++)
            if (put_real(c, i, NULL, NULL) != 0)
                _exit(1);
        _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    s = st_open(other, UINT64_MAX, NULL, NULL);
    /* Pages laid out otherwise than db's, so that its frames land on the wrong ones. */
    for (unsigned i = 100; i < 100 + (hold ? 20u : 1u); i++)
        REQUIRE(put_real(s, i, NULL, NULL) == 0);
    REQUIRE(kcache_store_vacuum(s) == 0); /* all in the file, no WAL */
    kcache_store_close(s);
    if (hold) {
        /* Rebuilt whole (kcache's vacuum only hands pages back), so that no page is where
         * db's frames expect it. */
        sqlite3 *raw = NULL;
        REQUIRE(sqlite3_open(other, &raw) == SQLITE_OK);
        REQUIRE(sqlite3_exec(raw, "VACUUM", NULL, NULL, NULL) == SQLITE_OK);
        sqlite3_close(raw);
    }
    /* A program that keeps the cache open (the drop-in, a Python process) from before the move. */
    kcache_store *holder = hold ? st_open(db, UINT64_MAX, NULL, NULL) : NULL;
    char wal[800];
    snprintf(wal, sizeof(wal), "%s-wal", db);
    EXPECT(st_file_size(wal) > 0, "the old WAL should still hold frames");
    REQUIRE(rename(other, db) == 0);
    return holder;
}

static void case_moved_over_wal(int tc)
{
    const char *db = in_case(tc, "kcache.db"), *other = in_case(tc, "other.db");
    frames_then_moved_over(tc, db, other, 0);
    kcache_store *s;
    struct cli_out o;
    if (have_exe()) {
        run_kcache(&o, db, NULL, 60, ARGS("stats"));
        run_kcache(&o, db, NULL, 60, ARGS("clear"));
        EXPECT(o.rc == 0, "clear exit %d: %s", o.rc, o.err);
        run_kcache(&o, db, NULL, 60, ARGS("verify"));
        EXPECT(o.rc == 0, "verify exit %d: %s", o.rc, o.err);
    }
    /* The cache works again: what is put is served. */
    s = st_open(db, UINT64_MAX, NULL, NULL);
    int rc = put_real(s, 200, NULL, NULL);
    EXPECT(rc == 0, "put after recovery: %d %s", rc, kcache_store_errmsg(s));
    kcache_key k = key_of(200);
    EXPECT(has(s, &k), "entry put after recovery not served");
    kcache_store_close(s);
    EXPECT(st_integrity_ok(db), "integrity");
}

/*
 * The same while another process has the cache open: the file alone is sound
 * and the damage is its foreign WAL, not the shared-memory index the others
 * map. Every compile used to be "uncached" (blaming the index) for as long
 * as that process lived.
 */
static void case_moved_over_wal_in_use(int tc)
{
    const char *db = in_case(tc, "kcache.db"), *other = in_case(tc, "other.db");
    kcache_store *holder = frames_then_moved_over(tc, db, other, 1);
    kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
    int rc = put_real(s, 200, NULL, NULL);
    EXPECT(rc == 0, "put beside a process holding the cache: %d %s", rc, kcache_store_errmsg(s));
    kcache_key k = key_of(200);
    EXPECT(has(s, &k), "entry put beside a process holding the cache not served");
    kcache_store_close(s);
    struct cli_out o;
    if (have_exe()) {
        run_kcache(&o, db, NULL, 60, ARGS("verify"));
        EXPECT(o.rc == 0, "verify exit %d: %s", o.rc, o.err);
    }
    kcache_store_close(holder);
    EXPECT(st_integrity_ok(db), "integrity");
}

/* Names in the case's directory that contain `part`, the first kept in `first`. */
static unsigned names_with(int tc, const char *part, char *first, size_t first_size)
{
    DIR *d = opendir(case_dir(tc));
    unsigned n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, part) && n++ == 0)
            snprintf(first, first_size, "%s", e->d_name);
    if (d)
        closedir(d);
    return n;
}

/*
 * The check that tells a foreign WAL from a damaged -shm (the case above)
 * leaves nothing beside the cache, even killed: the moment a file with
 * "walcheck" in its name appears in the directory (inotify), the process is
 * killed. The check used to read hard links to the live file and WAL in a
 * `.walcheck-*` directory beside them, which a kill left there for good.
 */
static void case_killed_during_wal_check(int tc)
{
    unsigned killed = 0, left = 0;
    char first[256] = "";
    for (unsigned round = 0; round < 3; round++) {
        char name[64], oname[64];
        snprintf(name, sizeof(name), "r%u.db", round);
        snprintf(oname, sizeof(oname), "o%u.db", round);
        const char *db = in_case(tc, name);
        kcache_store *holder = frames_then_moved_over(tc, db, in_case(tc, oname), 1);
        int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        REQUIRE(in >= 0 && inotify_add_watch(in, case_dir(tc), IN_CREATE) >= 0);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            kcache_store *c = st_open(db, UINT64_MAX, NULL, NULL);
            kcache_key k = key_of(200);
            _exit(put_real(c, 200, NULL, NULL) == 0 && has(c, &k) ? 0 : 1);
        }
        double t0 = st_now();
        int status = 0;
        pid_t done;
        while ((done = waitpid(pid, &status, WNOHANG)) == 0 && st_now() - t0 < 60) {
            char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
            ssize_t n = read(in, buf, sizeof(buf));
            for (ssize_t off = 0; n > 0 && off < n;) {
                const struct inotify_event *e = (const void *)(buf + off);
                if (e->len && strstr(e->name, "walcheck") && kill(pid, SIGKILL) == 0)
                    killed++;
                off += (ssize_t)(sizeof(*e) + e->len);
            }
            if (n <= 0)
                usleep(200);
        }
        if (done != pid)
            waitpid(pid, &status, 0);
        /* Not killed: the check found the foreign WAL and the put was served. */
        EXPECT(!WIFEXITED(status) || WEXITSTATUS(status) == 0, "round %u: put after the move "
               "failed", round);
        close(in);
        kcache_store_close(holder);
        left = names_with(tc, "walcheck", first, sizeof(first));
    }
    EXPECT(killed == 0 && left == 0, "the WAL check made files beside the cache (killed then %u "
           "times): %u left, such as %s", killed, left, first);
}

/* ---- killed while the cache is first created ------------------------------------------ */

/*
 * A new cache's first open killed at a random moment of its creation, 40
 * times: whatever is left, every read-only verb works and says nothing
 * misleading, and the next writer stores. A creation that wrote its schema
 * with a rollback journal before switching to WAL left a hot journal that
 * read-only opens cannot roll back ("is read-only").
 */
static void case_killed_while_creating(int tc)
{
    if (!exe_or_skip(tc))
        return;
    /* How long a creation takes here, so that the kills fall across all of it. */
    double t0 = st_now();
    kcache_store *s = st_open(in_case(tc, "timed.db"), UINT64_MAX, NULL, NULL);
    double create_us = (st_now() - t0) * 1e6;
    kcache_store_close(s);
    srand(4242);
    unsigned failed = 0;
    for (unsigned round = 0; round < 40; round++) {
        char name[64];
        snprintf(name, sizeof(name), "k%u.db", round);
        const char *db = in_case(tc, name);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            kcache_store *c = st_open(db, UINT64_MAX, NULL, NULL);
            put_real(c, 1, NULL, NULL);
            kcache_store_close(c);
            _exit(0);
        }
        usleep((useconds_t)(create_us * 1.5 * rand() / RAND_MAX));
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        static const char *const verbs[] = {"stats", "ls", "verify"};
        for (int v = 0; v < 3; v++) {
            struct cli_out o;
            run_kcache(&o, db, NULL, 60, ARGS(verbs[v]));
            if (o.rc != 0 || strstr(o.err, "read-only") || strstr(o.err, "damaged")) {
                if (failed++ < 5)
                    EXPECT(0, "round %u: %s exit %d: %s", round, verbs[v], o.rc, o.err);
            }
        }
        s = st_open(db, UINT64_MAX, NULL, NULL);
        int rc = put_real(s, 2, NULL, NULL);
        kcache_key k = key_of(2);
        EXPECT(rc == 0 && has(s, &k), "round %u: put after the kill: %d %s", round, rc,
               kcache_store_errmsg(s));
        kcache_store_close(s);
    }
    EXPECT(failed == 0, "%u read-only commands of 120 failed after a kill during creation", failed);
}

/* ---- corrupt after open: clear and vacuum replace it --------------------------------- */

static void corrupt_interior(const char *db)
{
    kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i < 60; i++)
        REQUIRE(put_real(s, i, NULL, NULL) == 0);
    REQUIRE(kcache_store_vacuum(s) == 0);
    kcache_store_close(s);
    /* Zero page 6 and 7 (interior pages of the entry tables), keep the header. */
    int fd = open(db, O_WRONLY);
    REQUIRE(fd >= 0);
    static uint8_t zero[8192];
    REQUIRE(pwrite(fd, zero, sizeof(zero), 5 * 4096) == (ssize_t)sizeof(zero));
    close(fd);
}

static void case_damaged_pages(int tc)
{
    if (!exe_or_skip(tc))
        return;
    static const char *const verbs[] = {"clear", "vacuum"};
    for (int v = 0; v < 2; v++) {
        char name[64];
        snprintf(name, sizeof(name), "%s.db", verbs[v]);
        const char *db = in_case(tc, name);
        corrupt_interior(db);
        struct cli_out o;
        run_kcache(&o, db, NULL, 60, ARGS("verify"));
        EXPECT(o.rc == 1, "verify of a damaged file exit %d", o.rc);
        EXPECT(strstr(o.err, "kcache clear") || strstr(o.out, "kcache clear"),
               "verify does not say which command fixes it: %s%s", o.out, o.err);
        run_kcache(&o, db, NULL, 60, ARGS(verbs[v]));
        EXPECT(o.rc == 0, "%s of a damaged file: exit %d: %s", verbs[v], o.rc, o.err);
        run_kcache(&o, db, NULL, 60, ARGS("verify"));
        EXPECT(o.rc == 0, "verify after %s: exit %d: %s%s", verbs[v], o.rc, o.out, o.err);
    }
}

/* ---- a cache of another user --------------------------------------------------------- */

static void case_other_users_cache(int tc)
{
    if (geteuid() != 0) {
        printf("other-users-cache: needs root to make files of another user: skipped\n");
        cases_skipped++;
        return;
    }
    const char *dir = in_case(tc, "cache");
    REQUIRE(mkdir(dir, 0755) == 0);
    char db[800];
    snprintf(db, sizeof(db), "%s/kcache.db", dir);
    kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
    REQUIRE(put_real(s, 19, NULL, NULL) == 0);
    kcache_store_close(s);
    /* uid 1 owns it all, and lets everyone write the files. */
    test_sh("chmod 0666 '%s' '%s'-* && chown -R 1:1 '%s' && chmod 0711 '%s' '%s'", db, db, dir,
            test_dir(), case_dir(tc));
    for (int as_root = 0; as_root < 2; as_root++) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            if (!as_root && (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0))
                _exit(77);
            for (int ro = 0; ro < 2; ro++) {
                kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
                o.path = db;
                o.read_only = ro;
                kcache_store *t = NULL;
                char err[512] = "";
                int rc = kcache_store_open(&t, &o, err, sizeof(err));
                kcache_store_close(t);
                if (rc == 0 || !strstr(err, "owned by") || !test_one_line(err)) {
                    fprintf(stderr,
                            "other-users-cache: %s opening uid 1's cache (read-only %d): %d %s\n",
                            as_root ? "root" : "nobody", ro, rc, err);
                    _exit(1);
                }
            }
            _exit(0);
        }
        int status;
        REQUIRE(waitpid(pid, &status, 0) == pid);
        EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "another user's cache was used");
    }
}

/* ---- a symlink where the database should be ------------------------------------------ */

static void case_symlinked_database(int tc)
{
    const char *victim_dir = in_case(tc, "victim");
    REQUIRE(mkdir(victim_dir, 0755) == 0);
    char victim[800], link_dir[800], db[900];
    snprintf(victim, sizeof(victim), "%s/empty", victim_dir);
    test_spit(victim, "", 0);
    snprintf(link_dir, sizeof(link_dir), "%s", in_case(tc, "cache"));
    REQUIRE(mkdir(link_dir, 0700) == 0);
    snprintf(db, sizeof(db), "%s/kcache.db", link_dir);
    REQUIRE(symlink(victim, db) == 0);
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = db;
    kcache_store *s = NULL;
    char err[512] = "";
    int rc = kcache_store_open(&s, &o, err, sizeof(err));
    if (s)
        put_real(s, 1, NULL, NULL);
    kcache_store_close(s);
    EXPECT(rc != 0 && strstr(err, "symbolic link") && test_one_line(err), "open: %d %s", rc, err);
    EXPECT(st_file_size(victim) == 0, "the link's target was written");
    char side[900];
    snprintf(side, sizeof(side), "%s-wal", victim);
    EXPECT(access(side, F_OK) != 0, "a -wal appeared beside the target");
    snprintf(side, sizeof(side), "%s-shm", victim);
    EXPECT(access(side, F_OK) != 0, "a -shm appeared beside the target");
}

/* ---- lease rows that break the schema ------------------------------------------------ */

static void case_lease_null_host(int tc)
{
    const char *db = in_case(tc, "kcache.db");
    kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
    REQUIRE(put_real(s, 1, NULL, NULL) == 0);
    kcache_store_close(s);
    kcache_key k = key_of(14), k2 = key_of(15);
    char hex[KCACHE_KEY_HEX_SIZE], hex2[KCACHE_KEY_HEX_SIZE], sql[1024];
    kcache_key_hex(hex, &k);
    kcache_key_hex(hex2, &k2);
    /* What a lost -shm left in the field: rows that break the table's NOT NULL. */
    snprintf(sql, sizeof(sql),
             "PRAGMA writable_schema = ON;"
             "UPDATE sqlite_schema SET sql = replace(sql, 'host TEXT NOT NULL',"
             " 'host TEXT') WHERE name = 'lease';"
             "PRAGMA writable_schema = RESET;"
             "INSERT INTO lease VALUES (x'%s', 1, NULL, 0), (x'%s', 1, NULL, 0);"
             "PRAGMA writable_schema = ON;"
             "UPDATE sqlite_schema SET sql = replace(sql, 'host TEXT',"
             " 'host TEXT NOT NULL') WHERE name = 'lease';",
             hex, hex2);
    st_sql(db, sql);
    s = st_open(db, UINT64_MAX, NULL, NULL);
    int acquired = 0;
    int rc = kc_store_lease_acquire(&acquired, s, &k, 15000);
    EXPECT(rc == 0 && acquired, "lease over a NULL row: %d %d %s", rc, acquired,
           kcache_store_errmsg(s));
    kc_store_lease_release(s, &k);
    kcache_store_close(s);
    if (!have_exe())
        return;
    struct cli_out o;
    run_kcache(&o, db, NULL, 30, ARGS("verify"));
    EXPECT(o.rc == 1 && strstr(o.err, "kcache clear"), "verify of the NULL row: exit %d: %s", o.rc,
           o.err);
    run_kcache(&o, db, NULL, 30, ARGS("clear"));
    EXPECT(o.rc == 0, "clear: exit %d: %s", o.rc, o.err);
    run_kcache(&o, db, NULL, 30, ARGS("verify"));
    EXPECT(o.rc == 0, "verify after clear: exit %d: %s%s", o.rc, o.out, o.err);
}

/* ---- ls while another process creates the cache -------------------------------------- */

static void case_ls_during_create(int tc)
{
    if (!exe_or_skip(tc))
        return;
    const char *db = in_case(tc, "kcache.db");
    char lock[800], wal[800], shm[800];
    snprintf(lock, sizeof(lock), "%s-lock", db);
    snprintf(wal, sizeof(wal), "%s-wal", db);
    snprintf(shm, sizeof(shm), "%s-shm", db);
    /* Held at the worst moment: the creator has made the file and not yet its tables.
     * A creator holds its lock on the -lock file from before it makes the file. */
    for (int round = 0; round < 2; round++) {
        unlink(db), unlink(wal), unlink(shm), unlink(lock);
        int p[2];
        REQUIRE(pipe(p) == 0);
        fflush(stdout);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            int fd = open(lock, O_RDWR | O_CREAT, 0600);
            struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
            if (fd < 0 || fcntl(fd, F_OFD_SETLK, &fl) != 0)
                _exit(1);
            test_spit(db, "", 0);
            REQUIRE(write(p[1], "x", 1) == 1);
            usleep(300000);
            kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
            kcache_store_close(s);
            _exit(0);
        }
        close(p[1]);
        char c;
        REQUIRE(read(p[0], &c, 1) == 1);
        close(p[0]);
        struct cli_out o;
        run_kcache(&o, db, NULL, 30, ARGS("ls"));
        EXPECT(o.rc == 0, "ls while the cache is created: exit %d: %s", o.rc, o.err);
        int status;
        waitpid(pid, &status, 0);
    }
    /* And as it happens: ls started together with the first compile's open. */
    unsigned failed = 0, tries = 40;
    for (unsigned t = 0; t < tries; t++) {
        unlink(db), unlink(wal), unlink(shm), unlink(lock);
        fflush(stdout);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
            kcache_store_close(s);
            _exit(0);
        }
        struct cli_out o;
        run_kcache(&o, db, NULL, 30, ARGS("ls"));
        failed += o.rc != 0;
        int status;
        waitpid(pid, &status, 0);
    }
    EXPECT(failed == 0, "ls failed in %u of %u tries while the cache was created", failed, tries);
}

/* ---- a cache created between two reads of one look ----------------------------------- */

/*
 * The race above, made certain: an SQLite VFS over the default one runs a
 * creator in the middle of a read-only open, after its N-th read transaction
 * (a shared read-mark lock released), for N = 1, 2, ... in turn. Reads of the
 * file's marks in separate transactions could see no tables and no id from
 * before the creator's commit and the version from after it: a cache that is
 * kcache's called another application's.
 */
static sqlite3_vfs shim_vfs, *real_vfs;
static struct {
    const char *path;
    unsigned at, unlocks;
    int armed, ran;
} between;

struct shim_file {
    sqlite3_file base;
    int watched;
};
#define REAL_FILE(f) ((sqlite3_file *)((struct shim_file *)(f) + 1))

static int shim_close(sqlite3_file *f)
{
    return REAL_FILE(f)->pMethods->xClose(REAL_FILE(f));
}
static int shim_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o)
{
    return REAL_FILE(f)->pMethods->xRead(REAL_FILE(f), b, n, o);
}
static int shim_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o)
{
    return REAL_FILE(f)->pMethods->xWrite(REAL_FILE(f), b, n, o);
}
static int shim_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    return REAL_FILE(f)->pMethods->xTruncate(REAL_FILE(f), size);
}
static int shim_sync(sqlite3_file *f, int flags)
{
    return REAL_FILE(f)->pMethods->xSync(REAL_FILE(f), flags);
}
static int shim_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
    return REAL_FILE(f)->pMethods->xFileSize(REAL_FILE(f), size);
}
static int shim_lock(sqlite3_file *f, int l)
{
    return REAL_FILE(f)->pMethods->xLock(REAL_FILE(f), l);
}
static int shim_unlock(sqlite3_file *f, int l)
{
    return REAL_FILE(f)->pMethods->xUnlock(REAL_FILE(f), l);
}
static int shim_check_lock(sqlite3_file *f, int *out)
{
    return REAL_FILE(f)->pMethods->xCheckReservedLock(REAL_FILE(f), out);
}
static int shim_file_control(sqlite3_file *f, int op, void *arg)
{
    return REAL_FILE(f)->pMethods->xFileControl(REAL_FILE(f), op, arg);
}
static int shim_sector_size(sqlite3_file *f)
{
    return REAL_FILE(f)->pMethods->xSectorSize(REAL_FILE(f));
}
static int shim_device_chars(sqlite3_file *f)
{
    return REAL_FILE(f)->pMethods->xDeviceCharacteristics(REAL_FILE(f));
}
static int shim_shm_map(sqlite3_file *f, int region, int size, int extend, void volatile **p)
{
    return REAL_FILE(f)->pMethods->xShmMap(REAL_FILE(f), region, size, extend, p);
}
static void shim_shm_barrier(sqlite3_file *f)
{
    REAL_FILE(f)->pMethods->xShmBarrier(REAL_FILE(f));
}
static int shim_shm_unmap(sqlite3_file *f, int del)
{
    return REAL_FILE(f)->pMethods->xShmUnmap(REAL_FILE(f), del);
}
static int shim_fetch(sqlite3_file *f, sqlite3_int64 o, int n, void **p)
{
    return REAL_FILE(f)->pMethods->xFetch(REAL_FILE(f), o, n, p);
}
static int shim_unfetch(sqlite3_file *f, sqlite3_int64 o, void *p)
{
    return REAL_FILE(f)->pMethods->xUnfetch(REAL_FILE(f), o, p);
}

/* WAL's read marks are the shm locks from 3 on; releasing one ends a read transaction. */
static int shim_shm_lock(sqlite3_file *f, int offset, int n, int flags)
{
    int rc = REAL_FILE(f)->pMethods->xShmLock(REAL_FILE(f), offset, n, flags);
    if (((struct shim_file *)f)->watched && between.armed && offset >= 3 &&
        flags == (SQLITE_SHM_UNLOCK | SQLITE_SHM_SHARED) && ++between.unlocks == between.at) {
        between.armed = 0;
        kcache_store_close(st_open(between.path, UINT64_MAX, NULL, NULL));
        between.ran = 1;
    }
    return rc;
}

static const sqlite3_io_methods shim_methods = {
    3,
    shim_close,
    shim_read,
    shim_write,
    shim_truncate,
    shim_sync,
    shim_file_size,
    shim_lock,
    shim_unlock,
    shim_check_lock,
    shim_file_control,
    shim_sector_size,
    shim_device_chars,
    shim_shm_map,
    shim_shm_lock,
    shim_shm_barrier,
    shim_shm_unmap,
    shim_fetch,
    shim_unfetch,
};

static int shim_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out)
{
    (void)vfs;
    struct shim_file *sf = (struct shim_file *)f;
    sf->base.pMethods = NULL;
    int rc = real_vfs->xOpen(real_vfs, name, REAL_FILE(f), flags, out);
    if (REAL_FILE(f)->pMethods)
        sf->base.pMethods = &shim_methods;
    /* Only the read-only look is watched; the creator and the setup are not. */
    sf->watched = between.armed && (flags & SQLITE_OPEN_MAIN_DB) && (flags & SQLITE_OPEN_READONLY);
    return rc;
}

static void case_create_between_reads(int tc)
{
    const char *db = in_case(tc, "kcache.db");
    real_vfs = sqlite3_vfs_find(NULL);
    shim_vfs = *real_vfs;
    shim_vfs.zName = "between";
    shim_vfs.szOsFile = (int)sizeof(struct shim_file) + real_vfs->szOsFile;
    shim_vfs.xOpen = shim_open;
    shim_vfs.pNext = NULL;
    REQUIRE(sqlite3_vfs_register(&shim_vfs, 1) == SQLITE_OK);
    char lock[800], wal[800], shm[800];
    snprintf(lock, sizeof(lock), "%s-lock", db);
    snprintf(wal, sizeof(wal), "%s-wal", db);
    snprintf(shm, sizeof(shm), "%s-shm", db);
    unsigned rounds_run = 0;
    for (unsigned at = 1; at <= 12; at++) {
        unlink(db), unlink(wal), unlink(shm), unlink(lock);
        /* A creator's first step: the file in WAL mode, no tables yet; kept open, as it is. */
        sqlite3 *first = NULL;
        REQUIRE(sqlite3_open(db, &first) == SQLITE_OK);
        REQUIRE(sqlite3_exec(first, "PRAGMA journal_mode = WAL", NULL, NULL, NULL) == SQLITE_OK);
        between.path = db;
        between.at = at;
        between.unlocks = 0;
        between.ran = 0;
        between.armed = 1;
        kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
        o.path = db;
        o.read_only = 1;
        kcache_store *s = NULL;
        char err[512] = "";
        int rc = kcache_store_open(&s, &o, err, sizeof(err));
        between.armed = 0;
        rounds_run += between.ran;
        EXPECT(rc == 0 || rc == KCACHE_ENOTFOUND,
               "read-only open with the cache created after read %u: %d %s", at, rc, err);
        kcache_store_close(s);
        sqlite3_close(first);
    }
    sqlite3_vfs_unregister(&shim_vfs);
    sqlite3_vfs_register(real_vfs, 1);
    EXPECT(rounds_run >= 3, "the creator ran during only %u looks", rounds_run);
}

/* ---- the suite from a clone in a 0700 directory, a path with spaces ------------------ */

static void case_private_clone(int tc)
{
    const char *faults = getenv("TEST_FAULTS_EXE");
    if (!have_exe() || !faults || geteuid() != 0) {
        printf("private-clone: needs root, KCACHE_EXE and TEST_FAULTS_EXE: skipped\n");
        cases_skipped++;
        return;
    }
    /*
     * A clone in a home only its owner may enter, as /root is, under a path
     * with a space: the executable with its library beside it ($ORIGIN/../lib),
     * test_faults, and a TMPDIR with a space that everyone can reach (as /tmp).
     */
    chmod(case_dir(tc), 0711);
    const char *home = in_case(tc, "home");
    REQUIRE(mkdir(home, 0700) == 0);
    char clone[900], tmp[900];
    snprintf(clone, sizeof(clone), "%s/my clone", home);
    snprintf(tmp, sizeof(tmp), "%s", in_case(tc, "tmp dir"));
    REQUIRE(mkdir(tmp, 01777) == 0 && chmod(tmp, 01777) == 0);
    test_sh("mkdir -p '%s/cli' '%s/lib' '%s/tests' && cp '%s' '%s/cli/kcache' && "
            "find \"$(dirname '%s')/../lib\" -maxdepth 1 -name 'libkcache.so*' ! -type d "
            "-exec cp -P {} '%s/lib/' ';' && cp '%s' '%s/tests/'",
            clone, clone, clone, getenv("KCACHE_EXE"), clone, getenv("KCACHE_EXE"), clone, faults,
            clone);
    char cmd[8192];
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && env -u LD_LIBRARY_PATH KCACHE_EXE='%s/cli/kcache' TMPDIR='%s' "
             "'%s/tests/test_faults' >'%s/out' 2>&1; rc=$?; "
             "test $rc -eq 0 -o $rc -eq 77 || { cat '%s/out' >&2; exit 1; }",
             clone, clone, tmp, clone, home, home);
    EXPECT(system(cmd) == 0, "test_faults run from a clone under a 0700 directory failed");
}

static const struct test_case cases[] = {
    {"moved-over-wal", case_moved_over_wal},
    {"moved-over-wal-in-use", case_moved_over_wal_in_use},
    {"killed-during-wal-check", case_killed_during_wal_check},
    {"killed-while-creating", case_killed_while_creating},
    {"damaged-pages", case_damaged_pages},
    {"other-users-cache", case_other_users_cache},
    {"symlinked-database", case_symlinked_database},
    {"lease-null-host", case_lease_null_host},
    {"ls-during-create", case_ls_during_create},
    {"create-between-reads", case_create_between_reads},
    {"private-clone", case_private_clone},
};

int main(int argc, char **argv)
{
    return run_cases(argc, argv, cases, KC_ARRAY_SIZE(cases), "hostile-files");
}
