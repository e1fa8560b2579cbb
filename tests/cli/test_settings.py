#!/usr/bin/env python3
"""Which settings files kcache obeys, in what order, and what it says of the others.

Usage: test_settings.py KCACHE KCACHE_FILL [TEST-NAME...]

A settings file is obeyed only when it is its user's or root's and nobody
else can write it (nor change its directory, unless sticky): another user's
kcache.conf in a shared sticky cache directory once set B's remote and cap.
The files are read in a documented order (the user's, or KCACHE_CONFIG, then
the cache directory's), `kcache config` names each value's file and line,
and a remote is turned off for one run with KCACHE_REMOTE= or none. The
cases with two users run as root, with two users the test creates (useradd)
and removes; they skip otherwise.
"""
import json
import os
import pwd
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as base  # noqa: E402  (the same harness, same arguments)
from kctest import Cache, Skip, check  # noqa: E402  (on the path test_cli set)

GiB = 1 << 30


class Users:
    """Two users made for the test (useradd) and removed after it; root only."""

    def __init__(self, root):
        if os.geteuid() != 0:
            raise Skip("needs root to create two users (useradd) and run kcache as each")
        if not shutil.which("useradd") or not shutil.which("userdel"):
            raise Skip("useradd or userdel is not installed")
        self.names = []
        self.root = root
        # The build directory may sit under a directory only root can enter: the users
        # run copies (kcache links libkcache statically) from a directory they can read.
        os.chmod(root, 0o755)
        self.bin = os.path.join(root, "bin")
        os.mkdir(self.bin, 0o755)
        shutil.copy(base.KCACHE, self.bin)
        self.kcache = os.path.join(self.bin, os.path.basename(base.KCACHE))

    def add(self, tag):
        name = "kct%s%d" % (tag, os.getpid() % 100000)
        subprocess.run(["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", name], check=True,
                       capture_output=True)
        self.names.append(name)
        pw = pwd.getpwnam(name)
        home = os.path.join(self.root, "home-" + tag)
        os.mkdir(home, 0o700)
        os.chown(home, pw.pw_uid, pw.pw_gid)
        return pw.pw_uid, pw.pw_gid, home

    def remove(self):
        for name in self.names:
            subprocess.run(["userdel", name], capture_output=True)

    def run(self, who, args, env, rc=0):
        uid, gid, home = who
        e = {"PATH": "/usr/bin:/bin", "HOME": home, "NO_COLOR": "1"}
        e.update(env)
        p = subprocess.run([self.kcache] + args, env=e, capture_output=True, user=uid,
                           group=gid, extra_groups=[], timeout=120)
        out, err = p.stdout.decode(), p.stderr.decode()
        check(rc is None or p.returncode == rc, "kcache %s as uid %d: exit %d, wanted %s: %s"
              % (" ".join(args), uid, p.returncode, rc, err))
        return out, err

    def as_user(self, who, argv):
        uid, gid, home = who
        subprocess.run(argv, check=True, user=uid, group=gid, extra_groups=[],
                       env={"PATH": "/usr/bin:/bin", "HOME": home}, capture_output=True)


def settings(out):
    return {s["name"]: s for s in json.loads(out)["settings"]}


def test_other_users_file_in_shared_cache_ignored(root):
    u = Users(root)
    try:
        a, b = u.add("a"), u.add("b")
        shared = os.path.join(root, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o1777)  # root's, sticky, writable by all: accepted as a cache dir
        conf = os.path.join(shared, "kcache.conf")
        u.as_user(a, ["sh", "-c", "printf 'max_size = 1K\\nremote = redis://127.0.0.1:9\\n' > '%s'"
                      % conf])
        env = {"KCACHE_DIR": shared}
        out, err = u.run(b, ["config", "--json"], env)
        s = settings(out)
        check(s["max_size"]["source"] == "default" and s["remote"]["value"] == "",
              "A's file sets nothing for B: %s %s" % (s["max_size"], s["remote"]))
        check(conf in err and "is ignored" in err and "uid %d" % a[0] in err,
              "the warning names the file and whose it is: %r" % err)
        check(err.count("is ignored") == 1, "said once: %r" % err)
        ignored = json.loads(out)["ignored"]
        check(len(ignored) == 1 and ignored[0].startswith(conf + " is ignored"),
              "config --json lists it: %s" % ignored)
        # B's entries are not evicted by A's 1K cap.
        made = Cache(root, "made")
        made.fill(3)
        made.run("vacuum")
        db = os.path.join(shared, "kcache.db")
        shutil.copy(made.db, db)
        os.chown(db, b[0], b[1])
        out, err = u.run(b, ["prune", "--json"], env)
        check(json.loads(out)["evicted"] == 0, "prune kept B's entries: %s" % out)
        check(conf in err, "prune warns too: %r" % err)
        out, _ = u.run(b, ["stats", "--json"], env)
        check(json.loads(out)["max_size"] == 4 * GiB, "B's cap is the default: %s" % out)
        # KCACHE_CONFIG naming A's file is refused the same way.
        own = os.path.join(root, "own")
        os.mkdir(own, 0o755)
        aconf = os.path.join(own, "a.conf")
        with open(aconf, "w") as f:
            f.write("compression = zstd\n")
        os.chown(aconf, a[0], a[1])
        out, err = u.run(b, ["config", "--json"], {"KCACHE_CONFIG": aconf,
                                                   "KCACHE_DIR": os.path.join(b[2], "c")})
        check(settings(out)["compression"]["source"] == "default" and aconf in err,
              "KCACHE_CONFIG of another user: ignored, named: %r" % err)
        # B's own file in the sticky directory is B's: obeyed (nobody else can replace it).
        os.unlink(conf)
        u.as_user(b, ["sh", "-c", "printf 'compression = zstd\\n' > '%s'" % conf])
        out, err = u.run(b, ["config", "--json"], env)
        check(settings(out)["compression"]["origin"] == conf + ":1" and not err,
              "B's own file is obeyed: %s %r" % (settings(out)["compression"], err))
    finally:
        u.remove()


