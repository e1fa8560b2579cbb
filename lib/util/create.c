/*
 * The one way kcache creates a file, in any directory: written whole under a
 * temporary name opened with O_CREAT|O_EXCL|O_NOFOLLOW (never through a link
 * someone planted, never over a file someone else made), then renamed into
 * place, in a directory that is the user's or root's and that not everyone
 * may write, or a sticky one. In a directory of another user's, or one
 * anyone may write, another user could swap or remove the file after the
 * rename, or make kcache write where they chose. A directory its group may
 * write is allowed (a project directory, 2775, or one made under umask 002):
 * the group's members are the user's collaborators, and the temporary name
 * and the rename keep kcache from writing through anything they plant.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/common.h"

int kc_uid_trusted(uid_t uid)
{
    return uid == geteuid() || uid == 0;
}

KCACHE_API int kcache_dir_check(const char *dir, char *err, size_t err_size)
{
    struct stat st;
    if (!dir || !*dir)
        return kc_fmt(err, err_size, KCACHE_EINVAL, "kcache_dir_check: no directory");
    /* A link is followed only when its user or root made it: another user's link is
     * theirs to point anywhere, a directory of the caller's included. */
    if (lstat(dir, &st) == 0 && S_ISLNK(st.st_mode) && !kc_uid_trusted(st.st_uid))
        return kc_fmt(err, err_size, KCACHE_EIO, "%s is a symbolic link made by uid %u: kcache "
                      "does not write through links another user made; remove it or use "
                      "another directory", dir, (unsigned)st.st_uid);
    if (stat(dir, &st) != 0)
        return kc_fmt(err, err_size, KCACHE_EIO, "cannot use %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return kc_fmt(err, err_size, KCACHE_EIO, "%s is not a directory", dir);
    if (st.st_mode & S_ISVTX)
        return 0;
    if (!kc_uid_trusted(st.st_uid) || (st.st_mode & S_IWOTH))
        return kc_fmt(err, err_size, KCACHE_EIO, "%s can be changed by %s (owner uid %u, "
                      "mode %04o, not sticky): kcache creates files only in a directory of "
                      "yours or a sticky one; use another or run 'chmod o-w %s'", dir,
                      kc_uid_trusted(st.st_uid) ? "anyone" : "another user", (unsigned)st.st_uid,
                      (unsigned)(st.st_mode & 07777), dir);
    return 0;
}

static int write_all(int fd, const void *data, size_t size)
{
    const char *p = data;
    while (size) {
        ssize_t n = write(fd, p, size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        size -= (size_t)n;
    }
    return 0;
}

KCACHE_API int kcache_file_write(const char *path, const void *data, size_t size, unsigned mode,
                                 unsigned flags, char *err, size_t err_size)
{
    if (!path || !*path || (size && !data))
        return kc_fmt(err, err_size, KCACHE_EINVAL, "kcache_file_write: no path or no data");
    size_t n = strlen(path) + 48;
    char *tmp = kc_malloc(n), *dir = kc_path_dir(path);
    int rc = 0, fd = -1;
    if (!tmp || !dir) {
        rc = kc_fmt(err, err_size, KCACHE_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = kcache_dir_check(dir, err, err_size)))
        goto out;
    /* A fresh name each try: whatever another user planted at one is left alone. */
    static unsigned counter;
    struct timespec ts;
    for (int tries = 0; fd < 0 && tries < 64; tries++) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        unsigned c = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
        snprintf(tmp, n, "%s.tmp-%ld-%x%lx", path, (long)getpid(), c, (long)ts.tv_nsec);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, (mode_t)mode);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        rc = kc_fmt(err, err_size, errno == ENOSPC ? KCACHE_EFULL : KCACHE_EIO,
                    "cannot write %s: %s", path, strerror(errno));
        goto out;
    }
    int bad = write_all(fd, data, size) != 0 || ((flags & KCACHE_FILE_SYNC) && fsync(fd) != 0);
    int saved = errno;
    if (close(fd) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    if (!bad && rename(tmp, path) != 0) {
        bad = 1;
        saved = errno;
    }
    if (bad) {
        unlink(tmp);
        rc = kc_fmt(err, err_size, saved == ENOSPC ? KCACHE_EFULL : KCACHE_EIO,
                    "cannot write %s: %s", path, strerror(saved));
    }
out:
    free(tmp);
    free(dir);
    return rc;
}
