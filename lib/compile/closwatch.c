/*
 * The process's memo of closure checks: a program that hits many kernels
 * sharing one include closure (CuPy: ~300 hits over a few closures of
 * ~2,000 probes each) stats each probe of it once, not once per hit. The
 * kernel's inotify says what changed since: while no event has named a
 * watched directory or file, what a full check found there still holds.
 *
 * Before a full check of a closure (manifest.c), every absolute directory of
 * its table is walked from "/" one component at a time, each directory on
 * the way watched and told the name looked up in it next; a symbolic link
 * met on the way is read and its target walked the same way. Every lookup
 * the kernel makes to reach the directory is then a name in a watched
 * directory: renaming, removing, creating or retargeting any of them raises
 * an event that counts, and a watched directory moved or removed raises one
 * of its own. Events naming other entries of an ancestor do not count (a
 * checkout under /tmp is not forgotten whenever /tmp changes). In the
 * directory itself every event counts: a file there created, removed,
 * renamed, written or its attributes changed (utimensat, chmod: ctime).
 * Each regular file of the closure is watched as well, by its inode: a file
 * with another link elsewhere, or given one later, may be edited through
 * that link, which raises an event on the inode and on the other directory,
 * never on ours. A directory is watched through /proc/self/fd/N of the
 * very descriptor the walk opened, so what is watched is what was walked;
 * a file through /proc/self/fd/DIR/NAME without following a link, then
 * stat()ed: a regular file on the directory's device, or not covered (one
 * replaced in between raises an event in the directory). The directories
 * of a closure share most of their path: a walk starts where it parts
 * from the last one.
 *
 * Watching costs a few syscalls a file more than a check, so a closure is
 * watched on its second check in the process (a process that checks it
 * once, as the CLI does, never pays), or on its first once the process
 * watches another: such a process checks closures again and again (the
 * drop-in under CuPy), and the others' notes make the set-up cheap, its
 * check taking what the set-up found. The generation of every watch is
 * noted when the watches are in place, and only then does the full check
 * run: an edit after that point raises an event, one before it is seen by
 * the check itself. When the check held
 * without hashing any file (a file too recent to trust its timestamps is
 * hashed on every check: compile/manifest.c), the closure's digest is
 * remembered with those generations and the probes they cover. A later
 * check of the same closure (the same bytes, whatever the directory of the
 * name: what is relative to it is never covered) reads the queue, bumps the generation of each watch an event names,
 * and skips the probes covered when no generation it noted moved.
 *
 * Closures of one process share most of their files (CuPy's share most
 * of CCCL), and a closure's watch takes what another's found without a
 * syscall: on the watch of a directory watched whole, each name looked up
 * there is noted with what it named (a regular file of the directory's
 * file system, with that file's watch; or no symbolic link), valid while
 * the directory's generation is the one it was noted at. That is the
 * answer the syscalls would give. Every event in such a directory counts,
 * and a name comes to name another inode, a link or nothing only by an
 * entry created, removed or renamed there (IN_CREATE, IN_DELETE,
 * IN_MOVED_FROM, IN_MOVED_TO), each an event. A file that keeps its name
 * there is not freed, so its watch stays (its slot is still checked:
 * IN_IGNORED clears it), and asked for that inode again the kernel would
 * hand back that very descriptor; it is listed with its generation when the
 * watches are in place, so an edit made before that (through another link:
 * no event in the directory) is seen by the check, one after by the memo.
 * A note made before an event that is read later carries the generation
 * that event moves on from, so it is never taken after it. Descriptors are
 * not handed out again within an instance before it is replaced (they
 * count up, and it is replaced half way to MAX_WD); an overflow or a mount
 * moves every generation and drops the notes; a forked child starts
 * without them; a name taken this way takes no watch, so the budget is as
 * it was. The walk to the directories (~250 of them for a CuPy kernel's
 * closure: CCCL's tree) is shared the same way: a directory notes each
 * subdirectory a walk met in it under the name it told its watch (events
 * naming it count from then on), and a later walk takes the subdirectory's
 * watch from the note while the generation holds, opening it (O_PATH) only
 * when a name in it is to be looked up, and then only if it is still the
 * directory that watch is on (device and inode): no other is watched for it.
 * Every directory met is watched with DIR_MASK, so watching the last one
 * whole only makes every event on it count: no syscall.
 *
 * The set-up's own stat() of each probe, made once its watch is in place
 * (or a name's note: nothing there, or a file whose watch keeps the stat()
 * it found while its generation holds), is the answer the check's stat()
 * would get unless an event comes, and an event moves a generation the
 * memo notes: the check that watches takes it (kc_closwatch_answer()).
 * A process's first closure is still checked once by stat() alone before
 * it is watched; a later one, in a process that watches, is watched on its
 * first check, mostly from the others' notes.
 *
 * A walk stops at a name that is not there (ENOENT): the name counts on
 * its directory's watch, so nothing appears under it without an event
 * (KNOWN_ABSENT notes it), and the absent names below it are covered.
 * A symbolic link on a directory's path is read once its name counts, and
 * the walk goes on where it leads (its target without "." or ".."); the
 * directories are walked in the order of their tree, so that each is
 * opened once. A directory probe decides no check (compile/manifest.c):
 * it only spares the absent names it vouches for a stat() each, so it is
 * skipped where each of them is.
 *
 * When the closure was read is not part of what is remembered: many
 * kernels share one closure, each recorded at its own time, and CuPy hits
 * each kernel once. It need not be: a full check that hashed nothing found
 * every file's identity (size, times, inode) as recorded with its digest
 * and old enough to trust, so from then on, whichever entry names the
 * closure, that identity stands for those bytes; any change to it raises an
 * event.
 *
 * Not covered, and stat()ed on every check as before: names relative to the
 * working directory or to the program name's directory (CuPy names each
 * program <a new temporary directory>/kern.cu), directory probes that
 * vouch for one of those, names that are symbolic links, and every
 * directory whose walk meets a file system not on the list below.
 * inotify sees only what this kernel does: a network or FUSE file system
 * changed from another host, or behind the mount, raises nothing, so only
 * local disk file systems, tmpfs and overlayfs (whose layers must not change
 * under a mount) are trusted. Where inotify cannot be had (no instance:
 * EMFILE, seccomp; no watch: ENOSPC) nothing is remembered and every check
 * is a full one. A queue overflow forgets everything. A process holds at
 * most an eighth of the user's watches (the limit is shared by every process
 * of the user, an editor's among them): past that, full checks.
 *
 * A mount or unmount raises no inotify event, though it changes what a
 * path names (an sshfs mounted over an -I directory, by any user through
 * fusermount): the process's mount table is polled on every read of the
 * queue (/proc/self/mountinfo reports each change once), and a change
 * forgets everything.
 *
 * Known limits, not covered: a write through a shared mmap raises no
 * inotify event; a process that moves to another mount namespace after
 * its first watch polls the table of the one it left.
 *
 * Threads share one instance under one lock. A forked child never reads
 * the instance it inherited (it would take the parent's events): it drops
 * the memo and makes one of its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "compile/manifest.h"
#include "util/strmap.h"

#define DIR_MASK                                                                                   \
    (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_MOVED_FROM |             \
     IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
#define FILE_MASK (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF)
#define MAX_NAMES 32   /* names an ancestor's watch tells apart; past it every event counts */
#define MAX_MEMOS 256  /* closures remembered; a new one past it replaces the oldest */
#define MAX_SEEN 1024  /* closures checked once, not yet watched */
#define MAX_WD (1 << 16) /* watch descriptors; the kernel hands them out cyclically */
#define KNOWN_DIR ((size_t)1 << 32) /* a note of a directory's watch: a directory there */
#define KNOWN_ABSENT ((size_t)1 << 33) /* a note: nothing there (ENOENT) */
#define MAX_LINKS 40   /* symbolic links followed in one walk, as the kernel's own limit */
#define MAX_SUBS 16    /* links a begin() remembers it followed */

