"""--edits: edited and aged trees, a warm cache against an empty one and plain
NVRTC after every edit (benchmarks/README.md, "Edited and aged")."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

from trees import *  # noqa: F401,F403  (the shared parts, by their names in run)

# Every file looks 10 s old to kcache: its timestamps are trusted at once, as a
# real tree's are, so a header served by identity alone would show here. Each
# edit below must then move the file's ctime, as a real wait would.
AGED = {'KCACHE_TEST_CLOCK_SHIFT_NS': str(10 * 10**9)}
# --real-wait: no shift; each edit is followed by a real wait past kcache's
# trust window (2 s), to show that the shift changes nothing.
REAL_WAIT_S = 2.2
REAL_WAIT = False
# Appended to each kernel in --edits: a header that defines KCACHE_EDIT_MARK
# changes the kernel's bytes, so an edit that a warm cache missed shows.
MARK_PROBE = ('\n#ifdef KCACHE_EDIT_MARK\n'
              '__device__ int kcache_edit_mark = KCACHE_EDIT_MARK;\n#endif\n')


def mark_lines(n):
    return '#undef KCACHE_EDIT_MARK\n#define KCACHE_EDIT_MARK %d\n' % n


class Tree:
    """The edited copy of the trees: every change moves the file's ctime."""

    def __init__(self):
        self.seen = {}      # path -> ctimes seen, so that each edit shows as a new one
        self.saved = {}     # path -> (bytes, atime, mtime) before the first edit

    def note(self, path):
        if os.path.exists(path):
            self.seen.setdefault(path, set()).add(os.stat(path).st_ctime_ns)

    def settle(self, path):
        """Makes sure path's ctime is one not seen before (the clock ticks coarsely)."""
        if not os.path.exists(path):
            return
        seen = self.seen.setdefault(path, set())
        while True:
            st = os.stat(path)
            if st.st_ctime_ns not in seen:
                break
            time.sleep(0.01)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        seen.add(os.stat(path).st_ctime_ns)

    def content(self, path, n):
        """An edit that keeps size and mtime: defines the mark as n at the top,
        taking as many bytes out of comments."""
        self.note(path)
        st = os.stat(path)
        with open(path, 'rb') as f:
            old = f.read()
        self.saved.setdefault(path, (old, st.st_atime_ns, st.st_mtime_ns))
        text = old.decode('latin-1')
        if text.startswith('#undef KCACHE_EDIT_MARK\n'):
            new = mark_lines(n) + text[len(mark_lines(n)):]
        else:
            new = take_from_comments(text, len(mark_lines(n)))
            if new is None:
                raise RuntimeError('%s: no comments to take %d bytes from' % (path, len(mark_lines(n))))
            new = mark_lines(n) + new
        data = new.encode('latin-1')
        assert len(data) == len(old)
        with open(path, 'wb') as f:
            f.write(data)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        self.settle(path)

    def revert(self, path):
        self.note(path)
        old, atime, mtime = self.saved[path]
        with open(path, 'wb') as f:
            f.write(old)
        os.utime(path, ns=(atime, mtime))
        self.settle(path)

    def create(self, path, text):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'w', encoding='latin-1') as f:
            f.write(text)
        self.settle(path)

    def delete(self, path):
        os.unlink(path)


def take_from_comments(text, n):
    """text with n characters taken from the ends of comment lines (never a
    comment's opening or closing, nor a line a backslash continues or ends), or None."""
    lines = text.split('\n')
    in_block = prev_bs = False
    for i, line in enumerate(lines):
        s = line.strip()
        bs = line.endswith('\\')
        room = 0
        if in_block:
            if '*/' in line:
                in_block = False
            else:
                room = len(line)
        elif s.startswith('/*') and not prev_bs:
            in_block = '*/' not in s[2:]
        elif s.startswith('//') and '/*' not in line and '*/' not in line:
            room = len(line) - (line.index('//') + 2)
        if bs or prev_bs:
            room = 0
        prev_bs = bs
        if room > 0 and n > 0:
            take = min(room, n)
            lines[i] = line[:len(line) - take]
            n -= take
    return '\n'.join(lines) if n == 0 else None


