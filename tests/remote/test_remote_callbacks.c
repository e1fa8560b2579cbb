/*
 * The remote calls no callback under its lock: a push's or a pull's
 * progress callback, and the remote's log callback, may call the same
 * remote (and its store) without deadlocking. Against a redis-server of its
 * own on a free loopback port (skips with 77 when there is none); each case
 * runs in a child given a few seconds (test_within()), so a deadlock fails
 * instead of hanging the suite.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>

#include <kcache/remote.h>

#include "remote/tier.h"
#include "storetest.h"

#define ENTRIES 8
#define DEADLINE_S 20
#define NS "cbtest"

static pid_t redis_pid;
static char url[64];

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof(a);
    REQUIRE(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
            getsockname(fd, (struct sockaddr *)&a, &n) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

static int answers(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static void redis_stop(void)
{
    if (redis_pid > 0) {
        kill(redis_pid, SIGTERM);
        waitpid(redis_pid, NULL, 0);
        redis_pid = 0;
    }
}

/* A redis-server of our own; 0, or -1 when it cannot start. */
static int redis_start(void)
{
    int port = free_port();
    char conf[512];
    snprintf(conf, sizeof(conf),
             "bind 127.0.0.1\nport %d\nprotected-mode yes\nsave \"\"\nappendonly no\ndir %s\n"
             "logfile %s\n",
             port, test_dir(), test_path("redis.log"));
    test_write_text(test_path("redis.conf"), conf);
    const char *conf_path = test_path("redis.conf");
    redis_pid = fork();
    REQUIRE(redis_pid >= 0);
    if (redis_pid == 0) {
        int null = open("/dev/null", O_RDWR);
        dup2(null, 1);
        dup2(null, 2);
        execlp("redis-server", "redis-server", conf_path, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) { /* bounded: 10 s */
        if (answers(port)) {
            snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
            return 0;
        }
        if (waitpid(redis_pid, NULL, WNOHANG) == redis_pid) {
            redis_pid = 0;
            return -1;
        }
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    redis_stop();
    return -1;
}

static kcache_store *open_store(const char *name)
{
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = test_path(name);
    o.max_size = UINT64_MAX;
    return st_open_with(&o);
}

static kcache_remote *open_remote(kcache_store *s)
{
    kcache_remote *r = NULL;
    char err[512];
    int rc = kcache_remote_open(&r, s, url, err, sizeof(err));
    if (rc)
        fprintf(stderr, "remote %s: %s\n", url, err);
    REQUIRE(rc == 0 && r);
    return r;
}

static kcache_key key_of(unsigned n)
{
    char k[32];
    snprintf(k, sizeof(k), "entry %u", n);
    kcache_key key;
    REQUIRE(kcache_key_caller(&key, NS, k, strlen(k)) == 0);
    return key;
}

static void put_entries(kcache_store *s)
{
    for (unsigned n = 0; n < ENTRIES; n++) {
        char k[32], data[200];
        snprintf(k, sizeof(k), "entry %u", n);
        memset(data, 'a' + (int)n, sizeof(data));
        CHECK_RC(kcache_store_put_keyed(s, NS, k, strlen(k), data, sizeof(data)), 0);
    }
}

/* What a callback does: the remote (and its store) it was handed. */
struct on_call {
    kcache_remote *remote;
    kcache_store *store;
    unsigned calls;
    unsigned got; /* remote gets that found the entry */
};

static void use_remote(struct on_call *c)
{
    kcache_key key = key_of(c->calls % ENTRIES);
    kcache_entry *e = NULL;
    if (kcache_remote_get(&e, c->remote, &key) == 0)
        c->got++;
    kcache_entry_free(e);
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, c->store), 0);
    kcache_stats_free(st);
    c->calls++;
}

static void on_progress(void *userdata, const char *phase, uint64_t done, uint64_t total)
{
    (void)phase;
    CHECK(done <= total);
    use_remote(userdata);
}

/* The get it makes is refused and said too: only the outer message calls again. */
static void on_log(void *userdata, int level, const char *message)
{
    static int inside;
    (void)level;
    CHECK(test_one_line(message));
    if (inside)
        return;
    inside = 1;
    use_remote(userdata);
    inside = 0;
}

/* A push whose progress takes entries from the same remote. */
static void push_calls_back(void *arg)
{
    (void)arg;
    kcache_store *s = open_store("push.db");
    put_entries(s);
    kcache_remote *r = open_remote(s);
    struct on_call c = {r, s, 0, 0};
    kcache_transfer t = KCACHE_TRANSFER_INIT;
    CHECK_RC(kcache_remote_push(&t, r, NULL, on_progress, &c), 0);
    CHECK(t.entries == ENTRIES && c.calls == ENTRIES);
    CHECK(c.got > 0); /* what was pushed before the call is there */
    kcache_remote_close(r);
    kcache_store_close(s);
}

