/* The files beside the database: their names, and their size on disk. */
#include <stdio.h>
#include <sys/stat.h>

#include "db/db.h"

int kc_db_sidecar(char *buf, size_t size, const char *path, const char *suffix)
{
    int n = snprintf(buf, size, "%s%s", path, suffix);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

void kc_db_disk_usage(struct kc_db *db, uint64_t *file_bytes, uint64_t *wal_bytes)
{
    struct stat st;
    *file_bytes = stat(db->path, &st) == 0 ? (uint64_t)st.st_size : 0;
    *wal_bytes = stat(db->wal_path, &st) == 0 ? (uint64_t)st.st_size : 0;
}
