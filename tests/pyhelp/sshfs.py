"""A real network file system client for tests: sshfs over loopback.

Mount(root[, options]) starts sshd on a free loopback port with keys it makes
under root, mounts root/export at root/mnt with sshfs (options: more -o
options) and, on close, unmounts it and stops sshd. Raises kctest.Skip, saying why, where that cannot be done
(not root, no /dev/fuse, no sshfs or sshd: apt-get install sshfs
openssh-server). node(argv) runs a command as on another node of a cluster:
in its own UTS namespace (its own hostname) and mount namespace, with a
tmpfs of its own at /var/tmp (its node-local directory).
"""
import os
import shutil
import socket
import subprocess
import time

from kctest import Skip

SSHD = "/usr/sbin/sshd"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Mount:
    def __init__(self, root, options=""):
        if os.geteuid() != 0:
            raise Skip("sshd, FUSE mounts and namespaces need root")
        if not os.path.exists("/dev/fuse"):
            raise Skip("no /dev/fuse: FUSE is not available here")
        for tool in ("sshfs", "ssh-keygen", "unshare", "fusermount"):
            if not shutil.which(tool):
                raise Skip("%s is not installed (apt-get install sshfs openssh-server)" % tool)
        if not os.access(SSHD, os.X_OK):
            raise Skip("%s is not installed (apt-get install openssh-server)" % SSHD)
        self.root = os.path.abspath(root)
        self.export = os.path.join(self.root, "export")
        self.mnt = os.path.join(self.root, "mnt")
        os.makedirs(self.export)
        os.makedirs(self.mnt)
        os.makedirs("/run/sshd", exist_ok=True)
        key = os.path.join(self.root, "key")
        for k in ("hostkey", "key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                            os.path.join(self.root, k)], check=True)
        shutil.copy(key + ".pub", os.path.join(self.root, "authorized"))
        self.port = free_port()
        cfg = os.path.join(self.root, "sshd_config")
        with open(cfg, "w") as f:
            f.write("Port %d\nListenAddress 127.0.0.1\nHostKey %s/hostkey\n"
                    "AuthorizedKeysFile %s/authorized\nPermitRootLogin prohibit-password\n"
                    "PidFile %s/sshd.pid\nStrictModes no\nUsePAM no\n"
                    "Subsystem sftp internal-sftp\n" % (self.port, self.root, self.root, self.root))
        self.sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", cfg],
                                     stderr=open(os.path.join(self.root, "sshd.log"), "w"))
        self.mounted = False
        self.options = options
        try:
            self._mount(key)
        except Exception:
            self.close()
            raise

    def _mount(self, key):
        opts = ("IdentityFile=%s,StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,"
                "BatchMode=yes" % key) + ("," + self.options if self.options else "")
        for _ in range(50):  # sshd takes a moment to listen
            p = subprocess.run(["sshfs", "-p", str(self.port), "-o", opts,
                                "root@127.0.0.1:" + self.export, self.mnt],
                               capture_output=True, text=True)
            if p.returncode == 0:
                self.mounted = True
                return
            time.sleep(0.1)
        raise Skip("sshfs could not mount over loopback: %s" % p.stderr.strip())

    def close(self):
        if self.mounted:
            subprocess.run(["fusermount", "-u", "-z", self.mnt])
            self.mounted = False
        if self.sshd.poll() is None:
            self.sshd.terminate()
            self.sshd.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def node(name, argv):
    """argv as run on node `name`: its own hostname and its own /var/tmp."""
    script = 'mount -t tmpfs node-local /var/tmp && hostname "$0" && exec "$@"'
    return ["unshare", "-u", "-m", "--propagation", "private", "sh", "-c", script, name] + argv
