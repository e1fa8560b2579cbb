#!/usr/bin/env python3
"""doc/ci.md's recipes, run as written, against a fresh copy of a project.

Usage: test_ci_recipe.py KCACHE SOURCE_ROOT [TEST-NAME...]

The YAML blocks of doc/ci.md are read, not copied here: each job's commands
run with bash on a workspace of its own (a fresh copy of a project made of
examples/ kernels, at another path each job), and what the CI would do
between them is done as GitHub's actions/cache and artifacts and GitLab's
cache: and artifacts: do it (a cache restored by exact key, else by the
newest with the restore prefix; saved only under a new key on GitHub, after
every job on GitLab). Pipelines are run cold, again unchanged, and after a
kernel's source changed; the test job must find every kernel a hit, and its
program's first hit must cost what a hit costs (the figures are printed).
Skips (77) without NVRTC.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
from kctest import Failure, Skip, check, run_tests  # noqa: E402

KCACHE = os.path.abspath(sys.argv[1])
SOURCE_ROOT = os.path.abspath(sys.argv[2])
TOOLKIT = os.path.realpath(os.environ.get("CUDA_HOME", "/usr/local/cuda"))


def recipe(name):
    """The YAML block after '<!-- recipe: NAME -->' in doc/ci.md, as lines."""
    with open(os.path.join(SOURCE_ROOT, "doc", "ci.md")) as f:
        text = f.read()
    m = re.search(r"<!-- recipe: %s -->\n```yaml\n(.*?)```" % name, text, re.S)
    if not m:
        raise Failure("doc/ci.md has no %s recipe" % name)
    return m.group(1).splitlines()


def indent(line):
    return len(line) - len(line.lstrip())


def block(lines, i):
    """The lines under lines[i] (indented deeper), and the index after them."""
    base, out = indent(lines[i]), []
    i += 1
    while i < len(lines) and (not lines[i].strip() or indent(lines[i]) > base):
        if lines[i].strip():
            out.append(lines[i])
        i += 1
    return out, i


def project(root, name, edit=0):
    """A fresh copy of a project: kernels/ with three kernels and requests.json."""
    ws = os.path.join(root, name)
    k = os.path.join(ws, "kernels")
    os.makedirs(k)
    for f in ("saxpy.cu", "tiled_gemm.cu", "block_sort.cu"):
        shutil.copy(os.path.join(SOURCE_ROOT, "examples", f), k)
    if edit:
        with open(os.path.join(k, "saxpy.cu"), "a") as f:
            f.write("// edit %d\n" % edit)
    reqs = {"requests": [
        {"source": "saxpy.cu", "arch": ["sm_80", "sm_90"]},
        {"source": "tiled_gemm.cu", "arch": ["sm_90"]},
        {"source": "block_sort.cu", "arch": ["sm_90"],
         "options": ["-I" + os.path.join(TOOLKIT, "include", "cccl"), "--std=c++17"]},
    ]}
    with open(os.path.join(k, "requests.json"), "w") as f:
        json.dump(reqs, f)
    return ws


class Runner:
    """The CI: its cache (key -> saved directory, newest last) and artifacts."""

    def __init__(self, root):
        self.root = root
        self.caches = []
        self.artifacts = {}
        self.jobs = 0
        self.log = []

    def sh(self, script, ws, env, outputs=None):
        e = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
        e.update(env)
        e["HOME"] = os.path.join(ws, "home")
        e["PATH"] = os.path.dirname(KCACHE) + os.pathsep + e.get("PATH", "")
        if outputs is not None:
            e["GITHUB_OUTPUT"] = outputs
        p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=ws, env=e,
                           capture_output=True, text=True, timeout=600)
        self.log.append((script, p.returncode, p.stdout, p.stderr))
        if p.returncode:
            raise Failure("%s\nexit %d\nstdout: %s\nstderr: %s"
                          % (script, p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
        return p

    def workspace(self, edit):
        self.jobs += 1
        return project(self.root, "runner%d" % self.jobs, edit)

    def restore(self, ws, path, key, prefixes):
        for want in [key] + prefixes:
            for k, saved in reversed(self.caches):
                if (k == key) if want is key else k.startswith(want):
                    shutil.copytree(saved, os.path.join(ws, path))
                    return k
        return None

    def save(self, ws, path, key):
        src = os.path.join(ws, path)
        if os.path.isdir(src):
            dst = os.path.join(self.root, "ci-cache-%d" % len(self.caches))
            shutil.copytree(src, dst)
            self.caches.append((key, dst))


def expand(text, ws, outputs):
    text = text.replace("${{ github.workspace }}", ws)
    return re.sub(r"\$\{\{ steps\.(\w+)\.outputs\.(\w+) \}\}",
                  lambda m: outputs[m.group(1)][m.group(2)], text)


def github_pipeline(ci, edit=0):
    """Runs the GitHub recipe's jobs in order; returns {job: (workspace, env, cache hit)}."""
    lines = recipe("github")
    i, done = 1, {}
    while i < len(lines):
        job, i = lines[i].strip().rstrip(":"), i + 1
        body, i = block(lines, i - 1)
        ws = ci.workspace(edit)
        env, outputs, post, hit, restored = {}, {}, [], None, None
        j = 0
        while j < len(body):
            line = body[j].strip()
            if line == "env:":
                sub, j = block(body, j)
                env = {k.strip(): v.strip() for k, v in (s.split(":", 1) for s in sub)}
                env = {k: expand(v, ws, outputs) for k, v in env.items()}
                continue
            if line.startswith("- "):
                start = j
                step, j = block(body, j)
                step = [body[start].replace("- ", "  ", 1)] + step
                fields, k = {}, 0
                while k < len(step):
                    key, _, val = step[k].strip().partition(":")
                    if val.strip() == "|" or (val.strip() == "" and key == "with"):
                        sub, k = block(step, k)
                        fields[key] = ("\n".join(s.strip() for s in sub) if key == "run"
                                       else {a.strip(): b.strip() for a, b in
                                             (s.split(":", 1) for s in sub)})
                        continue
                    fields[key] = val.strip()
                    k += 1
                uses = fields.get("uses", "")
                w = {a: expand(b, ws, outputs) for a, b in fields.get("with", {}).items()}
                if "run" in fields:
                    out = os.path.join(ws, ".outputs")
                    open(out, "w").close()
                    ci.sh(fields["run"], ws, env, out)
                    with open(out) as f:
                        outputs[fields.get("id", "")] = dict(
                            l.split("=", 1) for l in f.read().splitlines() if "=" in l)
                elif uses.startswith("actions/cache@"):
                    hit = ci.restore(ws, w["path"], w["key"], [w["restore-keys"]])
                    restored = stats(ws, env) if hit else None
                    post.append(lambda w=w, hit=hit, ws=ws: hit != w["key"] and
                                ci.save(ws, w["path"], w["key"]))
                elif uses.startswith("actions/upload-artifact@"):
                    saved = os.path.join(ci.root, "artifact-%d" % ci.jobs)
                    os.makedirs(saved)
                    shutil.copy(os.path.join(ws, w["path"]), saved)
                    ci.artifacts[w["name"]] = saved
                elif uses.startswith("actions/download-artifact@"):
                    for f in os.listdir(ci.artifacts[w["name"]]):
                        shutil.copy(os.path.join(ci.artifacts[w["name"]], f), ws)
                elif not uses.startswith("actions/checkout@"):
                    raise Failure("the recipe uses %s, which this test does not know" % uses)
                continue
            j += 1
        for fn in post:
            fn()
        done[job] = (ws, env, hit, outputs, restored)
    return done


