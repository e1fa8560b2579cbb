#!/usr/bin/env python3
"""A cache whose default directory is on a network file system (sshfs over
loopback, tests/pyhelp/sshfs.py): the node-local directory instead, said
once; an explicit KCACHE_DIR there refused, naming the shared tier.

Usage: test_netfs.py KCACHE   (exit 77 without root, FUSE, sshfs or a toolkit)
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
from kctest import Skip, check, run_tests  # noqa: E402
import sshfs  # noqa: E402

KCACHE = os.path.abspath(sys.argv[1])
KERNEL = 'extern "C" __global__ void twice(float *x) { x[threadIdx.x] *= 2.0f; }\n'


def compile_on(node, env, src, out):
    """kcache compile as a process of `node` (own hostname, own /var/tmp)."""
    argv = sshfs.node(node, [KCACHE, "compile", src, "--arch", "sm_90", "-o", out])
    return subprocess.run(argv, env=env, capture_output=True, text=True)


def base_env(home):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home}
    for k in ("LD_LIBRARY_PATH", "CUDA_HOME", "LSAN_OPTIONS", "ASAN_OPTIONS", "UBSAN_OPTIONS"):
        if k in os.environ:
            env[k] = os.environ[k]
    return env


def test_default_dir_on_sshfs(root):
    if not os.path.isdir("/usr/local/cuda"):
        raise Skip("no CUDA toolkit")
    with sshfs.Mount(os.path.join(root, "fs")) as m:
        home = os.path.join(m.mnt, "home")
        os.makedirs(os.path.join(home, ".cache"))
        src = os.path.join(root, "k.cu")
        with open(src, "w") as f:
            f.write(KERNEL)
        env = base_env(home)
        # Both compiles on one node: one /var/tmp, as two commands of one user there.
        script = ("%s compile %s --arch sm_90 -o %s/a.cubin 2>%s/1.err >%s/1.out; echo $?; "
                  "%s compile %s --arch sm_90 -o %s/b.cubin 2>%s/2.err >%s/2.out; echo $?; "
                  "%s config --json; ls -ld /var/tmp/kcache-0"
                  % ((KCACHE, src, root, root, root) * 2 + (KCACHE,)))
        p = subprocess.run(sshfs.node("node1", ["sh", "-c", script]), env=env,
                           capture_output=True, text=True)
        lines = p.stdout.splitlines()
        check(p.returncode == 0 and lines[:2] == ["0", "0"],
              "both compiles exit 0: %r %s" % (lines[:2], p.stderr))
        err1 = open(os.path.join(root, "1.err")).read()
        err2 = open(os.path.join(root, "2.err")).read()
        out2 = open(os.path.join(root, "2.out")).read()
        check("network file system (fuse.sshfs)" in err1 and "/var/tmp/kcache-0" in err1,
              "the first compile says where the node-local cache is: %r" % err1)
        check(err2 == "", "the second says nothing: %r" % err2)
        check(out2.startswith("hit"), "the second compile hits: %r" % out2)
        check(open(os.path.join(root, "a.cubin"), "rb").read() ==
              open(os.path.join(root, "b.cubin"), "rb").read(), "the hit is the miss's CUBIN")
        check(lines[-1].startswith("drwx------"), "the node-local directory is 0700: " + lines[-1])
        check('"/var/tmp/kcache-0"' in p.stdout and "node-local" in p.stdout,
              "kcache config shows the node-local directory")
        check(not os.path.exists(os.path.join(home, ".cache", "kcache", "kcache.db")),
              "nothing written on the network file system")
        # An explicit KCACHE_DIR there is refused, with the hint to use the shared tier.
        env["KCACHE_DIR"] = os.path.join(m.mnt, "explicit")
        p = compile_on("node1", env, src, os.path.join(root, "c.cubin"))
        check(p.stdout.startswith("uncached") and "network file system (fuse.sshfs)" in p.stderr
              and "shared = DIR" in p.stderr,
              "an explicit KCACHE_DIR on sshfs is refused: %r %r" % (p.stdout, p.stderr))
        check(not os.path.exists(os.path.join(m.mnt, "explicit", "kcache.db")),
              "and no database is made there")

if __name__ == "__main__":
    sys.exit(run_tests(globals()))
