#!/bin/sh
# The shared tier as a cluster uses it, full size: 8 nodes x 4 ranks x 40
# kernels at once into a shared directory on sshfs over loopback, then a
# ninth node (tests/remote/test_sharedfs.py; root, FUSE, sshfs, a toolkit).
# Use a build without sanitizers: under ASan NVRTC's environment probe can
# hang in its fork (compile/nvenv.c).
#   benchmarks/sharedfs/cluster.sh build-plain/cli/kcache
exec python3 "$(dirname "$0")/../../tests/remote/test_sharedfs.py" "$1" \
    --nodes 8 --ranks 4 --kernels 40