def gitlab_pipeline(ci, edit=0):
    """Runs the GitLab recipe's jobs in order; returns {job: (workspace, env, cache hit)}."""
    lines = recipe("gitlab")
    i, variables, done = 0, {}, {}
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        name = lines[i].rstrip(":")
        body, i = block(lines, i)
        if name == "variables":
            variables = dict((a.strip(), b.strip()) for a, b in (s.split(":", 1) for s in body))
            continue
        ws = ci.workspace(edit)
        env = {k: v.replace("$CI_PROJECT_DIR", ws) for k, v in variables.items()}
        text = "\n".join(body)
        script = [l.strip()[2:] for l in body if l.startswith("    - ")]
        script = [s for s in script if not s.startswith("[")]
        cache_key = hit = restored = None
        m = re.search(r"files: \[(.*?)\]\n\s+prefix: (\S+)\n\s+paths: \[(.*?)/?\]", text)
        if m:
            import hashlib
            h = hashlib.sha256()
            for f in m.group(1).split(","):
                with open(os.path.join(ws, f.strip()), "rb") as fh:
                    h.update(fh.read())
            cache_key, path = "%s-%s" % (m.group(2), h.hexdigest()), m.group(3)
            hit = ci.restore(ws, path, cache_key, [])
            restored = stats(ws, env) if hit else None
        m = re.search(r"needs: \[(\w+)\]", text)
        if m:
            for a, src in ci.artifacts.items():
                shutil.copy(src, os.path.join(ws, a))
        ci.sh("\n".join(script), ws, env)
        if cache_key:
            ci.save(ws, path, cache_key)
        m = re.search(r"artifacts:\n\s+paths: \[(.*?)\]", text)
        if m:
            for a in m.group(1).split(","):
                ci.artifacts[a.strip()] = os.path.join(ci.root, "artifact-%d-%s" % (ci.jobs,
                                                                                 a.strip()))
                shutil.copy(os.path.join(ws, a.strip()), ci.artifacts[a.strip()])
        done[name] = (ws, env, hit, {}, restored)
    return done


