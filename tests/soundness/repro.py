"""The soundness harness's repro scripts: a failure's tree and steps as a shell
script that rebuilds the tree and runs the failing path's commands against
NVIDIA's NVRTC, self-contained but for the build. Imported by harness.py.
"""
import os
import shlex

from scenarios import ARCH, SHIFT_NS


SCRIPT_HEAD = r'''#!/bin/bash
# A repro from tests/soundness/harness.py: rebuilds the tree, applies each step's
# edits, and after each step compares kcache's result with NVIDIA's NVRTC
# reading the disk (soundness-driver's "nvrtc" mode, run without the drop-in).
# KCACHE, DRIVER and SHIM may be set to another build's.
# Exits 1 when a result differs, as the harness saw it.
set -u
export LC_ALL=C
KCACHE=${KCACHE:-%(kcache)s}
DRIVER=${DRIVER:-%(driver)s}
SHIM=${SHIM:-%(shim)s}
HERE=$(cd "$(dirname "$0")" && pwd)
R=$(mktemp -d %(rootdir)s)
export KCACHE_DIR="$R/.cache"
unset KCACHE_DISABLE KCACHE_REMOTE LD_PRELOAD KCACHE_NVRTC_REAL
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0"
%(aged)s
mkdir -p "$R"
DIFFERS=0
# field TAG VALUE: one field of soundness-driver's wire format.
field() { printf '%%s %%d\n%%s\n' "$1" "${#2}" "$2"; }
# request MODE CWD SOURCE [OPTIONS...]; in-memory headers come from MEM_NAMES/MEM_FILES.
request() {
    local mode=$1 cwd=$2 src=$3; shift 3
    field mode "$mode"; field arch "$ARCH"; field kind "$KIND"; field cwd "$cwd"; field path "$src"
    [ -n "$NAME" ] && field name "$NAME"
    local o; for o in "$@"; do field opt "$o"; done
    local i; for i in "${!MEM_NAMES[@]}"; do
        local t; t=$(cat "${MEM_FILES[$i]}"; printf x)
        field hname "${MEM_NAMES[$i]}"; field htext "${t%%x}"
    done
    field go ""
}
# answer: reads one answer from the driver on fd $1; the kernel (PTX without
# comment lines, a CUBIN or LTO-IR whole) goes to file $2, "failed" if it did
# not compile. Fields go through a file: a binary's NUL bytes cannot live in
# a shell variable.
answer() {
    local tag n status=
    while read -r tag n <&"$1"; do
        dd bs=1 count="$((n + 1))" of="$R/.field" <&"$1" 2>/dev/null
        case $tag in
            status) status=$(head -c "$n" "$R/.field") ;;
            ptx) if [ "$status" != 0 ]; then echo failed > "$2"
                 elif [ "$KIND" = ptx ]; then head -c "$n" "$R/.field" | grep -v '^[[:space:]]*//' | grep -v '^\s*$' > "$2"
                 else head -c "$n" "$R/.field" > "$2"; fi ;;
            end) return 0 ;;
        esac
    done
    echo "driver died" > "$2"
}
MEM_NAMES=(); MEM_FILES=()
# What NVRTC reads from the environment (ENVS), what is asked for (KIND), the
# architecture the driver adds ("-": none, the options name it), the program's name.
ENVS=(); KIND=ptx; ARCH=%(arch)s; NAME=
%(coproc)s
check() { # check STEP: NVRTC now against kcache's path
    local step=$1; shift
    request nvrtc "$CWD" "$SRC" "${OPTS[@]}" | env -u LD_PRELOAD "${ENVS[@]}" "$DRIVER" > "$R/.ref.answer"
    answer 3 "$R/.ref.$step" 3< "$R/.ref.answer"
    %(check)s
    if ! cmp -s "$R/.ref.$step" "$R/.got.$step"; then
        echo "step $step: DIFFERS from NVRTC"; diff "$R/.ref.$step" "$R/.got.$step" | head -20
        DIFFERS=1
    else
        echo "step $step: same as NVRTC"
    fi
}
'''

