/*
 * Many processes opening one cache that does not exist yet, released at the
 * same instant: the case of a program whose workers start together on a new
 * machine. Each must open, put and read back without an error; the one
 * creating the file and switching it to WAL must not make the others fail.
 * SQLite answers a switch to WAL that meets another process's lock at once,
 * without calling the busy handler, so a single round on a quiet machine
 * rarely shows it: many rounds, more processes than cores.
 */
#include <sys/wait.h>

#include "stress.h"

#define N_PROCS 12
#define N_ROUNDS 40

static int child(const char *path, int gate, unsigned id)
{
    char byte;
    /* Blocks until the parent closes its end: every child starts at once. */
    if (read(gate, &byte, 1) < 0)
        return 2;
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = path;
    o.max_size = UINT64_MAX;
    kcache_store *s = NULL;
    char err[512];
    int rc = kcache_store_open(&s, &o, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "process %u: open returned %d: %s\n", id, rc, err);
        return 1;
    }
    uint8_t scratch[4096];
    int bad = 0;
    if ((rc = st_put(s, id, sizeof(scratch), scratch))) {
        fprintf(stderr, "process %u: put returned %d: %s\n", id, rc, kcache_store_errmsg(s));
        bad = 1;
    }
    kcache_entry *e = NULL;
    kcache_key k = st_key(id);
    if (!bad && ((rc = kcache_store_get(&e, s, &k, KCACHE_GET_NO_TOUCH)) ||
                 !st_entry_ok(e, id, sizeof(scratch), scratch))) {
        fprintf(stderr, "process %u: get returned %d: %s\n", id, rc, kcache_store_errmsg(s));
        bad = 1;
    }
    kcache_entry_free(e);
    kcache_store_close(s);
    return bad;
}

int main(void)
{
    double t0 = st_now();
    int failed = 0;
    for (int round = 0; round < N_ROUNDS; round++) {
        char name[32];
        snprintf(name, sizeof(name), "first-open-%d/kcache.db", round);
        const char *path = test_path(name);
        int gate[2];
        REQUIRE(pipe(gate) == 0);
        pid_t pids[N_PROCS];
        for (unsigned i = 0; i < N_PROCS; i++) {
            pids[i] = fork();
            REQUIRE(pids[i] >= 0);
            if (pids[i] == 0) {
                close(gate[1]);
                _exit(child(path, gate[0], i));
            }
        }
        close(gate[0]);
        close(gate[1]);
        for (unsigned i = 0; i < N_PROCS; i++) {
            int status;
            REQUIRE(waitpid(pids[i], &status, 0) == pids[i]);
            failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        }
        kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
        CHECK(st_count_entries(s) == N_PROCS);
        kcache_store_close(s);
        CHECK(st_integrity_ok(path));
    }
    printf("%d rounds of %d processes opening a new cache at once: %d failed (%.2f s)\n",
           N_ROUNDS, N_PROCS, failed, st_now() - t0);
    CHECK(failed == 0);
    return test_done();
}
