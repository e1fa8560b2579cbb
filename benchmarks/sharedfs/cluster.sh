#!/bin/sh
# The shared tier as a cluster uses it, full size: 8 nodes x 4 ranks x 40
# kernels at once into a shared directory on sshfs over loopback, then a
# ninth node, and 50 kcache processes killed while they publish or compact
# (tests/remote/test_sharedfs.py, whose default run, 3 x 2 x 6 without
# kills, is in the default suite as remote-sharedfs; root, FUSE, sshfs, a
# toolkit). Use a build without sanitizers: under ASan NVRTC's environment
# probe can hang in its fork (compile/nvenv.c).
#   benchmarks/sharedfs/cluster.sh build-plain/cli/kcache [--kills N]
k="$1"
shift
exec python3 "$(dirname "$0")/../../tests/remote/test_sharedfs.py" "$k" \
    --nodes 8 --ranks 4 --kernels 40 --kills 50 "$@"