/* One watch: its generation, and which of its events count. */
struct slot {
    uint32_t gen;
    uint32_t mark; /* the recording that last listed it */
    uint32_t opened; /* the recording that last opened it (a directory) */
    uint8_t all;   /* every event counts: a closure's directory, or a file */
    uint8_t n_names;
    char **names;  /* else only those naming one of these (an ancestor's next component) */
    /* A directory: what names whose events count on it were found to be while the
     * generation was known_gen (known_locked()). */
    kc_smap known;
    uint32_t known_gen;
    dev_t dev; /* a directory a walk met: what it is */
    ino_t ino;
    /* A file: what a stat() of it found while the generation was st_gen (has_st). */
    struct stat st;
    uint32_t st_gen;
    uint8_t has_st;
};

struct seen {
    int wd;
    uint32_t gen;
};

struct memo {
    uint8_t digest[KC_DIGEST_SIZE];
    uint32_t n_probes;
    uint32_t n_left; /* probes not skipped */
    uint8_t *skip; /* a bit per probe: covered */
    size_t n_watch;
    struct seen *watch;
};

/* A directory the last walk passed: the name it was looked up by, and what it is. */
struct step {
    char name[NAME_MAX + 1];
    int fd; /* O_PATH; -1 not opened yet (step_fd_locked()), -2 not to be had */
    int wd;
    dev_t dev;
};

#define MAX_DEPTH 64

/* A descriptor's file, and its flags (fcntl F_GETFL; -1: none to be had). */
struct fd_id {
    dev_t dev;
    ino_t ino;
    mode_t mode;
    int flags;
};

/* A symbolic link a walk of this begin() followed: the path through it, and where it led. */
struct link_sub {
    char *from, *to;
};

struct kc_closwatch {
    /* The last walk: its directories, "/" first, each reached without a link
     * (the links on the way are in subs), so that the next walk (the
     * table's directories share most of their prefixes) starts where their
     * paths part. */
    struct step chain[MAX_DEPTH];
    int depth;
    struct link_sub subs[MAX_SUBS];
    int n_subs;
    /* Per probe, what the set-up found there, for the check (kc_closwatch_answer()). */
    uint8_t *ans; /* 0 nothing, 1 not there (ENOENT), 2 ans_st */
    struct stat *ans_st;
    uint32_t n_probes;
    uint8_t *skip;
    struct seen *watch;
    size_t n_watch, cap;
    uint32_t mark;
    uint64_t epoch; /* the instance it was made with */
    int broken;     /* out of memory: keep nothing */
};

static struct {
    pthread_mutex_t lock;
    int fd;        /* the instance; -1 none yet, -2 none to be had in this process */
    int mnt_fd;    /* the process's mount table, polled with it; -1 with no instance */
    pid_t pid;     /* the process it belongs to */
    uint64_t epoch; /* instances made (or forgotten) so far */
    struct slot *slots; /* by watch descriptor */
    size_t n_slots;
    struct memo *memos[MAX_MEMOS];
    size_t next;
    uint8_t seen[MAX_SEEN][16]; /* the digests' first bytes */
    size_t n_seen;
    uint32_t mark;
    kc_closwatch_counts counts;
    pthread_once_t once;
    int top_wd;    /* the highest watch descriptor the instance handed out */
    int budget;    /* and the most it may: a share of the user's limit */
    struct fd_id fd_was, mnt_was; /* what fd and mnt_fd were when made */
} cw = {PTHREAD_MUTEX_INITIALIZER, -1, -1, 0, 0, NULL, 0, {NULL}, 0, {{0}}, 0, 0,
        {0, 0, 0, 0, 0, 0, 0, 0}, PTHREAD_ONCE_INIT, 0, 0};

/* A directory's real path, while the watches of the walk to it hold (kc_closwatch_realpaths()). */
#define MAX_REALS 64

struct real_memo {
    char *path, *real; /* real NULL: nothing there */
    size_t n_watch;
    struct seen *watch;
};

static struct real_memo reals[MAX_REALS]; /* under cw.lock */
static size_t next_real;

static void real_free(struct real_memo *m)
{
    free(m->path);
    free(m->real);
    free(m->watch);
    memset(m, 0, sizeof(*m));
}

/* ---- the instance -------------------------------------------------------- */

static void before_fork(void)
{
    pthread_mutex_lock(&cw.lock);
}

static void after_fork(void)
{
    pthread_mutex_unlock(&cw.lock);
}

static void at_fork(void)
{
    pthread_atfork(before_fork, after_fork, after_fork);
}

static void memo_free(struct memo *m)
{
    if (!m)
        return;
    free(m->skip);
    free(m->watch);
    free(m);
}

static void slot_names_free(struct slot *s)
{
    for (int i = 0; i < s->n_names; i++)
        free(s->names[i]);
    free(s->names);
    s->names = NULL;
    s->n_names = 0;
}

/* Forgets every closure; keep_slots: the watches stay, each one's generation moved. */
static void forget_locked(int keep_slots)
{
    for (size_t i = 0; i < MAX_MEMOS; i++) {
        memo_free(cw.memos[i]);
        cw.memos[i] = NULL;
    }
    for (size_t i = 0; i < MAX_REALS; i++)
        real_free(&reals[i]);
    for (size_t i = 0; i < cw.n_slots; i++) {
        cw.slots[i].gen++;
        kc_smap_free(&cw.slots[i].known);
        if (!keep_slots)
            slot_names_free(&cw.slots[i]);
    }
    if (!keep_slots) {
        free(cw.slots);
        cw.slots = NULL;
        cw.n_slots = 0;
    }
    cw.epoch++;
}

