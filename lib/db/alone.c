/*
 * Whether any other handle uses the cache: recovery that would
 * pull files from under another process (a -shm it maps, a WAL it reads)
 * may only run when nobody else has the cache open.
 *
 * Every handle holds a read lock on PATH-lock for as long as it is open;
 * recovery converts its own to a write lock without waiting, which succeeds
 * only when no other handle (in this process or another) holds one. They
 * are open file description locks (F_OFD_SETLK): they conflict between
 * handles of one process too, and a failed conversion keeps the read lock
 * (flock() drops it first, so two handles recovering at once could each
 * see the other gone).
 * New handles take their shared lock before SQLite opens the database, so
 * while the exclusive lock is held nobody opens the cache in the middle of a
 * recovery: they wait, for at most the busy timeout.
 *
 * Byte 4 is compile/nvenv.c's: the processes of a cache probe NVRTC one at
 * a time.
 *
 * Why a file of its own: SQLite's locks on the database and -shm are POSIX
 * locks, which a process loses on *every* descriptor of the file the moment
 * it closes *any* descriptor of it. Looking at them (F_GETLK) needs a
 * descriptor that must be closed afterwards. Locks on another file touch
 * none of that. Without a lock file (a read-only directory, a link
 * there) a handle is never alone: recovery then does only what is safe
 * under other processes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "db/alone.h"

static int lock_byte(int fd, short type, int wait)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    return fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl);
}

void kc_alone_open(struct kc_db *db)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s" KC_DB_LOCK, db->path);
    /* O_NOFOLLOW: a link planted there makes this handle never alone, nothing worse. */
    /* Read-write where possible, read-only handles too: a write lock needs it. */
    int flags = O_CLOEXEC | O_NOFOLLOW | O_RDWR | (db->read_only ? 0 : O_CREAT);
    int fd = open(path, flags, 0600);
    if (fd < 0 && errno == EACCES)
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    db->lock_fd = fd;
    if (fd < 0)
        return;
    /* A recovery holds it exclusively for a moment: wait for it, within the busy timeout. */
    uint64_t deadline = kc_mono_ns() + (uint64_t)db->busy_timeout_ms * 1000000u;
    while (lock_byte(fd, F_RDLCK, 0) != 0) {
        if ((errno != EAGAIN && errno != EACCES && errno != EINTR) || kc_mono_ns() >= deadline) {
            close(fd); /* go on without it: never alone */
            db->lock_fd = -1;
            return;
        }
        usleep(2000);
    }
    kc_alone_reserve(db);
}

int kc_alone_begin(struct kc_db *db)
{
    return db->lock_fd >= 0 && lock_byte(db->lock_fd, F_WRLCK, 0) == 0;
}

void kc_alone_end(struct kc_db *db)
{
    if (db->lock_fd >= 0)
        lock_byte(db->lock_fd, F_RDLCK, 1);
}

void kc_alone_close(struct kc_db *db)
{
    if (db->lock_fd >= 0)
        close(db->lock_fd);
    db->lock_fd = -1;
}

/*
 * The reserve: PATH-lock is allocated to KC_DB_RESERVE bytes while there is
 * room, so that a cache that filled its disk can still shrink itself
 * (db.h). Evicting writes: the deletes go to the WAL before the file
 * shrinks, and on a disk full to the last byte that first write failed
 * ("free some space, then prune"), leaving the user to delete files by
 * hand. Given up by the prune that needs it, taken again by the next open
 * that finds room.
 *
 * Store failures that could not be written. On a disk full
 * to the last byte not even the few bytes of a counter fit in the database,
 * and stats said 0 after as many warnings. The -lock file keeps a count for
 * them in bytes [8, 16), allocated when the file is made (while there was
 * room): rewriting them needs no new block. The next flush that can write
 * moves the count into the database. A lock on those bytes keeps two
 * processes from adding or taking at once.
 */
#define KC_SPILL_AT 8

static int spill_lock(int fd, short type, int wait)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = KC_SPILL_AT, .l_len = 8};
    return fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl);
}