def edit_plan(name, trees, opts, kdir):
    """[(label, action(tree), options, expect)] for one kernel: expect 'hit'
    where the files are back as the warm cache saw them."""
    cupy_inc = os.path.join(trees, 'cupy_cuda13x', 'cupy', '_core', 'include')
    cccl = os.path.join(cupy_inc, 'cupy', '_cccl')
    native = os.path.join(trees, 'warp_lang', 'warp', 'native')
    mathdx = os.path.join(trees, 'nvidia_mathdx', 'nvidia', 'mathdx')
    tk_inc = os.path.join(TOOLKIT, 'include')

    def read(path):
        with open(path, encoding='latin-1') as f:
            return f.read()

    def edit_revert(path, short, n):
        return [('edit %s (size, mtime kept)' % short, lambda t: t.content(path, n), opts, ''),
                ('revert %s' % short, lambda t: t.revert(path), opts, 'hit')]

    def shadow(new, of, short, n, why, o=None):
        o = o or opts
        return [('new %s %s' % (short, why),
                 lambda t: t.create(new, mark_lines(n) + read(of)), o, ''),
                ('edit it (size, mtime kept)', lambda t: t.content(new, n + 1), o, ''),
                ('delete it', lambda t: t.delete(new), o, 'hit' if o is opts else '')]

    if name.startswith('xsf'):
        # The elementwise and CUB kernels try every case on CuPy's tree; these
        # add the xsf headers every xsf function includes.
        return (edit_revert(os.path.join(cupy_inc, 'cupy', 'xsf', 'config.h'), 'cupy/xsf/config.h', 1) +
                [('-DCUPY_JIT_MODE', None, opts + ['-DCUPY_JIT_MODE'], ''),
                 ('no -DCUPY_JIT_MODE again', None, opts, 'hit')])
    if name.startswith('cupy'):
        ahead = os.path.join(kdir, 'ahead')
        o2 = ['-I' + ahead] + opts
        return (edit_revert(os.path.join(cupy_inc, 'cupy', 'complex', 'cexpf.h'),
                            'cupy/complex/cexpf.h', 1) +
                [('-DCUPY_JIT_MODE', None, opts + ['-DCUPY_JIT_MODE'], ''),
                 ('no -DCUPY_JIT_MODE again', None, opts, 'hit')] +
                shadow(os.path.join(cccl, 'libcudacxx', 'cupy', 'complex.cuh'),
                       os.path.join(cupy_inc, 'cupy', 'complex.cuh'), '_cccl/libcudacxx/cupy/complex.cuh', 2,
                       '(first -I) shadows cupy/complex.cuh') +
                shadow(os.path.join(cupy_inc, 'cuda_fp16.h'), os.path.join(tk_inc, 'cuda_fp16.h'),
                       'cuda_fp16.h in CuPy\'s -I', 4, 'shadows the toolkit\'s') +
                shadow(os.path.join(ahead, 'nv', 'target'),
                       os.path.join(cccl, 'libcudacxx', 'nv', 'target'), '-I dir ahead: nv/target', 6,
                       '(CCCL; the toolkit\'s cuda_fp16.h includes it)', o2))
    if name.startswith('warp'):
        return (edit_revert(os.path.join(native, 'builtin.h'), 'native/builtin.h', 1) +
                [('-DWP_ENABLE_DEBUG=1', None,
                  [o if o != '-DWP_ENABLE_DEBUG=0' else '-DWP_ENABLE_DEBUG=1' for o in opts], ''),
                 ('-DWP_ENABLE_DEBUG=0 again', None, opts, 'hit')] +
                # Only the kernel includes deterministic.h: a copy beside it is the one
                # copy (builtin.h, which native headers include too, would be two).
                shadow(os.path.join(kdir, 'deterministic.h'), os.path.join(native, 'deterministic.h'),
                       'deterministic.h beside the source', 2, 'shadows native/deterministic.h'))
    if name in ('cufftdx', 'cublasdx_gemm'):
        inc = os.path.join(mathdx, 'include')
        return (edit_revert(os.path.join(inc, 'commondx', 'detail', 'config.hpp'),
                            'commondx/detail/config.hpp', 1) +
                [('-DNDEBUG', None, opts + ['-DNDEBUG'], ''),
                 ('no -DNDEBUG again', None, opts, 'hit')] +
                shadow(os.path.join(inc, 'cutlass', 'fast_math.h'),
                       os.path.join(mathdx, 'external', 'cutlass', 'include', 'cutlass', 'fast_math.h'),
                       'include/cutlass/fast_math.h', 2, 'shadows external/cutlass\'s') +
                shadow(os.path.join(inc, 'cuda', 'std', 'version'),
                       os.path.join(tk_inc, 'cccl', 'cuda', 'std', 'version'),
                       'include/cuda/std/version', 4, '(user -I ahead) shadows the toolkit CCCL\'s'))
    return []