/*
 * How many watches one process may hold: an eighth of the user's limit
 * (fs.inotify.max_user_watches, shared by every process of the user: an
 * editor, a build tool, other ranks of the job). Where the limit is the old
 * default of 8,192, that is 1,024, fewer than a CuPy closure needs (~1,850):
 * such a process does full checks rather than take the watches others need.
 */
static int watch_budget(void)
{
    long limit = 8192;
    const char *test = getenv("KCACHE_TEST_INOTIFY_LIMIT"); /* the tests' stand-in for the file */
    FILE *f = test ? NULL : fopen("/proc/sys/fs/inotify/max_user_watches", "re");
    if (test)
        limit = strtol(test, NULL, 10);
    if (f) {
        if (fscanf(f, "%ld", &limit) != 1)
            limit = 8192;
        fclose(f);
    }
    limit /= 8;
    return limit < 0 ? 0 : limit > INT32_MAX ? INT32_MAX : (int)limit;
}

/* What one of the instance's descriptors is: its file's identity, and its flags. */
static void fd_id(int fd, struct fd_id *id)
{
    struct stat st;
    memset(id, 0, sizeof(*id));
    id->flags = fcntl(fd, F_GETFL);
    if (id->flags >= 0 && fstat(fd, &st) == 0) {
        id->dev = st.st_dev;
        id->ino = st.st_ino;
        id->mode = st.st_mode;
    } else {
        id->flags = -1;
    }
}

/*
 * Whether the instance's descriptors are still those it opened. A program
 * may close descriptors it did not open (closefrom(), a daemon's loop over
 * every number) and open others that take their numbers: no event would
 * then come again, and no event would no longer mean no change. Another
 * inotify instance of the program's own, non-blocking, at the very number
 * is the one reuse this cannot tell.
 */
static int ours_locked(void)
{
    struct fd_id a, b;
    fd_id(cw.fd, &a);
    fd_id(cw.mnt_fd, &b);
    return a.flags >= 0 && b.flags >= 0 && !memcmp(&a, &cw.fd_was, sizeof(a)) &&
           !memcmp(&b, &cw.mnt_was, sizeof(b));
}

/*
 * Whether the instance is there (made when make is set). A forked child
 * drops its parent's. One whose descriptors have climbed half way to MAX_WD
 * (watches removed and added as trees come and go) is replaced before it
 * runs out, with all it remembered. One whose descriptors the program took
 * (ours_locked()) is left to it, not closed, with all it remembered.
 */
static int ready_locked(int make)
{
    pid_t pid = getpid();
    if (cw.fd >= 0 && cw.pid == pid && !ours_locked()) {
        cw.fd = cw.mnt_fd = -1;
        forget_locked(0);
    }
    if ((cw.fd != -1 && cw.pid != pid) || (make && cw.fd >= 0 && cw.n_slots > MAX_WD / 2)) {
        if (cw.fd >= 0)
            close(cw.fd); /* this process's copies: a parent's stay open */
        if (cw.mnt_fd >= 0)
            close(cw.mnt_fd);
        cw.fd = cw.mnt_fd = -1;
        forget_locked(0);
    }
    if (cw.fd == -1 && make) {
        cw.fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        cw.mnt_fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
        cw.pid = pid;
        cw.top_wd = 0;
        cw.budget = watch_budget();
        if (cw.fd < 0 || cw.mnt_fd < 0) { /* no mount seen: nothing can be trusted */
            if (cw.fd >= 0)
                close(cw.fd);
            if (cw.mnt_fd >= 0)
                close(cw.mnt_fd);
            cw.fd = -2;
            cw.mnt_fd = -1;
        } else {
            fd_id(cw.fd, &cw.fd_was);
            fd_id(cw.mnt_fd, &cw.mnt_was);
        }
        cw.epoch++;
    }
    return cw.fd >= 0;
}

/* ---- events ---------------------------------------------------------------- */

static struct slot *slot_of(int wd)
{
    return wd >= 0 && (size_t)wd < cw.n_slots ? &cw.slots[wd] : NULL;
}

static void event_locked(const struct inotify_event *ev)
{
    struct slot *s = slot_of(ev->wd);
    if (!s)
        return;
    if (ev->mask & IN_IGNORED) {
        s->gen++; /* the watch is gone: nothing it vouched for holds */
        slot_names_free(s);
        kc_smap_free(&s->known);
        s->all = 0;
        return;
    }
    int counts = s->all || !ev->len || !ev->name[0];
    for (int i = 0; !counts && i < s->n_names; i++)
        counts = !strcmp(s->names[i], ev->name);
    if (counts)
        s->gen++;
}

/*
 * Reads every event queued, moving the generation of each watch one counts
 * for; a change to the mount table since the last read forgets everything.
 */
static void drain_locked(void)
{
    _Alignas(struct inotify_event) char buf[16384];
    struct pollfd mnt = {cw.mnt_fd, POLLPRI, 0};
    if (poll(&mnt, 1, 0) != 0)
        forget_locked(1); /* mounted or unmounted (POLLPRI, POLLERR), or not known */
    for (;;) {
        ssize_t n = read(cw.fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN) {
            forget_locked(1); /* an event may have been lost */
            return;
        }
        if (n <= 0)
            return;
        for (ssize_t off = 0; off + (ssize_t)sizeof(struct inotify_event) <= n;) {
            const struct inotify_event *ev = (const void *)(buf + off);
            if (ev->mask & IN_Q_OVERFLOW)
                forget_locked(1);
            else
                event_locked(ev);
            off += (ssize_t)(sizeof(*ev) + ev->len);
        }
    }
}

/* ---- watching ------------------------------------------------------------- */

/* Whether a change to a file there is certain to raise an event in this kernel. */
static int local_fs(int fd)
{
    static const long local[] = {
        0xEF53,             /* ext2, ext3, ext4 */
        0x58465342,         /* XFS */
        (long)0x9123683E,   /* Btrfs */
        0x01021994,         /* tmpfs */
        0x794C7630,         /* overlayfs */
        (long)0xF2F52010,   /* F2FS */
        0x2FC12FC1,         /* ZFS */
        (long)0x858458F6,   /* ramfs */
    };
    struct statfs sf;
    if (fstatfs(fd, &sf) != 0)
        return 0;
    for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++)
        if ((long)sf.f_type == local[i])
            return 1;
    return 0;
}

/* Lists watch wd in w (once: its generation is noted when begin() ends). wd, or -1. */
static int list_locked(kc_closwatch *w, int wd)
{
    struct slot *s = &cw.slots[wd];
    if (s->mark != w->mark) {
        struct seen *v = kc_grow(w->watch, &w->cap, w->n_watch, sizeof(*v), 64);
        if (!v) {
            w->broken = 1;
            return -1;
        }
        w->watch = v;
        s->mark = w->mark;
        w->watch[w->n_watch++].wd = wd;
    }
    return wd;
}