def test_file_others_can_write_ignored(root):
    c = Cache(root)
    conf_dir = os.path.join(root, "xdg", "kcache")
    os.makedirs(conf_dir)
    conf = os.path.join(conf_dir, "kcache.conf")
    with open(conf, "w") as f:
        f.write("max_size = 1K\n")
    env = {"XDG_CONFIG_HOME": os.path.join(root, "xdg")}
    check(c.json("config", env=env)["settings"][2]["origin"] == conf + ":1",
          "the user's file is read")
    os.chmod(conf, 0o666)
    out, err = c.run("config", "--json", env=env)
    s = settings(out)
    check(s["max_size"]["source"] == "default", "a file others can write sets nothing")
    check(conf in err and "others can write it" in err, "and says so: %r" % err)
    os.chmod(conf, 0o644)
    os.chmod(conf_dir, 0o777)
    out, err = c.run("config", "--json", env=env)
    check(settings(out)["max_size"]["source"] == "default" and conf_dir in err,
          "a file in a directory others can change sets nothing: %r" % err)


def test_order_and_origin(root):
    c = Cache(root)
    xdg = os.path.join(root, "xdg")
    os.makedirs(os.path.join(xdg, "kcache"))
    user = os.path.join(xdg, "kcache", "kcache.conf")
    with open(user, "w") as f:
        f.write("# mine\ncompression = zstd\nbusy_timeout = 100\nmax_size = 3\n")
    os.makedirs(c.dir)
    cache = os.path.join(c.dir, "kcache.conf")
    with open(cache, "w") as f:
        f.write("compression = none\n")
    env = {"XDG_CONFIG_HOME": xdg}
    s = settings(c.run("config", "--json", env=env)[0])
    check(s["compression"]["value"] == "none" and s["compression"]["origin"] == cache + ":1",
          "the cache directory's file wins over the user's: %s" % s["compression"])
    check(s["busy_timeout"]["value"] == "100" and s["busy_timeout"]["origin"] == user + ":3",
          "the user's file, with its line: %s" % s["busy_timeout"])
    check(c.json("stats", env=env)["max_size"] == 3 * GiB, "the store reads the user's file")
    other = os.path.join(root, "other.conf")
    with open(other, "w") as f:
        f.write("busy_timeout = 200\n")
    s = settings(c.run("config", "--json", env=dict(env, KCACHE_CONFIG=other))[0])
    check(s["busy_timeout"]["origin"] == other + ":1" and s["max_size"]["source"] == "default",
          "KCACHE_CONFIG names the user's file instead: %s" % s["busy_timeout"])
    s = settings(c.run("config", "--json", env=dict(env, KCACHE_BUSY_TIMEOUT="300"))[0])
    check(s["busy_timeout"]["source"] == "environment", "the environment wins over files")
    out, _ = c.run("config", env=env)
    check(re.search(r"^busy_timeout\s+100\s+file\s+\S+\.conf:3$", out, re.M),
          "the table names file:line: %r" % out)
    with open(user, "a") as f:
        f.write("max_sise = 1G\n")
    _, err = c.run("stats", rc=2, env=env)
    check(user + ":5" in err, "a bad line names the file and line: %r" % err)


def test_remote_off_for_one_run(root):
    c = Cache(root)
    c.run("config", "remote", "redis://127.0.0.1:9")
    s = settings(c.run("config", "--json", env={"KCACHE_REMOTE": ""})[0])
    check(s["remote"]["source"] == "environment" and s["remote"]["value"] == "",
          "KCACHE_REMOTE= turns the file's remote off: %s" % s["remote"])
    _, err = c.run("remote", "check", rc=1, env={"KCACHE_REMOTE": ""})
    check("no remote set" in err, "and the remote is off: %r" % err)
    c.run("config", "remote", "none")
    _, err = c.run("remote", "check", rc=1)
    check("no remote set" in err, "remote = none is no remote: %r" % err)
    _, err = c.run("compile", "--remote", "none", os.path.join(root, "missing.cu"), rc=None)
    check("--remote" not in err, "compile --remote none is taken: %r" % err)


def main():
    return base.run_tests(globals())


if __name__ == "__main__":
    sys.exit(main())