def copy_trees(src, dst):
    """The trees the kernels read, copied so that edits never touch the download."""
    import shutil
    parts = [('cupy_cuda13x', 'cupy/_core/include'), ('warp_lang', 'warp/native'),
             ('nvidia_mathdx', 'nvidia/mathdx/include'),
             ('nvidia_mathdx', 'nvidia/mathdx/external/cutlass/include')]
    for pkg, sub in parts:
        shutil.copytree(os.path.join(src, pkg, sub), os.path.join(dst, pkg, sub), symlinks=True)


def cli_compile(kcache, db, path, arch, opts, out):
    env = dict(os.environ, KCACHE_PATH=db, **(AGED if not REAL_WAIT else {}))
    env.pop('KCACHE_DIR', None)
    if os.path.exists(out):
        os.unlink(out)
    p = subprocess.run([kcache, 'compile', path, '--arch', arch, '--json', '-o', out, '--'] + opts,
                       env=env, capture_output=True, text=True)
    try:
        item = json.loads(p.stdout)['items'][0]
    except (ValueError, KeyError, IndexError):
        item = {'outcome': 'error', 'message': (p.stderr or p.stdout)[-200:]}
    data = open(out, 'rb').read() if os.path.exists(out) and p.returncode == 0 else None
    return data, item