/*
 * Watches what path names; its descriptor, or -1. Listed in w. Masks are
 * only ever added to: an inode watched as a directory and then met under a
 * file's name (or the other way) keeps every event either asked for.
 */
static int watch_path_locked(kc_closwatch *w, const char *path, uint32_t mask, int all)
{
    if (cw.top_wd >= cw.budget)
        return -1; /* descriptors count up: top_wd bounds the watches held */
    int wd = inotify_add_watch(cw.fd, path, mask | IN_MASK_ADD);
    if (wd < 0 || wd >= MAX_WD)
        return -1;
    if (wd > cw.top_wd)
        cw.top_wd = wd;
    if ((size_t)wd >= cw.n_slots) {
        size_t n = (size_t)wd + 1 > 2 * cw.n_slots ? (size_t)wd + 1 : 2 * cw.n_slots;
        struct slot *s = kc_realloc(cw.slots, n * sizeof(*s));
        if (!s) {
            w->broken = 1;
            return -1;
        }
        memset(s + cw.n_slots, 0, (n - cw.n_slots) * sizeof(*s));
        cw.slots = s;
        cw.n_slots = n;
    }
    struct slot *s = &cw.slots[wd];
    if (all) {
        s->all = 1;
        slot_names_free(s);
    }
    return list_locked(w, wd);
}

/* Watches what fd was opened on (through /proc: that very inode); as watch_path_locked(). */
static int watch_locked(kc_closwatch *w, int fd, uint32_t mask, int all)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    return watch_path_locked(w, path, mask, all);
}

/* Makes an event naming name count on watch wd. 0, or -1 (no memory). */
static int count_name_locked(int wd, const char *name)
{
    struct slot *s = slot_of(wd);
    if (s->all)
        return 0;
    for (int i = 0; i < s->n_names; i++)
        if (!strcmp(s->names[i], name))
            return 0;
    if (s->n_names == MAX_NAMES) {
        slot_names_free(s);
        s->all = 1;
        return 0;
    }
    char **v = kc_realloc(s->names, (s->n_names + 1u) * sizeof(*v));
    if (!v)
        return -1;
    s->names = v;
    if (!(v[s->n_names] = kc_strdup(name)))
        return -1;
    s->n_names++;
    return 0;
}