/*
 * A pull whose progress takes entries from the same remote, ahead of the
 * pull itself: those are then present, and every entry ends in the store.
 */
static void pull_calls_back(void *arg)
{
    (void)arg;
    kcache_store *s = open_store("pull.db");
    kcache_remote *r = open_remote(s);
    struct on_call c = {r, s, 0, 0};
    kcache_transfer t = KCACHE_TRANSFER_INIT;
    CHECK_RC(kcache_remote_pull(&t, r, NULL, on_progress, &c), 0);
    CHECK(c.calls == ENTRIES && c.got == ENTRIES);
    CHECK(t.entries + t.present == ENTRIES && t.rejected == 0 && t.conflicts == 0);
    for (unsigned n = 0; n < ENTRIES; n++) {
        char k[32];
        snprintf(k, sizeof(k), "entry %u", n);
        kcache_entry *e = NULL;
        CHECK_RC(kcache_store_get_keyed(&e, s, NS, k, strlen(k), KCACHE_GET_NO_TOUCH), 0);
        kcache_entry_free(e);
    }
    kcache_remote_close(r);
    kcache_store_close(s);
}

/*
 * The remote's log (a compiler's, set through tier.h): values refused under
 * a secret they were not signed with are said while pulling, and the log
 * callback uses the remote meanwhile.
 */
static void log_calls_back(void *arg)
{
    (void)arg;
    setenv("KCACHE_REMOTE_SECRET", "not the pusher's", 1);
    kcache_store *s = open_store("log.db");
    kcache_remote *r = open_remote(s);
    unsetenv("KCACHE_REMOTE_SECRET");
    struct on_call c = {r, s, 0, 0};
    kc_remote_set_log(r, on_log, &c);
    kcache_transfer t = KCACHE_TRANSFER_INIT;
    CHECK_RC(kcache_remote_pull(&t, r, NULL, NULL, NULL), 0);
    CHECK(t.rejected == ENTRIES && c.calls >= ENTRIES && c.got == 0);
    kcache_remote_close(r);
    kcache_store_close(s);
}

/*
 * The store's log, which a compiler shares with its remote: a remote get
 * that meets other bytes under its key locally makes the store say so (a
 * conflict) while the remote is fetching, and the callback uses the remote.
 */
static struct on_call store_log_call;
static void on_store_log(void *userdata, int level, const char *message)
{
    static int inside;
    (void)level;
    (void)message;
    if (inside)
        return;
    inside = 1;
    use_remote(userdata);
    inside = 0;
}

static void store_log_calls_back(void *arg)
{
    (void)arg;
    kcache_store *p = open_store("pusher.db");
    put_entries(p);
    kcache_remote *pr = open_remote(p);
    kcache_transfer t = KCACHE_TRANSFER_INIT;
    CHECK_RC(kcache_remote_push(&t, pr, NULL, NULL, NULL), 0);
    kcache_remote_close(pr);
    kcache_store_close(p);

    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = test_path("conflict.db");
    o.max_size = UINT64_MAX;
    o.log = on_store_log;
    o.log_userdata = &store_log_call;
    kcache_store *s = st_open_with(&o);
    char data[200];
    memset(data, 'z', sizeof(data));
    CHECK_RC(kcache_store_put_keyed(s, NS, "entry 0", 7, data, sizeof(data)), 0);
    kcache_remote *r = open_remote(s);
    store_log_call.remote = r;
    store_log_call.store = s;
    kcache_key key = key_of(0);
    kcache_entry *e = NULL;
    kcache_remote_get(&e, r, &key); /* a conflict: the local bytes stay */
    kcache_entry_free(e);
    CHECK(store_log_call.calls >= 1);
    kcache_remote_close(r);
    kcache_store_close(s);
}

int main(void)
{
    unsetenv("KCACHE_REMOTE_SECRET");
    if (redis_start() != 0) {
        printf("skip: redis-server could not start (apt-get install redis-server)\n");
        return TEST_SKIP;
    }
    atexit(redis_stop);
    test_within("a push's progress calls the remote", DEADLINE_S, push_calls_back, NULL);
    test_within("a pull's progress calls the remote", DEADLINE_S, pull_calls_back, NULL);
    test_within("the remote's log calls the remote", DEADLINE_S, log_calls_back, NULL);
    test_within("the store's log calls the remote", DEADLINE_S, store_log_calls_back, NULL);
    return test_done();
}