static uint64_t spill_read(int fd)
{
    uint64_t v = 0;
    if (pread(fd, &v, sizeof(v), KC_SPILL_AT) != (ssize_t)sizeof(v))
        v = 0;
    return v > (UINT64_C(1) << 40) ? 0 : v; /* not a count we wrote */
}

/* The reserve for the file as it is now (db.h): a quarter of it and its WAL, within bounds. */
static uint64_t reserve_size(const struct kc_db *db)
{
    struct stat st;
    uint64_t bytes = 0;
    if (stat(db->path, &st) == 0)
        bytes += (uint64_t)st.st_size;
    if (db->wal_path && stat(db->wal_path, &st) == 0)
        bytes += (uint64_t)st.st_size;
    bytes /= 4;
    return bytes < KC_DB_RESERVE_MIN ? KC_DB_RESERVE_MIN
           : bytes > KC_DB_RESERVE   ? KC_DB_RESERVE
                                     : bytes;
}

void kc_alone_reserve(struct kc_db *db)
{
    struct stat st;
    static const uint8_t zero[KC_SPILL_AT + 8];
    if (db->lock_fd < 0 || db->read_only || fstat(db->lock_fd, &st) != 0)
        return;
    if (st.st_size < (off_t)sizeof(zero) && pwrite(db->lock_fd, zero, sizeof(zero), 0) < 0)
        return; /* no room now: failures then go uncounted, as with no reserve */
    uint64_t want = reserve_size(db), held = (uint64_t)st.st_blocks * 512u;
    /* A file pruned small gives back what its reserve no longer needs (twice: not each open). */
    if (held > 2 * want && (uint64_t)st.st_size > want) {
        if (ftruncate(db->lock_fd, (off_t)want) != 0)
            return;
        held = want;
    }
    /*
     * Blocks, not a hole: a file system that cannot allocate ahead gives no
     * reserve. Taken only from plenty, so that taking it never fills a disk.
     */
    struct statvfs vfs;
    if (held >= want || fstatvfs(db->lock_fd, &vfs) != 0 ||
        (uint64_t)vfs.f_bavail * vfs.f_frsize < 2 * want)
        return;
    /* fallocate(), not posix_fallocate(): where the file system cannot, no block-by-block
     * emulation on every open, only a failure. */
    if (fallocate(db->lock_fd, 0, 0, (off_t)want) != 0 &&
        ftruncate(db->lock_fd, KC_SPILL_AT + 8) != 0)
        return; /* what a failed allocation kept stays until the next prune needs it */
}

int kc_db_reserve_release(struct kc_db *db)
{
    struct stat st;
    if (db->lock_fd < 0 || fstat(db->lock_fd, &st) != 0 || st.st_size <= KC_SPILL_AT + 8)
        return 0;
    return ftruncate(db->lock_fd, KC_SPILL_AT + 8) == 0;
}

void kc_spill_add(struct kc_db *db, uint64_t n)
{
    if (db->lock_fd < 0 || !n || spill_lock(db->lock_fd, F_WRLCK, 1) != 0)
        return;
    uint64_t v = spill_read(db->lock_fd) + n;
    if (pwrite(db->lock_fd, &v, sizeof(v), KC_SPILL_AT) != (ssize_t)sizeof(v))
        v = 0; /* lost, as it would have been */
    spill_lock(db->lock_fd, F_UNLCK, 0);
}

uint64_t kc_spill_peek(struct kc_db *db)
{
    return db->lock_fd >= 0 ? spill_read(db->lock_fd) : 0;
}

uint64_t kc_spill_take_begin(struct kc_db *db)
{
    db->spill_held = db->lock_fd >= 0 && spill_lock(db->lock_fd, F_WRLCK, 0) == 0;
    return db->spill_held ? spill_read(db->lock_fd) : 0;
}

void kc_spill_take_end(struct kc_db *db, int taken)
{
    if (!db->spill_held)
        return;
    static const uint64_t zero;
    if (taken && pwrite(db->lock_fd, &zero, sizeof(zero), KC_SPILL_AT) != (ssize_t)sizeof(zero))
        taken = 0;
    spill_lock(db->lock_fd, F_UNLCK, 0);
    db->spill_held = 0;
}
