/* Whether a directory is on a network file system (netfs.c). */
#ifndef KC_NETFS_H
#define KC_NETFS_H

#include <stddef.h>

/*
 * The name of the network file system dir is on ("NFS", "Lustre",
 * "fuse.sshfs", ...) copied into name, or NULL when it is local or cannot
 * be told. A dir that does not exist yet is judged by its nearest existing
 * parent, where it would be made.
 */
const char *kc_netfs_name(const char *dir, char *name, size_t size);

#endif