CHECK = {
    "cli": r'''rm -f "$R/.out.ptx"
    local args=() rest=() o
    for o in "${OPTS[@]}"; do
        case $o in -I?*|-D?*) if [ ${#rest[@]} -eq 0 ]; then args+=("${o:0:2}" "${o:2}"); else rest+=("$o"); fi ;;
            -dlto) [ "$KIND" = ltoir ] || rest+=("$o") ;;  # --ltoir says it
            *) rest+=("$o") ;; esac
    done
    [ ${#rest[@]} -gt 0 ] && args+=(-- "${rest[@]}")
    (cd "$CWD" && env "${ENVS[@]}" "$KCACHE" compile "$SRC" --arch %(arch)s --"$KIND" -o "$R/.out.ptx" "${args[@]}" >/dev/null 2>"$R/.err") || true
    if [ ! -s "$R/.out.ptx" ]; then echo failed > "$R/.got.$step"
    elif [ "$KIND" = ptx ]; then grep -v '^[[:space:]]*//' "$R/.out.ptx" | grep -v '^\s*$' > "$R/.got.$step"
    else cp "$R/.out.ptx" "$R/.got.$step"; fi
    echo "  kcache compile: $(cat "$R/.err" | head -1)"''',
    "lib": r'''request lib "$CWD" "$SRC" "${OPTS[@]}" >&"${KC[1]}"
    answer "${KC[0]}" "$R/.got.$step"''',
    "dropin": r'''request nvrtc "$CWD" "$SRC" "${OPTS[@]}" >&"${KC[1]}"
    answer "${KC[0]}" "$R/.got.$step"''',
}

COPROC = {
    "cli": "",
    "lib": 'coproc KC { "$DRIVER"; }',
    "dropin": 'coproc KC { LD_PRELOAD="$SHIM" "$DRIVER"; }',
}

# A scenario that sets what NVRTC reads from the environment (read as NVRTC
# loads) starts a process per step, as the harness does per environment.
CHECK_ENV = {
    "lib": r'''request lib "$CWD" "$SRC" "${OPTS[@]}" | env "${ENVS[@]}" "$DRIVER" > "$R/.kc.answer"
    answer 3 "$R/.got.$step" 3< "$R/.kc.answer"''',
    "dropin": r'''request nvrtc "$CWD" "$SRC" "${OPTS[@]}" | env LD_PRELOAD="$SHIM" "${ENVS[@]}" "$DRIVER" > "$R/.kc.answer"
    answer 3 "$R/.got.$step" 3< "$R/.kc.answer"''',
}


def qr(s):
    """s quoted for the shell, "{R}" standing for the tree's root ($R)."""
    parts = s.split("{R}")
    return '"$R"'.join(shlex.quote(p) if p else "" for p in parts) or "''"


def shell_op(op):
    kind = op[0]
    q = lambda s: shlex.quote(s)  # noqa: E731
    rel = op[1]
    p = '"$R"/' + q(rel)
    d = '"$R"/' + q(os.path.dirname(rel) or ".")
    if kind == "set":
        if rel == "mem":
            lines = ["MEM_NAMES=(); MEM_FILES=()"]
            for i, (name, text) in enumerate(op[2]):
                f = '"$R"/.mem%d' % i
                lines.append("cat > %s <<'KC_EOF'\n%sKC_EOF" % (f, text))
                lines.append("MEM_NAMES+=(%s); MEM_FILES+=(%s)" % (q(name), f))
            return "\n".join(lines)
        if rel == "copy":
            return 'CWD="$R"/%s/src; SRC="$R"/%s/src/k.cu; INCS=("$R"/%s/inc)' % (
                op[2], op[2], op[2])
        if rel == "incs":
            return "INCS=(%s)" % " ".join(qr(i) for i in op[2])
        if rel == "extra":
            return "EXTRA=(%s)" % " ".join(qr(o) for o in op[2])
        if rel == "env":
            return "ENVS=(%s)" % " ".join(q("%s=%s" % kv) for kv in sorted(op[2].items()))
        if rel in ("kind", "name"):
            return "%s=%s" % (rel.upper(), qr(op[2]))
        if rel == "cwd":
            return 'CWD="$R"/%s' % q(op[2])
        if rel == "arg":  # the source as given, from CWD (paths)
            return "SRC=%s" % qr(op[2])
        if rel in ("source", "pinfo"):  # the file arg names; what the step touches
            return "# %s: %s" % (rel, op[2])
        assert rel == "defines", rel
        return "DEFS=(%s)" % " ".join(q(x) for x in op[2])
    if kind in ("write", "replace", "same"):
        out = ["mkdir -p %s" % d]
        target = p + (".new" if kind == "replace" else "")
        if kind == "same":
            out.append("[ -f %s ] && touch -r %s \"$R/.stamp\"" % (p, p))
        out.append("[ -L %s ] && rm -f %s" % (p, p))
        out.append("sed \"s|@R@|$R|g\" > %s <<'KC_EOF'\n%sKC_EOF" % (target, op[2].replace("{R}", "@R@")))
        if kind == "replace":
            out.append("mv %s %s" % (target, p))
        if kind == "same":
            out.append("[ -f \"$R/.stamp\" ] && touch -m -r \"$R/.stamp\" %s; rm -f \"$R/.stamp\""
                       % p)
        out.append("sleep 0.01  # a new ctime tick for every edit")
        return "\n".join(out)
    if kind == "rm":
        return "rm -rf %s; sleep 0.01" % p
    if kind == "ln":
        return "mkdir -p %s; rm -rf %s; ln -s %s %s; sleep 0.01" % (d, p, q(op[2]), p)
    raise ValueError(op)


