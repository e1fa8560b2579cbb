/*
 * A sampling profiler for the GPU machine, which has no perf, strace or gdb.
 *
 *   cc -O2 -shared -fPIC -pthread -o sampler.so sampler.c        (on the build machine)
 *   LD_PRELOAD=$PWD/sampler.so SAMPLER_OUT=PREFIX [SAMPLER_SECONDS=N] COMMAND
 *   benchmarks/gpu/sampler/symbolize.py PREFIX.PID [FUNCTION ...]   (back on the build machine)
 *
 * Every tick of CPU time (ITIMER_PROF; the kernel's tick, 4 ms here) the
 * interrupted thread's stack (backtrace()). PREFIX.PID gets the samples and
 * /proc/self/maps at exit, or after SAMPLER_SECONDS (a Python program killed
 * by ^C re-raises SIGINT and never runs destructors). backtrace() is not
 * async-signal-safe in general; it is called once first so that libgcc is
 * loaded, and a rare torn sample costs nothing but itself.
 *
 * SAMPLER_WALL=1 samples the main thread (the one that loaded the sampler)
 * every millisecond of wall-clock time instead, blocked or not: where a
 * thread waits (a join, a lock, a read) shows as the frames of the wait.
 */
#define _GNU_SOURCE
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>

#define MAXS 400000
#define DEPTH 32
static void *frames[MAXS][DEPTH];
static unsigned char depth[MAXS];
static volatile int n;
static int on;
static void *after(void *arg);

static void handler(int sig, siginfo_t *si, void *uc)
{
    (void)sig; (void)si; (void)uc;
    int i = __atomic_fetch_add(&n, 1, __ATOMIC_RELAXED);
    if (i >= MAXS)
        return;
    depth[i] = (unsigned char)backtrace(frames[i], DEPTH);
}

__attribute__((constructor)) static void start(void)
{
    if (!getenv("SAMPLER_OUT"))
        return;
    void *warm[2];
    backtrace(warm, 2);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGPROF, &sa, NULL);
    if (getenv("SAMPLER_WALL")) {
        struct sigevent ev;
        memset(&ev, 0, sizeof(ev));
        ev.sigev_notify = SIGEV_THREAD_ID;
        ev.sigev_signo = SIGPROF;
        ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
        timer_t t;
        struct itimerspec its = {{0, 1000000}, {0, 1000000}};
        if (timer_create(CLOCK_MONOTONIC, &ev, &t) != 0 || timer_settime(t, 0, &its, NULL) != 0)
            return;
    } else {
        struct itimerval it = {{0, 1000}, {0, 1000}};
        setitimer(ITIMER_PROF, &it, NULL);
    }
    on = 1;
    if (getenv("SAMPLER_SECONDS")) {
        pthread_t t;
        pthread_create(&t, NULL, after, (void *)(long)atoi(getenv("SAMPLER_SECONDS")));
        pthread_detach(t);
    }
}

static void dump(void);
static void *after(void *arg)
{
    sleep((unsigned)(long)arg);
    dump();
    return NULL;
}

__attribute__((destructor)) static void stop(void)
{
    dump();
}

static void dump(void)
{
    if (!__atomic_exchange_n(&on, 0, __ATOMIC_SEQ_CST))
        return;
    struct itimerval it = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &it, NULL);
    signal(SIGPROF, SIG_IGN); /* the wall timer, if any, keeps firing */
    char path[4096];
    snprintf(path, sizeof(path), "%s.%d", getenv("SAMPLER_OUT"), (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    int m = n < MAXS ? n : MAXS;
    fprintf(f, "samples %d\n", m);
    for (int i = 0; i < m; i++) {
        for (int d = 0; d < depth[i]; d++)
            fprintf(f, "%lx ", (unsigned long)frames[i][d]);
        fputc('\n', f);
    }
    fprintf(f, "maps\n");
    FILE *mp = fopen("/proc/self/maps", "r");
    char line[8192];
    while (mp && fgets(line, sizeof(line), mp))
        fputs(line, f);
    if (mp)
        fclose(mp);
    fclose(f);
}