def kc(ws, env, *args):
    e = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    e.update(env, HOME=os.path.join(ws, "home"))
    p = subprocess.run([KCACHE] + list(args), cwd=ws, env=e, capture_output=True, text=True,
                       timeout=600)
    if p.returncode:
        raise Failure("kcache %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr))
    return json.loads(p.stdout) if "--json" in args else p.stdout


def need_nvrtc(root):
    ws = project(root, "probe")
    p = subprocess.run([KCACHE, "compile", "kernels/saxpy.cu", "--arch", "sm_90", "--no-cache"],
                       cwd=ws, capture_output=True, text=True)
    if p.returncode:
        raise Skip("no NVRTC here: %s" % p.stderr.strip()[-200:])


def first_hit_ms(ws, env):
    """The program's first hit: block_sort (CUB's headers), as a new process asks for it."""
    j = kc(ws, env, "compile", "kernels/block_sort.cu", "--arch", "sm_90", "-I",
           os.path.join(TOOLKIT, "include", "cccl"), "--std", "c++17", "--json")
    item = j["items"][0]
    check(item["outcome"] == "hit", "a hit: %s" % item)
    return item["elapsed_ms"]


def stats(ws, env, since=None):
    """The cache's counters, less those it had when restored (since)."""
    st = kc(ws, env, "stats", "--json")
    if since:
        st = dict(st, hits=st["hits"] - since["hits"], misses=st["misses"] - since["misses"])
    return st


def test_github_actions(root):
    need_nvrtc(root)
    ci = Runner(root)
    t0 = time.time()
    first = github_pipeline(ci)
    key = first["kernels"][3]["kcache"]["key"]
    check(re.fullmatch(r"kcache-\d+\.\d+\.\d+-nvrtc-[0-9a-f]{12}-[0-9a-f]{24}", key), key)
    check(first["kernels"][3]["kcache"]["prefix"] == key.rsplit("-", 1)[0] + "-", first)
    ws, env = first["kernels"][:2]
    st = stats(ws, env)
    check(first["kernels"][2] is None and st["misses"] == 4 and st["entries"] >= 4,
          "a cold pipeline compiles the four: %s" % st)
    ws, env = first["test"][:2]
    st = stats(ws, env)
    check(st["hits"] == 4 and st["misses"] == 0, "the test job: every kernel a hit: %s" % st)
    warm_ms = first_hit_ms(ws, env)
    print("     pipeline 1 (cold): %.1f s" % (time.time() - t0))
    # Unchanged: the exact key restores, nothing is compiled.
    second = github_pipeline(ci)
    again = second["kernels"][3]["kcache"]["key"]
    check(again == key, "the same key when nothing changed: %s, then %s" % (key, again))
    ws, env = second["kernels"][:2]
    st = stats(ws, env, second["kernels"][4])
    check(second["kernels"][2] == key and st["misses"] == 0 and st["hits"] == 4,
          "pipeline 2 restores and hits: %s" % st)
    check(len(ci.caches) == 1, "an exact hit saves nothing new")
    # saxpy.cu changed: a new key, restored by the prefix; only saxpy's two compile.
    third = github_pipeline(ci, edit=1)
    new_key = third["kernels"][3]["kcache"]["key"]
    ws, env = third["kernels"][:2]
    st = stats(ws, env, third["kernels"][4])
    check(new_key != key and third["kernels"][2] == key and st["misses"] == 2
          and st["hits"] == 2, "a changed source: a new key, the old cache, 2 misses: %s" % st)
    check(len(ci.caches) == 2, "saved under the new key")
    # The program's first hit on the test runner, after the recipe, against the
    # same runner without the recipe's --require-hit step, and a hit that found
    # its closure remembered where it was made.
    ws, env = third["test"][:2]
    after_recipe = first_hit_ms(ws, env)
    bare = project(root, "bare", 1)
    benv = {"KCACHE_DIR": os.path.join(bare, ".kcache")}
    kc(bare, benv, "import", os.path.join(third["test"][0], "kernels.kcache"))
    cold_ms = first_hit_ms(bare, benv)
    where_made = first_hit_ms(*third["kernels"][:2])
    print("     first hit of block_sort (CUB): %.1f ms after the recipe, %.1f ms where it "
          "was made, %.1f ms after a bare import" % (after_recipe, where_made, cold_ms))
    # A figure, not a check: speed is the benchmarks' to judge, and a loaded runner's
    # timings are not a verdict (the first hit after the recipe should cost what a
    # hit where the kernel was made costs, and after a bare import at another path
    # too: the closure the bundle carries stands for any checkout path).
    print("     first hit after the recipe / where made: %.2fx; after a bare import: %.2fx"
          % (after_recipe / max(where_made, 1e-3), cold_ms / max(where_made, 1e-3)))
    del warm_ms


def test_cache_key_stable(root):
    """--cache-key, run again and again on fresh runners with workers, keys every
    request and gives one key. Each process learns which environment variables
    NVRTC reads with a probe that forks (compile/nvenv.c); forked while a worker
    thread held a lock the child needs (the ASan allocator's), it stuck until its
    30 s kill, every request came out unkeyed, and the key changed."""
    need_nvrtc(root)
    ws = project(root, "stable")
    reqs = os.path.join(ws, "kernels", "requests.json")
    with open(reqs) as f:
        listed = json.load(f)
    for r in listed["requests"]:
        r["arch"] = ["sm_75", "sm_80", "sm_86", "sm_90"]
    with open(reqs, "w") as f:
        json.dump(listed, f)
    keys = []
    for n in range(5):
        env = {"KCACHE_DIR": os.path.join(ws, ".kcache-%d" % n)}
        os.makedirs(os.path.join(ws, "home"), exist_ok=True)
        t0 = time.time()
        j = kc(ws, env, "compile", "--from", "kernels/requests.json", "--cache-key", "-j", "4",
               "--json")
        check(j["keyed"] == 12 and j["uncached"] == 0,
              "run %d keyed every request (%.1f s): %s" % (n + 1, time.time() - t0, j))
        keys.append(j["cache_key"])
    check(len(set(keys)) == 1, "one key for one request list: %s" % keys)


def test_gitlab_ci(root):
    need_nvrtc(root)
    ci = Runner(root)
    first = gitlab_pipeline(ci)
    ws, env = first["kernels"][:2]
    check(stats(ws, env)["misses"] == 4, "cold: the four compiled")
    ws, env = first["test"][:2]
    st = stats(ws, env)
    check(st["hits"] == 4 and st["misses"] == 0, "the test job: every kernel a hit: %s" % st)
    second = gitlab_pipeline(ci)
    ws, env, hit, _, restored = second["kernels"]
    st = stats(ws, env, restored)
    check(hit and st["misses"] == 0 and st["hits"] == 4, "pipeline 2 restores and hits: %s" % st)
    first_hit_ms(*second["test"][:2])


def main():
    return run_tests(globals(), only=sys.argv[3:], prefix="kcache-ci-")


if __name__ == "__main__":
    sys.exit(main())