def write_repro(args, sc, steps, failure, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    path = failure["path"]
    aged = ('export KCACHE_TEST_CLOCK_SHIFT_NS=%d  # every file looks 10 s old to kcache'
            % SHIFT_NS) if sc.aged else "unset KCACHE_TEST_CLOCK_SHIFT_NS"
    cfg = sc.cfg
    env = "env" in cfg or any(op[:2] == ("set", "env") for s in steps for op in s)
    check = CHECK_ENV[path] if env and path in CHECK_ENV else CHECK[path]
    rootdir = ("/dev/shm/kcache-repro-XXXXXX" if cfg.get("root") == "shm" else
               '"${TMPDIR:-/tmp}/kcache repro-XXXXXX"')
    text = SCRIPT_HEAD % dict(kcache=shlex.quote(os.path.abspath(args.kcache)),
                              driver=shlex.quote(os.path.abspath(args.driver)),
                              shim=shlex.quote(os.path.abspath(args.shim)), aged=aged,
                              coproc="" if env else COPROC[path], arch=ARCH[0],
                              check=check % dict(arch=ARCH[0]), rootdir=rootdir)
    lines = ["# scenario %s, seed %d, %s files; the failure: %s on the %s path at step %d"
             % (sc.kind, sc.seed, "aged" if sc.aged else "fresh", failure["why"], path,
                len(steps)),
             "# The tree."]
    lines += [shell_op(op) for op in sc.setup]
    lines.append(shell_op(("set", "incs", cfg["incs"])))
    lines.append(shell_op(("set", "defines", cfg["defines"])))
    if cfg["mem"]:
        lines.append(shell_op(("set", "mem", cfg["mem"])))
    for key in ("env", "kind", "name"):
        if key in cfg:
            lines.append(shell_op(("set", key, cfg[key])))
    if "arch" in cfg:
        lines.append("ARCH=%s" % shlex.quote(cfg["arch"]))
    lines.append('CWD="$R"/%s; SRC="$R"/%s' % (shlex.quote(cfg["cwd"]),
                                               shlex.quote(cfg["source"])))
    if cfg.get("arg"):
        lines.append(shell_op(("set", "arg", cfg["arg"])))
    lines.append(shell_op(("set", "extra", cfg.get("extra", []))))
    lines.append('opts() { OPTS=(); local i d; for i in "${INCS[@]}"; do OPTS+=("-I$i"); done;'
                 ' for d in "${DEFS[@]}"; do OPTS+=("-D$d"); done; OPTS+=("${EXTRA[@]}"); }')
    lines.append("opts; check 0")
    for n, step in enumerate(steps, 1):
        lines.append("# Step %d." % n)
        lines += [shell_op(op) for op in step]
        lines.append("opts; check %d" % n)
    lines.append('rm -rf "$R"')
    lines.append("exit $DIFFERS")
    script = os.path.join(out_dir, "repro.sh")
    with open(script, "w") as f:
        f.write(text + "\n".join(lines) + "\n")
    os.chmod(script, 0o755)
    return script
