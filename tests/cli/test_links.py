#!/usr/bin/env python3
"""Every file kcache writes: never through a link planted at its name.

Usage: test_links.py KCACHE KCACHE_FILL [TEST-NAME...]

For each file a verb creates (export --dir's manifest and artifacts, a
bundle, an output, the config file, the remote's remote-down note and its
temporary file), a symbolic link to a victim file is planted at the name
first: the victim keeps its bytes. export --dir refuses a directory others
can change unless it is sticky, and a link another user made inside a sticky
one. The database, its -wal, -shm and the hit log are covered by
tests/store/test_hostile_files.c and test_perms.c.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as base  # noqa: E402  (the same harness, same arguments)
from kctest import Cache, Skip, check  # noqa: E402  (on the path test_cli set)

VICTIM = b"the victim's own bytes\n"


def victim(root, name="victim"):
    path = os.path.join(root, name)
    with open(path, "wb") as f:
        f.write(VICTIM)
    return path


def intact(path):
    with open(path, "rb") as f:
        return f.read() == VICTIM


def exported_names(c, root):
    """The files export --dir writes for this cache, relative to the directory."""
    probe = os.path.join(root, "probe")
    c.run("export", "--dir", probe)
    names = []
    for dirpath, _, files in os.walk(probe):
        names += [os.path.relpath(os.path.join(dirpath, f), probe) for f in files]
    return sorted(names)


def test_export_dir_never_writes_through_links(root):
    c = Cache(root)
    c.fill(2)
    names = exported_names(c, root)
    check("manifest.json" in names and len(names) == 3, "export wrote %s" % names)
    out = os.path.join(root, "out")
    victims = {}
    for n in names:
        os.makedirs(os.path.dirname(os.path.join(out, n)) or out, exist_ok=True)
        victims[n] = victim(root, "victim-" + n.replace("/", "_"))
        os.symlink(victims[n], os.path.join(out, n))
    c.run("export", "--dir", out)
    for n in names:
        check(intact(victims[n]), "export --dir wrote through the link at %s" % n)
        check(not os.path.islink(os.path.join(out, n)), "%s is a file of its own now" % n)
    json.load(open(os.path.join(out, "manifest.json")))


def test_export_dir_others_can_change_refused(root):
    c = Cache(root)
    c.fill(2)
    names = exported_names(c, root)
    out = os.path.join(root, "open")
    os.mkdir(out)
    os.chmod(out, 0o777)
    v = victim(root)
    os.symlink(v, os.path.join(out, "manifest.json"))
    _, err = c.run("export", "--dir", out, rc=1)
    check(out in err and "can be changed by anyone" in err, "the directory is named: %r" % err)
    check(intact(v) and sorted(os.listdir(out)) == ["manifest.json"], "nothing was written")
    # Sticky (as /tmp): accepted, and a link planted there is still not followed.
    os.chmod(out, 0o1777)
    c.run("export", "--dir", out)
    check(intact(v), "the sticky directory's link was not followed")
    if os.geteuid() != 0:
        return
    # Another user's link to a directory of ours, inside the sticky one: refused.
    mine = os.path.join(root, "mine")
    os.mkdir(mine, 0o700)
    sticky = os.path.join(root, "sticky")
    os.mkdir(sticky)
    os.chmod(sticky, 0o1777)
    arch = names[0].split("/")[0] if "/" in names[0] else names[1].split("/")[0]
    link = os.path.join(sticky, arch)
    os.symlink(mine, link)
    os.lchown(link, 54321, 54321)
    _, err = c.run("export", "--dir", sticky, rc=1)
    check("made by uid 54321" in err, "another user's link is refused: %r" % err)
    check(os.listdir(mine) == [], "nothing was written through it")


def test_outputs_bundle_and_config_never_through_links(root):
    c = Cache(root)
    key = c.fill(1)[0]
    for what, args in (("get -o", ["get", key, "-o"]), ("export", ["export"])):
        v = victim(root, "victim-" + what.replace(" ", ""))
        target = os.path.join(root, "planted-" + what.replace(" ", ""))
        os.symlink(v, target)
        c.run(*(args + [target]))
        check(intact(v), "%s wrote through the link" % what)
        check(not os.path.islink(target), "%s: a file of its own in place of the link" % what)
    v = victim(root, "victim-conf")
    with open(v, "wb") as f:
        f.write(b"# the victim's own settings\n")
    conf = os.path.join(c.dir, "kcache.conf")
    os.symlink(v, conf)
    c.run("config", "max_size", "2G")
    check(open(v, "rb").read() == b"# the victim's own settings\n",
          "config wrote through the link")


def test_remote_down_never_through_links(root):
    corpus = os.environ.get("CORPUS", "")
    src = os.path.join(corpus, "saxpy.cu")
    if not corpus or not os.path.exists(src) or not os.path.isdir("/usr/local/cuda"):
        raise Skip("needs the CUDA toolkit and examples/ (CORPUS)")
    c = Cache(root)
    os.makedirs(c.dir)
    v = victim(root)
    down = os.path.join(c.dir, "remote-down")

    def plant():  # in the child, before exec: the pid is kcache's
        os.symlink(v, "%s.%d" % (down, os.getpid()))

    env = dict(c.env, KCACHE_REMOTE="redis://127.0.0.1:1")
    p = subprocess.run([base.KCACHE, "compile", src, "--arch", "sm_90", "-o",
                        os.path.join(root, "k.cubin")], env=env, capture_output=True,
                       preexec_fn=plant, timeout=300)
    check(p.returncode == 0, "compile with a remote that is down: %s" % p.stderr.decode())
    check(intact(v), "the remote-down note was written through a planted link")
    check(os.path.isfile(down) and not os.path.islink(down), "the note is a file of its own")
    c2 = Cache(root, "cache2")
    os.makedirs(c2.dir)
    down2 = os.path.join(c2.dir, "remote-down")
    os.symlink(v, down2)
    p = subprocess.run([base.KCACHE, "compile", src, "--arch", "sm_90", "-o",
                        os.path.join(root, "k2.cubin")], env=dict(c2.env, **{
                            "KCACHE_REMOTE": "redis://127.0.0.1:1"}), capture_output=True,
                       timeout=300)
    check(p.returncode == 0, "compile with a remote that is down: %s" % p.stderr.decode())
    check(intact(v), "remote-down itself was written through a link")
    check(not os.path.islink(down2), "remote-down is a file of its own in place of the link")


def main():
    return base.run_tests(globals())


if __name__ == "__main__":
    sys.exit(main())