/* "/" opened and watched, its descriptor in *wd: an fd, or -1. */
static int root_locked(kc_closwatch *w, int *wd)
{
    int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0 && (!local_fs(fd) || (*wd = watch_locked(w, fd, DIR_MASK, 0)) < 0)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/*
 * Walks path from "/", watching every directory it passes and telling each
 * the name looked up in it next, following symbolic links as the kernel
 * would. The directory, opened O_PATH and watched whole, or -1 where it
 * cannot be covered (absent, too long, a link loop, not a local file system,
 * no watch to be had).
 */
static int walk_locked(kc_closwatch *w, const char *path, dev_t *dev, int *dir_wd)
{
    char todo[2 * PATH_MAX], tmp[2 * PATH_MAX], name[NAME_MAX + 1], target[PATH_MAX];
    if (path[0] != '/' || strlen(path) >= sizeof(todo))
        return -1;
    strcpy(todo, path);
    const char *p = todo;
    int links = 0, wd = -1;
    int cur = root_locked(w, &wd);
    while (cur >= 0) {
        while (*p == '/')
            p++;
        size_t n = strcspn(p, "/");
        if (n == 0)
            break;
        if (n > NAME_MAX)
            goto fail;
        memcpy(name, p, n);
        name[n] = '\0';
        p += n;
        if (!strcmp(name, "."))
            continue;
        /* ".." of a watched directory changes only when it moves, an event of its own. */
        if (strcmp(name, "..") && count_name_locked(wd, name))
            goto fail;
        int next = openat(cur, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (next < 0)
            goto fail;
        if (fstat(next, &st) != 0) {
            close(next);
            goto fail;
        }
        if (S_ISLNK(st.st_mode)) {
            ssize_t t = readlinkat(next, "", target, sizeof(target) - 1);
            close(next);
            if (t <= 0 || ++links > MAX_LINKS)
                goto fail;
            target[t] = '\0';
            int k = snprintf(tmp, sizeof(tmp), "%s/%s", target, p);
            if (k < 0 || (size_t)k >= sizeof(tmp))
                goto fail;
            memcpy(todo, tmp, (size_t)k + 1);
            p = todo;
            if (target[0] == '/') {
                close(cur);
                cur = root_locked(w, &wd);
            }
            continue;
        }
        if (!S_ISDIR(st.st_mode) || !local_fs(next) ||
            (wd = watch_locked(w, next, DIR_MASK, 0)) < 0) {
            close(next);
            goto fail;
        }
        close(cur);
        cur = next;
    }
    struct stat st;
    if (cur >= 0 && (fstat(cur, &st) || (*dir_wd = watch_locked(w, cur, DIR_MASK, 1)) < 0))
        goto fail;
    *dev = st.st_dev;
    return cur;
fail:
    if (cur >= 0)
        close(cur);
    return -1;
}

static void chain_cut(kc_closwatch *w, int depth)
{
    while (w->depth > depth)
        if (w->chain[--w->depth].fd >= 0)
            close(w->chain[w->depth].fd);
}

/*
 * What watch wd knows of name: 1 with *what (KNOWN_DIR | the wd of the
 * directory there, 1 + the wd of the regular file there, or 0: no symbolic
 * link there) while no event has counted on it since it was found, else 0.
 * A name is only noted where its events count (a directory watched whole,
 * or the name told to an ancestor's watch), and what counts only grows
 * until the watch ends (IN_IGNORED: another generation).
 */
static int known_locked(int wd, const char *name, size_t *what)
{
    const struct slot *s = slot_of(wd);
    return s && s->known_gen == s->gen && kc_smap_find(&s->known, name, what);
}

/* Notes what name is in directory wd now (forgetting what it knew at another generation). */
static void know_locked(int wd, const char *name, size_t what)
{
    struct slot *s = slot_of(wd);
    if (s->known_gen != s->gen) {
        kc_smap_free(&s->known);
        s->known_gen = s->gen;
    }
    if (kc_smap_put(&s->known, name, what))
        kc_smap_free(&s->known); /* no memory: it only saves syscalls */
}

/* Notes that this begin() opened directory wd (counted when it had before). */
static void opened_locked(const kc_closwatch *w, int wd)
{
    struct slot *s = slot_of(wd);
    cw.counts.reopened += s->opened == w->mark;
    s->opened = w->mark;
}

/*
 * The descriptor of the chain's directory i, opened (O_PATH) from its
 * parent's when the walk took it from a note (fd -1): the directory its
 * watch is on, or -2 (another is there now: its probes are not covered).
 */
static int step_fd_locked(kc_closwatch *w, int i)
{
    struct step *st = &w->chain[i];
    if (st->fd != -1 || i == 0)
        return st->fd;
    int parent = step_fd_locked(w, i - 1);
    int fd = parent < 0 ? -1
                        : openat(parent, st->name, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
    const struct slot *s = slot_of(st->wd);
    struct stat sb;
    if (fd >= 0 && (fstat(fd, &sb) || sb.st_dev != s->dev || sb.st_ino != s->ino)) {
        close(fd);
        fd = -1;
    }
    if (fd >= 0)
        opened_locked(w, st->wd);
    return st->fd = fd < 0 ? -2 : fd;
}

/* A directory a walk reached: the chain's step (-1: fd is its own), its watch, its device. */
struct dir_at {
    int fd, step, wd;
    dev_t dev;
};

/*
 * One step of walk_chain_locked() from chain[at - 1] to name. 0, -1 or -2
 * as it says, 1: a symbolic link there, its target in target (PATH_MAX),
 * or -3: nothing there, and the name counts on the directory's watch.
 */
static int chain_step_locked(kc_closwatch *w, int at, const char *name, char *target)
{
    const struct step *cur = &w->chain[at - 1];
    if (count_name_locked(cur->wd, name))
        return -1;
    size_t what;
    const struct slot *s;
    if (known_locked(cur->wd, name, &what) && what == KNOWN_ABSENT) {
        cw.counts.reused++;
        return -3;
    }
    if (known_locked(cur->wd, name, &what) && (what & KNOWN_DIR) &&
        (s = slot_of((int)(what & ~KNOWN_DIR))) && (s->all || s->n_names) &&
        list_locked(w, (int)(what & ~KNOWN_DIR)) >= 0) {
        w->chain[at] = (struct step){"", -1, (int)(what & ~KNOWN_DIR), s->dev};
        strcpy(w->chain[at].name, name);
        return 0;
    }
    int fd = step_fd_locked(w, at - 1);
    struct stat st;
    int next = fd < 0 ? -1 : openat(fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0 && fd >= 0 && errno == ENOENT) {
        know_locked(cur->wd, name, KNOWN_ABSENT);
        return -3;
    }
    if (next < 0)
        return -1;
    int link = 0, wd = -1;
    if (fstat(next, &st) || (link = S_ISLNK(st.st_mode)) || !S_ISDIR(st.st_mode) ||
        (st.st_dev != cur->dev && !local_fs(next)) ||
        (wd = watch_locked(w, next, DIR_MASK, 0)) < 0) {
        /* Read after its name counts on the watch: retargeting it is an event. */
        ssize_t t = link ? readlinkat(next, "", target, PATH_MAX - 1) : -1;
        close(next);
        if (t > 0)
            target[t] = '\0';
        return t > 0 ? 1 : link ? -2 : -1;
    }
    opened_locked(w, wd);
    cw.slots[wd].dev = st.st_dev;
    cw.slots[wd].ino = st.st_ino;
    know_locked(cur->wd, name, KNOWN_DIR | (size_t)wd);
    w->chain[at] = (struct step){"", next, wd, st.st_dev};
    strcpy(w->chain[at].name, name);
    return 0;
}

/* Whether a link's target walks as a path of names alone (no ".", no ".."), as the chain does. */
static int plain_target(const char *target)
{
    for (const char *p = target; *p;) {
        size_t n = strcspn(p, "/");
        if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return 0;
        p += n;
        p += *p == '/';
    }
    return 1;
}

/*
 * path with a link this begin() followed replaced by where it led, into out
 * (PATH_MAX): the link's prefix of path, then a slash or its end. NULL when
 * none applies or the result is too long.
 */
static const char *through_sub(const kc_closwatch *w, const char *path, char *out)
{
    for (int i = 0; i < w->n_subs; i++) {
        size_t n = strlen(w->subs[i].from);
        if (strncmp(path, w->subs[i].from, n) || (path[n] && path[n] != '/'))
            continue;
        int k = snprintf(out, PATH_MAX, "%s%s", w->subs[i].to, path + n);
        return k < 0 || k >= PATH_MAX ? NULL : out;
    }
    return NULL;
}

/*
 * Notes that path[0 .. end) is a link whose parent is path[0 .. name) and
 * whose target is target, and writes path with it followed into out
 * (PATH_MAX). 0, or -2 (too long, no room or memory: walk_locked() can tell).
 */
static int follow_locked(kc_closwatch *w, const char *path, size_t name, size_t end,
                         const char *target, char *out)
{
    size_t base = target[0] == '/' ? 0 : name;
    int k = snprintf(out, PATH_MAX, "%.*s%s", (int)base, path, target);
    if (k < 0 || k >= PATH_MAX || w->n_subs == MAX_SUBS)
        return -2;
    struct link_sub *sub = &w->subs[w->n_subs];
    sub->from = kc_memdup(path, end + 1);
    sub->to = kc_strdup(out);
    if (sub->from)
        sub->from[end] = '\0';
    if (!sub->from || !sub->to) {
        free(sub->from);
        free(sub->to);
        return -2;
    }
    w->n_subs++;
    k = snprintf(out + k, PATH_MAX - (size_t)k, "%s", path + end) + k;
    return k >= PATH_MAX ? -2 : 0;
}

/* Forgets the links a begin() followed: what they led to holds only while its watches do. */
static void subs_free(kc_closwatch *w)
{
    for (int i = 0; i < w->n_subs; i++) {
        free(w->subs[i].from);
        free(w->subs[i].to);
    }
    w->n_subs = 0;
}

/*
 * walk_locked() for a path without "." or "..", from the directories of the
 * last walk it shares; a directory noted in its parent (chain_step_locked())
 * is taken from the note, and opened only when a name in it must be looked
 * up (step_fd_locked()). Every directory on the way is watched with
 * DIR_MASK when first met, so watching the last whole only makes every
 * event on it count. A symbolic link met is read after its name counts on
 * its directory's watch, and the walk starts again on the path it leads
 * to; what it led to is kept for the rest of the begin() (a later path
 * through it is rewritten at once), when its watches are listed: it holds
 * while they do. The chain so only ever holds directories reached without
 * a link, whatever the paths (/usr/local/cuda/include -> cuda-13.0: its ~60
 * directories in CuPy's closure are one walk, not one each from "/"). 0
 * with *at filled, -1 where it cannot be covered, -2 where only
 * walk_locked() can tell ("." or "..", also in a link's target, a path too
 * deep or too long, more than MAX_LINKS links), -3 where a name on the way
 * is not there (ENOENT) and counts on the watch of the directory it was
 * looked up in: nothing is found under it until an event says so.
 */
static int walk_chain_locked(kc_closwatch *w, const char *path, struct dir_at *at_out)
{
    char name[NAME_MAX + 1], target[PATH_MAX], buf[2][PATH_MAX];
    int links = 0, which = 0;
    if (!w->depth) {
        struct stat st;
        int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        int wd = fd < 0 || fstat(fd, &st) || !local_fs(fd) ? -1 : watch_locked(w, fd, DIR_MASK, 0);
        if (wd < 0) {
            if (fd >= 0)
                close(fd);
            return -1;
        }
        w->chain[0] = (struct step){"/", fd, wd, st.st_dev};
        w->depth = 1;
    }
    for (const char *next; (next = through_sub(w, path, buf[which])); which ^= 1, path = next)
        if (++links > MAX_LINKS)
            return -2;
    int at = 1; /* chain[at - 1] is the directory reached */
    for (const char *p = path;;) {
        while (*p == '/')
            p++;
        size_t n = strcspn(p, "/");
        if (n == 0)
            break;
        if (n > NAME_MAX || at == MAX_DEPTH)
            return -2;
        memcpy(name, p, n);
        name[n] = '\0';
        p += n;
        if (!strcmp(name, ".") || !strcmp(name, ".."))
            return -2;
        if (at < w->depth && !strcmp(w->chain[at].name, name)) {
            at++;
            continue;
        }
        chain_cut(w, at);
        int rc = chain_step_locked(w, at, name, target);
        if (rc == 1) {
            if (++links > MAX_LINKS || !plain_target(target) ||
                follow_locked(w, path, (size_t)(p - n - path), (size_t)(p - path), target,
                              buf[which ^ 1]))
                return -2;
            which ^= 1;
            p = path = buf[which];
            at = 1;
            continue;
        }
        if (rc)
            return rc;
        w->depth = ++at;
    }
    chain_cut(w, at);
    const struct step *dir = &w->chain[at - 1];
    struct slot *s = slot_of(dir->wd);
    s->all = 1;
    slot_names_free(s);
    *at_out = (struct dir_at){-1, at - 1, dir->wd, dir->dev};
    return list_locked(w, dir->wd) < 0 ? -1 : 0;
}

/*
 * Notes for the check what probe i is now (st: what a stat() not following a
 * link there gives, or NULL: nothing there), as found after its watch, or
 * its directory's, was in place: what a stat() of the check would find,
 * unless an event comes, and one then moves a generation the memo notes.
 */
static void answer_locked(kc_closwatch *w, uint32_t i, const struct stat *st)
{
    if (!w->ans)
        return;
    w->ans[i] = st ? 2 : 1;
    if (st)
        w->ans_st[i] = *st;
    cw.counts.answered++;
}

/*
 * Whether probe pr, in directory d (watched whole), can be skipped while
 * no event counts: absent and no symbolic link there (one could come to
 * point at a file made elsewhere), or a regular file, itself watched. What
 * a closure's watch found of a name, another closure of the directory
 * takes without a syscall while the directory's generation holds (the head
 * comment says why that is the same answer).
 */
static int cover_probe_locked(kc_closwatch *w, const struct dir_at *d,
                              const kc_closwatch_probe *pr, uint32_t i)
{
    char base[NAME_MAX + 1];
    if (pr->base_len > NAME_MAX || pr->state == KC_PROBE_DIR)
        return 0;
    memcpy(base, pr->base, pr->base_len);
    base[pr->base_len] = '\0';
    if (!base[0] || !strcmp(base, ".") || !strcmp(base, ".."))
        return 0;
    size_t what;
    if (known_locked(d->wd, base, &what)) {
        struct slot *f = what && !(what & (KNOWN_DIR | KNOWN_ABSENT)) ? slot_of((int)what - 1)
                                                                       : NULL;
        if (pr->state == KC_PROBE_ABSENT || (f && f->all && list_locked(w, (int)what - 1) >= 0)) {
            cw.counts.reused++;
            if (what == KNOWN_ABSENT)
                answer_locked(w, i, NULL);
            else if (f && f->has_st && f->st_gen == f->gen)
                answer_locked(w, i, &f->st);
            return 1;
        }
    }
    int dirfd = d->fd >= 0 ? d->fd : step_fd_locked(w, d->step);
    struct stat st;
    if (dirfd < 0)
        return 0;
    if (pr->state == KC_PROBE_ABSENT) {
        int there = fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0;
        if (there ? S_ISLNK(st.st_mode) : errno != ENOENT)
            return 0;
        know_locked(d->wd, base, there ? 0 : KNOWN_ABSENT);
        answer_locked(w, i, there ? &st : NULL);
        return 1;
    }
    /* The inode at the name now, not followed; the stat after says it is a regular
     * file of the directory's file system (replaced in between: an event). */
    char path[64 + NAME_MAX];
    snprintf(path, sizeof(path), "/proc/self/fd/%d/%s", dirfd, base);
    int wd = watch_path_locked(w, path, FILE_MASK | IN_DONT_FOLLOW, 1);
    if (wd < 0 || fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_dev != d->dev)
        return 0;
    know_locked(d->wd, base, (size_t)wd + 1);
    struct slot *f = slot_of(wd);
    f->st = st;
    f->st_gen = f->gen;
    f->has_st = 1;
    answer_locked(w, i, &st);
    return 1;
}

/* Whether no event has counted on any of n watches since their generations were noted. */
static int watches_hold_locked(const struct seen *watch, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct slot *s = slot_of(watch[i].wd);
        if (!s || s->gen != watch[i].gen)
            return 0;
    }
    return 1;
}

/* ---- the memo ------------------------------------------------------------- */

static struct memo **find_locked(const uint8_t digest[KC_DIGEST_SIZE], uint32_t n_probes)
{
    for (size_t i = 0; i < MAX_MEMOS; i++) {
        struct memo *m = cw.memos[i];
        if (m && m->n_probes == n_probes && !memcmp(m->digest, digest, KC_DIGEST_SIZE))
            return &cw.memos[i];
    }
    return NULL;
}

/*
 * Whether a closure was checked before in this process (noted now if not).
 * Watching costs a few syscalls a file more than a check: a process that
 * checks a closure once (the CLI's) never pays it.
 */
static int seen_before_locked(const uint8_t digest[KC_DIGEST_SIZE])
{
    size_t n = cw.n_seen < MAX_SEEN ? cw.n_seen : MAX_SEEN;
    for (size_t i = 0; i < n; i++)
        if (!memcmp(cw.seen[i], digest, sizeof(cw.seen[i])))
            return 1;
    memcpy(cw.seen[cw.n_seen++ % MAX_SEEN], digest, sizeof(cw.seen[0]));
    return 0;
}

int kc_closwatch_lookup(uint8_t **skip, int *watch, const uint8_t digest[KC_DIGEST_SIZE],
                        uint32_t n_probes)
{
    *skip = NULL;
    pthread_once(&cw.once, at_fork);
    pthread_mutex_lock(&cw.lock);
    int rc = 0;
    /* A process with watches checks closures again and again (the drop-in's):
     * watching one on its first check costs little beside the others' notes. */
    int watching = ready_locked(0);
    *watch = seen_before_locked(digest) || watching;
    if (watching) {
        drain_locked();
        struct memo **slot = find_locked(digest, n_probes);
        if (slot && watches_hold_locked((*slot)->watch, (*slot)->n_watch)) {
            *skip = (uint8_t *)kc_memdup((*slot)->skip, ((size_t)n_probes + 7) / 8 + 1);
            rc = *skip ? 1 : KCACHE_ENOMEM;
            cw.counts.hits += rc == 1;
            cw.counts.left += rc == 1 ? (*slot)->n_left : 0;
        } else if (slot) {
            memo_free(*slot);
            *slot = NULL;
        }
    }
    pthread_mutex_unlock(&cw.lock);
    return rc;
}

/* The probes a directory's watch can cover, by directory: order[first[d] .. first[d + 1]). */
static int by_dir(const kc_closwatch_probe *probes, uint32_t n, uint32_t n_dirs, uint32_t **order,
                  uint32_t **first)
{
    *order = kc_malloc(((size_t)n + 1) * sizeof(**order));
    *first = kc_calloc((size_t)n_dirs + 2, sizeof(**first));
    if (!*order || !*first)
        return KCACHE_ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        if (probes[i].dir < n_dirs && probes[i].state != KC_PROBE_DIR)
            (*first)[probes[i].dir + 1]++;
    for (uint32_t d = 0; d < n_dirs; d++)
        (*first)[d + 1] += (*first)[d];
    uint32_t *at = kc_malloc(((size_t)n_dirs + 1) * sizeof(*at));
    if (!at)
        return KCACHE_ENOMEM;
    memcpy(at, *first, ((size_t)n_dirs + 1) * sizeof(*at));
    for (uint32_t i = 0; i < n; i++)
        if (probes[i].dir < n_dirs && probes[i].state != KC_PROBE_DIR)
            (*order)[at[probes[i].dir]++] = i;
    free(at);
    return 0;
}

/*
 * A directory probe decides no check (compile/manifest.c): it only spares
 * the absent names it vouches for a stat() of their own. Skipped when each
 * of them is.
 */
static void skip_dir_probes(kc_closwatch *w, const kc_closwatch_probe *probes, uint32_t n)
{
    uint8_t *needed = kc_calloc((size_t)n + 1, 1);
    if (!needed)
        return; /* it only saves syscalls */
    for (uint32_t i = 0; i < n; i++)
        if (probes[i].state == KC_PROBE_ABSENT && probes[i].vouch && probes[i].vouch <= n &&
            !(w->skip[i / 8] >> (i % 8) & 1))
            needed[probes[i].vouch - 1] = 1;
    for (uint32_t i = 0; i < n; i++)
        if (probes[i].state == KC_PROBE_DIR && !needed[i])
            w->skip[i / 8] |= (uint8_t)(1u << (i % 8));
    free(needed);
}

/* A directory to walk: its path, and its index in the closure's table. */
struct dir_ref {
    const char *path;
    uint32_t d;
};

/*
 * Paths in the order of a walk of their tree ('/' before any other byte),
 * so that each walk leaves the chain where the next one goes on: in the
 * table's order (first looked at first) CuPy's closures went back and forth
 * between CCCL's three -I directories and the toolkit's, and the chain was
 * cut and opened again ~700 times for ~250 directories.
 */
static int dir_order(const void *a, const void *b)
{
    const unsigned char *p = (const unsigned char *)((const struct dir_ref *)a)->path;
    const unsigned char *q = (const unsigned char *)((const struct dir_ref *)b)->path;
    while (*p && *p == *q)
        p++, q++;
    int x = *p == '/' ? 1 : *p ? *p + 1 : 0, y = *q == '/' ? 1 : *q ? *q + 1 : 0;
    return (x > y) - (x < y);
}

/* The directories of dirs that have probes to cover, in dir_order(); *n of them. */
static struct dir_ref *walk_order(char *const *dirs, uint32_t n_dirs, const uint32_t *first,
                                  uint32_t *n)
{
    struct dir_ref *v = kc_malloc(((size_t)n_dirs + 1) * sizeof(*v));
    *n = 0;
    for (uint32_t d = 0; v && d < n_dirs; d++)
        if (dirs[d] && first[d] < first[d + 1])
            v[(*n)++] = (struct dir_ref){dirs[d], d};
    if (v)
        qsort(v, *n, sizeof(*v), dir_order);
    return v;
}

int kc_closwatch_begin(kc_closwatch **out, char *const *dirs, uint32_t n_dirs,
                       const kc_closwatch_probe *probes, uint32_t n_probes)
{
    *out = NULL;
    kc_closwatch *w = kc_calloc(1, sizeof(*w));
    uint32_t *order = NULL, *first = NULL, n_walk = 0;
    struct dir_ref *walk = NULL;
    if (!w || !(w->skip = kc_calloc(((size_t)n_probes + 7) / 8 + 1, 1)) ||
        !(w->ans = kc_calloc((size_t)n_probes + 1, 1)) ||
        !(w->ans_st = kc_malloc(((size_t)n_probes + 1) * sizeof(*w->ans_st))) ||
        by_dir(probes, n_probes, n_dirs, &order, &first) ||
        !(walk = walk_order(dirs, n_dirs, first, &n_walk))) {
        kc_closwatch_free(w);
        free(order);
        free(first);
        return KCACHE_ENOMEM;
    }
    w->n_probes = n_probes;
    pthread_once(&cw.once, at_fork);
    pthread_mutex_lock(&cw.lock);
    int covered = 0;
    if (ready_locked(1)) {
        drain_locked();
        w->mark = ++cw.mark;
        w->epoch = cw.epoch;
        for (uint32_t j = 0; j < n_walk && !w->broken; j++) {
            uint32_t d = walk[j].d;
            struct dir_at at = {-1, -1, -1, 0};
            int rc = walk_chain_locked(w, dirs[d], &at);
            if (rc == -2) {
                cw.counts.walks++;
                rc = (at.fd = walk_locked(w, dirs[d], &at.dev, &at.wd)) >= 0 ? 0 : -1;
            }
            for (uint32_t k = first[d]; (!rc || rc == -3) && k < first[d + 1] && !w->broken;
                 k++) {
                uint32_t i = order[k];
                /* In a directory not there, a name is absent while no event counts. */
                if (rc && probes[i].state == KC_PROBE_ABSENT)
                    answer_locked(w, i, NULL);
                if (rc ? probes[i].state == KC_PROBE_ABSENT
                       : cover_probe_locked(w, &at, &probes[i], i)) {
                    w->skip[i / 8] |= (uint8_t)(1u << (i % 8));
                    covered++;
                }
            }
            if (at.fd >= 0)
                close(at.fd); /* walk_locked()'s own */
        }
        chain_cut(w, 0);
        subs_free(w);
        skip_dir_probes(w, probes, n_probes);
        /* No event read since the watches were added: these are their generations then. */
        for (size_t i = 0; i < w->n_watch; i++)
            w->watch[i].gen = slot_of(w->watch[i].wd)->gen;
    }
    pthread_mutex_unlock(&cw.lock);
    free(order);
    free(first);
    free(walk);
    if (!covered || w->broken) {
        int broken = w->broken;
        kc_closwatch_free(w);
        return broken ? KCACHE_ENOMEM : 0;
    }
    *out = w;
    return 0;
}

void kc_closwatch_keep(kc_closwatch *w, const uint8_t digest[KC_DIGEST_SIZE])
{
    struct memo *m = kc_calloc(1, sizeof(*m));
    if (!m)
        return;
    memcpy(m->digest, digest, KC_DIGEST_SIZE);
    m->n_probes = w->n_probes;
    for (uint32_t i = 0; i < w->n_probes; i++)
        m->n_left += !(w->skip[i / 8] >> (i % 8) & 1);
    m->n_watch = w->n_watch;
    m->skip = w->skip;
    m->watch = w->watch;
    w->skip = NULL;
    w->watch = NULL;
    pthread_mutex_lock(&cw.lock);
    /* Made by this process's instance as it still is (not a parent's, not one overflowed). */
    if (cw.fd >= 0 && cw.pid == getpid() && cw.epoch == w->epoch) {
        struct memo **slot = find_locked(digest, w->n_probes);
        if (!slot) {
            for (size_t i = 0; !slot && i < MAX_MEMOS; i++)
                slot = cw.memos[i] ? NULL : &cw.memos[i];
            if (!slot) {
                slot = &cw.memos[cw.next];
                cw.next = (cw.next + 1) % MAX_MEMOS;
            }
        }
        memo_free(*slot);
        *slot = m;
        m = NULL;
        cw.counts.kept++;
    }
    pthread_mutex_unlock(&cw.lock);
    memo_free(m);
}

/*
 * The real path of absolute directory path into *out (NULL: nothing there)
 * from the memo, or from a walk to it (walk_chain_locked(): the chain's
 * directories are reached without a link, so their names are the real
 * path), remembered with the generations of its watches. 1 when it could
 * tell, 0 when not (realpath() must), KCACHE_ENOMEM.
 */
static int real_locked(char **out, const char *path)
{
    *out = NULL;
    for (size_t i = 0; i < MAX_REALS; i++) {
        struct real_memo *m = &reals[i];
        if (!m->path || strcmp(m->path, path))
            continue;
        if (!watches_hold_locked(m->watch, m->n_watch)) {
            real_free(m);
            break;
        }
        cw.counts.realpaths++;
        return !m->real || (*out = kc_strdup(m->real)) ? 1 : KCACHE_ENOMEM;
    }
    kc_closwatch *w = kc_calloc(1, sizeof(*w));
    if (!w)
        return KCACHE_ENOMEM;
    w->mark = ++cw.mark;
    w->epoch = cw.epoch;
    struct dir_at at;
    char real[PATH_MAX] = "/";
    int rc = walk_chain_locked(w, path, &at), len = 0;
    for (int i = 1; !rc && i <= at.step && len >= 0 && len < PATH_MAX; i++)
        len += snprintf(real + len, sizeof(real) - (size_t)len, "/%s", w->chain[i].name);
    chain_cut(w, 0);
    subs_free(w);
    struct real_memo *m = &reals[next_real];
    if ((rc && rc != -3) || len < 0 || len >= PATH_MAX || w->broken) {
        kc_closwatch_free(w);
        return 0;
    }
    for (size_t i = 0; i < w->n_watch; i++)
        w->watch[i].gen = slot_of(w->watch[i].wd)->gen;
    real_free(m);
    m->path = kc_strdup(path);
    m->real = rc ? NULL : kc_strdup(real);
    m->watch = w->watch;
    m->n_watch = w->n_watch;
    w->watch = NULL;
    kc_closwatch_free(w);
    if (!m->path || (!rc && !m->real)) {
        real_free(m);
        return KCACHE_ENOMEM;
    }
    next_real = (next_real + 1) % MAX_REALS;
    return !m->real || (*out = kc_strdup(m->real)) ? 1 : KCACHE_ENOMEM;
}

int kc_closwatch_realpaths(char **real, char *const *paths, size_t n)
{
    uint8_t *told = kc_calloc(n + 1, 1);
    int rc = told ? 0 : KCACHE_ENOMEM;
    for (size_t i = 0; i < n; i++)
        real[i] = NULL;
    pthread_once(&cw.once, at_fork);
    pthread_mutex_lock(&cw.lock);
    /* Only in a process that watches (the drop-in's): the CLI asks once. */
    if (!rc && ready_locked(0)) {
        drain_locked();
        for (size_t i = 0; !rc && i < n; i++) {
            int k = paths[i][0] == '/' ? real_locked(&real[i], paths[i]) : 0;
            rc = k < 0 ? k : 0;
            told[i] = k == 1;
        }
    }
    pthread_mutex_unlock(&cw.lock);
    for (size_t i = 0; !rc && i < n; i++)
        if (!told[i] && !(real[i] = realpath(paths[i], NULL)) && errno == ENOMEM)
            rc = KCACHE_ENOMEM;
    free(told);
    return rc;
}

void kc_closwatch_free(kc_closwatch *w)
{
    if (!w)
        return;
    subs_free(w);
    free(w->ans);
    free(w->ans_st);
    free(w->skip);
    free(w->watch);
    free(w);
}

int kc_closwatch_answer(const kc_closwatch *w, uint32_t i, struct stat *st)
{
    if (!w || i >= w->n_probes || !w->ans[i])
        return -1;
    if (w->ans[i] == 2)
        *st = w->ans_st[i];
    return w->ans[i] == 2;
}

void kc_closwatch_counts_get(kc_closwatch_counts *out)
{
    pthread_mutex_lock(&cw.lock);
    *out = cw.counts;
    pthread_mutex_unlock(&cw.lock);
}
