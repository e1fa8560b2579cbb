/*
 * Network file systems: where SQLite's WAL must not go (it needs shared
 * memory between the processes of one host; over NFS, Lustre or sshfs two
 * hosts would each have their own and corrupt the file). The kernel's magic
 * numbers name the file systems it serves itself; a FUSE mount says only
 * "FUSE", so its type is read from /proc/self/mountinfo ("fuse.sshfs").
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>

#include "util/common.h"
#include "util/netfs.h"

#define KC_FUSE_MAGIC 0x65735546L

static const struct {
    long magic;
    const char *name;
} kernel_fs[] = {
    {0x6969, "NFS"},
    {0x517B, "SMB"},
    {(long)0xFF534D42, "CIFS"},
    {(long)0xFE534D42, "SMB2"},
    {0x73757245, "Coda"},
    {0x5346414F, "AFS"},
    {0x00C36400, "Ceph"},
    {0x01021997, "9P"},
    {0x0BD00BD0, "Lustre"},
    {0x47504653, "GPFS"},
    {0x01161970, "GFS2"},
    {0x7461636F, "OCFS2"},
};

/* FUSE file systems whose files live on other machines (the part after "fuse."). */
static const char *const fuse_network[] = {
    "sshfs", "s3fs", "gcsfuse", "rclone", "glusterfs", "ceph-fuse", "cephfs", "juicefs",
    "goofys", "davfs", "davfs2", "curlftpfs", "smbnetfs", "beegfs", "mfs", "lizardfs",
    "lustre", "gpfs", "nfs", "cvmfs", "blobfuse", "blobfuse2", "alluxio-fuse", "weka",
};

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
            p[3] >= '0' && p[3] <= '7') {
            *o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
            p += 3;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
}

/* Whether mount point m holds path (path is absolute and resolved). */
static size_t holds(const char *m, const char *path)
{
    size_t n = strlen(m);
    if (!strcmp(m, "/"))
        return 1;
    return !strncmp(path, m, n) && (path[n] == '/' || path[n] == '\0') ? n : 0;
}

/* The type of the mount that holds path ("fuse.sshfs"), from mountinfo; 0 or -1. */
static int mount_type(const char *path, char *type, size_t size)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -1;
    char line[4096];
    size_t best = 0;
    int found = -1;
    while (fgets(line, sizeof(line), f)) {
        /* id parent major:minor root mountpoint options [optional...] - type source ... */
        char *save = NULL, *field = strtok_r(line, " ", &save);
        char *mnt = NULL;
        for (int i = 0; field && i < 4; i++)
            field = strtok_r(NULL, " ", &save);
        mnt = field;
        char *dash = NULL;
        while ((field = strtok_r(NULL, " ", &save)))
            if (!strcmp(field, "-")) {
                dash = strtok_r(NULL, " ", &save);
                break;
            }
        if (!mnt || !dash)
            continue;
        unescape(mnt);
        size_t n = holds(mnt, path);
        if (n && n >= best) {
            best = n;
            snprintf(type, size, "%s", dash);
            found = 0;
        }
    }
    fclose(f);
    return found;
}

static const char *fuse_name(const char *dir, char *name, size_t size)
{
    char real[PATH_MAX], type[128];
    if (!realpath(dir, real) || mount_type(real, type, sizeof(type)) != 0)
        return NULL;
    const char *sub = !strncmp(type, "fuse.", 5) ? type + 5 : type;
    for (size_t i = 0; i < KC_ARRAY_SIZE(fuse_network); i++)
        if (!strcmp(sub, fuse_network[i])) {
            snprintf(name, size, "%s", type);
            return name;
        }
    return NULL;
}

const char *kc_netfs_name(const char *dir, char *name, size_t size)
{
    char *d = kc_strdup(dir);
    if (!d)
        return NULL;
    struct statfs sfs;
    int rc;
    /* The nearest existing directory: where dir would be made. */
    while ((rc = statfs(d, &sfs)) != 0 && errno == ENOENT) {
        char *slash = strrchr(d, '/');
        if (!slash)
            break;
        if (slash == d)
            slash[1] = '\0';
        else
            *slash = '\0';
    }
    const char *found = NULL;
    if (rc == 0) {
        for (size_t i = 0; i < KC_ARRAY_SIZE(kernel_fs) && !found; i++)
            if ((long)sfs.f_type == kernel_fs[i].magic) {
                snprintf(name, size, "%s", kernel_fs[i].name);
                found = name;
            }
        if (!found && (long)sfs.f_type == KC_FUSE_MAGIC)
            found = fuse_name(d, name, size);
    }
    free(d);
    return found;
}