class Server:
    """bench_realtree --serve: one process, one compiler, its memo kept across edits."""

    def __init__(self, bench, db, source, aged=True):
        env = dict(os.environ, **(AGED if aged and not REAL_WAIT else {}))
        self.p = subprocess.Popen([bench, '--serve', '--db', db, '--source', source],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def ask(self, what, out, arch, opts):
        if os.path.exists(out):
            os.unlink(out)
        self.p.stdin.write('\t'.join([what, out, arch] + opts) + '\n')
        self.p.stdin.flush()
        r = json.loads(self.p.stdout.readline())
        data = open(out, 'rb').read() if r.get('ok') else None
        return data, r

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def without_pch(opts):
    """The options kcache compiles with: it leaves NVRTC's automatic PCH out of every compile
    (lib/compile/nvrtc.c), so its bytes are plain NVRTC's without --pch (the README)."""
    return [o for o in opts if o != '--pch' and not o.startswith('--pch-')]


def plain_once(bench, source, arch, opts, out, scratch, keep_pch=False):
    """Plain NVRTC in a process of its own, without --pch (see without_pch()) unless keep_pch."""
    opts = opts if keep_pch else without_pch(opts)
    s = Server(bench, os.path.join(scratch, 'plain.db'), source, aged=False)
    try:
        return s.ask('plain', out, arch, opts)
    finally:
        s.close()


def ptx_equal_plain(kcache, bench, path, opts, scratch):
    """Whether an empty cache's PTX is plain NVRTC's, comment lines and __FILE__ spelling aside."""
    dirs = [o[2:] for o in opts if o.startswith('-I')]
    dirs += [o.split('=', 1)[1] for o in opts if o.startswith('--include-path=')]
    dirs.append(os.path.dirname(path))
    db = os.path.join(scratch, 'ptx-%d.db' % time.monotonic_ns())
    ours, _ = cli_compile(kcache, db, path, 'compute_90', opts, os.path.join(scratch, 'k.ptx'))
    theirs, _ = plain_once(bench, path, 'compute_90', opts, os.path.join(scratch, 'p.ptx'), scratch)
    if ours is None or theirs is None:
        return ours is None and theirs is None

    def body(t):
        return [line for line in t.splitlines() if not line.startswith('//')]
    return body(ours.decode('latin-1')) == body(strip_dirs(theirs, dirs))


def check_step(kcache, bench, server, name, path, opts, scratch, n):
    """After one edit: the warm CLI, the warm process and plain NVRTC, at once, then an empty cache."""
    import concurrent.futures as cf
    out = lambda tag: os.path.join(scratch, '%s-%d.%s' % (name, n, tag))
    with cf.ThreadPoolExecutor(4) as ex:
        warm_cli = ex.submit(cli_compile, kcache, os.path.join(scratch, name + '-warm.db'), path,
                             'sm_90', opts, out('warm.cubin'))
        warm_proc = ex.submit(server.ask, 'kcache', out('proc.cubin'), 'sm_90', opts)
        empty = ex.submit(cli_compile, kcache, os.path.join(scratch, '%s-empty-%d.db' % (name, n)),
                          path, 'sm_90', opts, out('empty.cubin'))
        plain = ex.submit(plain_once, bench, path, 'sm_90', opts, out('plain.cubin'), scratch)
        return warm_cli.result(), warm_proc.result(), empty.result(), plain.result()


def run_edits(a, kcache, bench, ks_names):
    scratch = tempfile.mkdtemp(prefix='kcache-realtrees-edits-')
    trees = os.path.join(scratch, 'trees')
    copy_trees(fetch_wheels(), trees)
    ks = kernels(trees)
    rows, failures = [], []
    for name, (src, opts) in ks.items():
        if ks_names and name not in ks_names:
            continue
        if a.drop_pch:
            opts = [o for o in opts if o != '--pch']
        kdir = os.path.join(scratch, 'kernels', name)
        os.makedirs(kdir)
        path = os.path.join(kdir, name + '.cu')
        with open(path, 'w') as f:
            f.write(src + MARK_PROBE)
        if REAL_WAIT:
            time.sleep(REAL_WAIT_S)  # the copy and the kernel, old enough to trust
        tree = Tree()
        server = Server(bench, os.path.join(scratch, name + '-proc.db'), path)
        # Warm both paths on the untouched tree.
        cli_compile(kcache, os.path.join(scratch, name + '-warm.db'), path, 'sm_90', opts,
                    os.path.join(scratch, name + '-warmup.cubin'))
        server.ask('kcache', os.path.join(scratch, name + '-warmup-proc.cubin'), 'sm_90', opts)
        steps = [('warm, nothing edited', None, opts, 'hit')] + edit_plan(name, trees, opts, kdir)
        base, earlier = None, []
        for n, (label, action, o, expect) in enumerate(steps):
            if action:
                action(tree)
            if REAL_WAIT:
                time.sleep(REAL_WAIT_S)
            t0 = time.perf_counter()
            (wc, wci), (wp, wpi), (em, emi), (pl, pli) = check_step(kcache, bench, server, name,
                                                                    path, o, scratch, n)
            if base is None:
                base = em
            cubin_plain = em is not None and em == pl
            ptx_plain = None
            if not cubin_plain:
                ptx_plain = ptx_equal_plain(kcache, bench, path, o, scratch)
            row = {
                'kernel': name, 'step': label,
                'warm_cli': wci.get('outcome'), 'warm_proc': 'hit' if wpi.get('hit') else
                ('miss' if wpi.get('keyed') else 'uncached') if wpi.get('ok') else 'error',
                'cli_equal_empty': wc == em, 'proc_equal_empty': wp == em,
                'empty_ok': em is not None, 'plain_ok': pl is not None,
                'empty_equal_plain': 'cubin' if cubin_plain else ('ptx' if ptx_plain else 'NO'),
                'changed': em != base, 'expect': expect,
                'uncached_why': (wci.get('message') if wci.get('outcome') == 'uncached' else '') or
                                (wpi.get('store_message') if wpi.get('ok') and not wpi.get('keyed')
                                 else ''),
                'seconds': round(time.perf_counter() - t0, 1),
            }
            if em is None:
                row['empty_message'] = emi.get('message', '')[:200]
            if wp != em and wp is not None and wp in earlier:
                # The bytes of the files before the edit: a compile reused something stale.
                row['proc_is_earlier_step'] = True
            earlier.append(em)
            problems = []
            if not row['cli_equal_empty']:
                problems.append('warm CLI != empty cache')
            if not row['proc_equal_empty']:
                problems.append('warm process != empty cache' +
                                (' (the bytes of an earlier step)' if row.get('proc_is_earlier_step')
                                 else ''))
            if row['empty_equal_plain'] == 'NO' and not (em is None and pl is None):
                problems.append('empty cache != plain NVRTC')
            if action and em is None:
                problems.append('the edit broke the compile (bad case)')
            row['problems'] = problems
            rows.append(row)
            if problems:
                failures.append(row)
            print(json.dumps(row), flush=True)
        server.close()
    return rows, failures, scratch


def write_edits(path, rows, failures, cmd):
    out = ['# Real header trees, edited', '',
           'Generated by `%s` on this machine (CPU only). ' % cmd +
           ('No clock shift: after each edit a real wait of %.1f s, past kcache\'s trust window. '
            % REAL_WAIT_S if '--real-wait' in cmd else
            'Every file is aged '
            '(`KCACHE_TEST_CLOCK_SHIFT_NS=10000000000`: kcache sees each file as 10 s old, so '
            'it trusts timestamps as it would on a real tree), and every edit moves the '
            'file\'s ctime, as a real wait would. ') + 'Each kernel has `KCACHE_EDIT_MARK` probed at '
           'its end, so an edit that defines it changes the kernel\'s bytes ("changed").', '',
           'After each step: the warm cache through the CLI (`kcache compile`, its own warm '
           'cache) and through one process kept open since the warm-up (`bench_realtree '
           '--serve`: the process\'s header memo), an empty cache (CLI), and plain NVRTC '
           'reading the disk (a process of its own). "= empty": the warm bytes are the empty '
           'cache\'s; "= NVRTC": the empty cache\'s CUBIN is plain NVRTC\'s ("cubin"), or its '
           'PTX is, comment lines and `__FILE__` spelling aside ("ptx"); plain NVRTC without '
           '`--pch`, which kcache leaves out of every compile it runs (NVRTC 13 reuses a PCH '
           'without reading the headers again; see the README).', '',
           '**%d failures** in %d steps.' % (len(failures), len(rows)), '',
           '| kernel | step | warm CLI | warm process | = empty (CLI, process) | = NVRTC '
           '| changed | uncached because |',
           '|---|---|---|---|---|---|---|---|']
    for r in rows:
        eq = '%s, %s' % ('yes' if r['cli_equal_empty'] else '**NO**',
                         'yes' if r['proc_equal_empty'] else '**NO**')
        out.append('| %s | %s | %s | %s | %s | %s | %s | %s |' % (
            r['kernel'], r['step'], r['warm_cli'], r['warm_proc'], eq,
            r['empty_equal_plain'] if r['empty_ok'] else 'both fail' if not r['plain_ok']
            else '**NO** (%s)' % r.get('empty_message', ''),
            'yes' if r['changed'] else 'no', r['uncached_why'] or ''))
    if failures:
        out += ['', '## Failures', '']
        out += ['- %s, "%s": %s' % (r['kernel'], r['step'], '; '.join(r['problems']))
                for r in failures]
    with open(path, 'w') as f:
        f.write('\n'.join(out) + '\n')


# ---- --compare: hits of two builds, interleaved -----------------------------


def pch_reorder_only(kcache, bench, work, name, path, opts):
    """With --pch, NVRTC 13 emits some module-scope variables (seen: two instantiations of
    cuda::std::is_same_v in CuPy's CUB reduction) at another place in the PTX than without it;
    ptxas then lays out .nv.global and the symbol table in that order, every other section the
    same. kcache leaves --pch out of every compile (lib/compile/nvrtc.c), so its bytes are
    plain NVRTC's without --pch. Two checks, each exact about what it forgives:
    equal_plain_without_pch, the CUBIN byte for byte; equal_but_global_order, the PTX against
    plain NVRTC's with --pch, its module-scope .global lines compared as a multiset and every
    other line in order."""
    if '--pch' not in opts:
        return {}
    without = [o for o in opts if o != '--pch']
    out = os.path.join(work, name + '.pch')
    ours, _ = cli_compile(kcache, out + '-cubin.db', path, 'sm_90', opts, out + '.cubin')
    theirs, _ = plain_once(bench, path, 'sm_90', without, out + '.plain.cubin', work)
    ours_ptx, _ = cli_compile(kcache, out + '-ptx.db', path, 'compute_90', opts, out + '.ptx')
    theirs_ptx, _ = plain_once(bench, path, 'compute_90', opts, out + '.plain.ptx', work,
                               keep_pch=True)
    if ours_ptx is None or theirs_ptx is None:
        return {'equal_plain_without_pch': False, 'equal_but_global_order': False}

    def split(t):
        lines = t.decode('latin-1').splitlines()
        glob = sorted(line for line in lines if line.startswith('.global '))
        return glob, [line for line in lines if not line.startswith('.global ')]
    return {'equal_plain_without_pch': ours is not None and ours == theirs,
            'equal_but_global_order': split(ours_ptx) == split(theirs_ptx)}
