"""--compare: this build's hits against another build's, in turns
(benchmarks/README.md, "Two builds' hits")."""
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

def lz4_block(src, size):
    """One LZ4 block decoded (util/codec.h's KC_CODEC_LZ4B: no frame for the lz4 tool)."""
    out, i = bytearray(), 0

    def length(n, i):
        if n == 15:
            while True:
                n += src[i]
                i += 1
                if src[i - 1] != 255:
                    break
        return n, i
    while i < len(src):
        token = src[i]
        n, i = length(token >> 4, i + 1)
        out += src[i:i + n]
        i += n
        if i >= len(src):
            break
        back = src[i] | src[i + 1] << 8
        m, i = length(token & 15, i + 2)
        for _ in range(m + 4):
            out.append(out[-back])
    assert len(out) == size
    return bytes(out)


def closure_probes(db):
    """The probes of the closure recorded last in db: {'file': n, 'toolkit': n, 'absent': n,
    'dir': n}."""
    import sqlite3
    import struct
    con = sqlite3.connect(db)
    try:
        cols = [r[1] for r in con.execute('PRAGMA table_info(closure)')]
        parts = 'c.parts' if 'parts' in cols else 'NULL'
        row = con.execute('SELECT c.codec, c.data, c.raw_size, c.id, %s FROM manifest m JOIN '
                          'closure c ON c.id = m.closure_id ORDER BY m.created_at DESC LIMIT 1'
                          % parts).fetchone()
        chunks = [] if not row or row[4] is None else con.execute(
            'SELECT k.codec, k.data, k.size FROM closure_part p JOIN closure_chunk k'
            ' ON k.id = p.chunk_id WHERE p.closure_id = ? ORDER BY p.seq', (row[3],)).fetchall()
    finally:
        con.close()
    if not row:
        return None

    def decode(codec, data, raw_size):
        if codec in (1, 2):
            return subprocess.run(['zstd' if codec == 1 else 'lz4', '-d', '-c', '-q'], input=data,
                                  capture_output=True, check=True).stdout
        if codec == 4:  # util/codec.h KC_CODEC_LZ4C: the block's XXH3-128, then the block
            return lz4_block(data[16:], raw_size)
        return lz4_block(data, raw_size) if codec == 3 else data
    # Schema 9 keeps a closure in chunks (schema/009_closure_chunks.sql), each coded alone.
    data = (b''.join(decode(*c) for c in chunks) if row[4] is not None
            else decode(row[0], row[1], row[2]))
    assert data[:4] in (b'KCM3', b'KCM4')  # lib/compile/manifest.c's encoding
    off = 8
    for _ in range(struct.unpack_from('<I', data, 4)[0]):  # the directory table
        off += 1 if data[:4] == b'KCM4' else 0
        off += 4 + struct.unpack_from('<I', data, off)[0]
    off += 4
    counts = {'absent': 0, 'file': 0, 'toolkit': 0, 'dir': 0}
    for _ in range(struct.unpack_from('<I', data, off - 4)[0]):
        state = data[off]
        off += 9 + struct.unpack_from('<I', data, off + 5)[0]
        off += 4 if state == 0 else 40 + (32 if state == 1 else 0)
        counts[('absent', 'file', 'toolkit', 'dir')[state]] += 1
    return counts


def timed_child(cmd, env):
    """(wall ms, CPU ms of the child, stdout) of one process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = (time.perf_counter() - t0) * 1000
    return wall, (ru.ru_utime + ru.ru_stime) * 1000, out, p.returncode


def callgrind_ir(cmd, env, scratch):
    """Instructions (callgrind's Ir) that one process runs: the same on a busy machine."""
    out = os.path.join(scratch, 'cg.out')
    p = subprocess.run(['valgrind', '--tool=callgrind', '--callgrind-out-file=' + out] + cmd,
                       env=env, capture_output=True, text=True)
    for line in p.stderr.splitlines():
        if 'Collected :' in line:
            return int(line.split(':')[-1].strip())
    return None


def run_compare(a, sides, ks_names):
    """sides: [(label, kcache, bench)]; hits timed in turns, rounds alternating who goes first."""
    trees = fetch_wheels()
    ks = kernels(trees)
    kdir = os.path.join(CACHE, 'kernels')
    os.makedirs(kdir, exist_ok=True)
    work = tempfile.mkdtemp(prefix='kcache-realtrees-compare-')
    rows = []
    for name, (src, opts) in ks.items():
        if ks_names and name not in ks_names:
            continue
        path = os.path.join(kdir, name + '.cu')
        with open(path, 'w') as f:
            f.write(src)
        row = {'kernel': name}
        samples = {}
        for label, kcache, bench in sides:
            db = os.path.join(work, '%s-%s.db' % (name, label))
            p = subprocess.run([bench, '--db', db, '--source', path, '--arch', 'sm_90',
                                '--reps', str(a.reps), '--plain-reps', '0', '--resolve-reps', '6',
                                '--'] + opts, capture_output=True, text=True)
            first = json.loads(p.stdout) if p.returncode == 0 else {'error': p.stderr[-200:]}
            row[label] = {k: first.get(k) for k in ('miss_ms', 'keyed', 'headers', 'store_message',
                                                    'resolve_cold_ms', 'resolve_warm_ms', 'error')}
            row[label]['probes'] = closure_probes(db) if os.path.exists(db) else None
            samples[label] = {'whole': [], 'whole_cpu': [], 'inproc': [], 'inproc_cpu': [],
                              'first': [], 'resolve_cold': [], 'resolve_warm': [], 'hits': True}
        for r in range(a.rounds):
            order = sides if r % 2 == 0 else list(reversed(sides))
            for label, kcache, bench in order:
                db = os.path.join(work, '%s-%s.db' % (name, label))
                env = dict(os.environ, KCACHE_PATH=db)
                env.pop('KCACHE_DIR', None)
                s = samples[label]
                for _ in range(a.whole_reps):
                    wall, cpu, out, rc = timed_child(
                        [kcache, 'compile', path, '--arch', 'sm_90', '--json', '--'] + opts, env)
                    s['whole'].append(wall)
                    s['whole_cpu'].append(cpu)
                    s['hits'] = s['hits'] and rc == 0 and '"hit": true' in out.replace(
                        '"hit":true', '"hit": true')
                p = subprocess.run([bench, '--db', db, '--source', path, '--arch', 'sm_90',
                                    '--reps', str(a.reps), '--plain-reps', '0', '--'] + opts,
                                   capture_output=True, text=True)
                r2 = subprocess.run([bench, '--db', db, '--source', path, '--arch', 'sm_90',
                                     '--reps', '1', '--plain-reps', '0', '--resolve-reps', '3',
                                     '--'] + opts, capture_output=True, text=True)
                if r2.returncode == 0:
                    d = json.loads(r2.stdout)
                    s['resolve_cold'].append(d['resolve_cold_ms'])
                    s['resolve_warm'].append(d['resolve_warm_ms'])
                if p.returncode == 0:
                    d = json.loads(p.stdout)
                    s['inproc'].append(d['hit_inproc_ms'])
                    s['inproc_cpu'].append(d['hit_inproc_cpu_ms'])
                    s['first'].append(d['miss_ms'])  # the db is warm: a process's first hit
                    s['hits'] = s['hits'] and d['all_hits']
        if a.callgrind:
            for label, kcache, bench in sides:
                db = os.path.join(work, '%s-%s.db' % (name, label))
                env = dict(os.environ, KCACHE_PATH=db)
                env.pop('KCACHE_DIR', None)
                whole = callgrind_ir([kcache, 'compile', path, '--arch', 'sm_90', '-q', '--'] + opts,
                                     env, work)
                inproc = [callgrind_ir([bench, '--db', db, '--source', path, '--arch', 'sm_90',
                                        '--reps', str(n), '--plain-reps', '0', '--'] + opts, env, work)
                          for n in (1, 11)]
                row[label]['hit_whole_ir'] = whole
                one = [callgrind_ir([bench, '--db', db, '--source', path, '--arch', 'sm_90',
                                     '--reps', '1', '--plain-reps', '0', '--resolve-reps', str(n),
                                     '--'] + opts, env, work) for n in (0, 1)]
                row[label]['resolve_cold_ir'] = one[1] - one[0] if None not in one else None
                row[label]['hit_inproc_ir'] = ((inproc[1] - inproc[0]) / 10
                                               if None not in inproc else None)
        for label, _, _ in sides:
            s = samples[label]
            med = lambda v: statistics.median(v) if v else float('nan')
            row[label].update({'hit_whole_ms': med(s['whole']), 'hit_whole_cpu_ms': med(s['whole_cpu']),
                               'hit_inproc_ms': med(s['inproc']),
                               'hit_inproc_cpu_ms': med(s['inproc_cpu']),
                               'first_hit_ms': med(s['first']), 'all_hits': s['hits'],
                               'resolve_cold_ms': med(s['resolve_cold']),
                               'resolve_warm_ms': med(s['resolve_warm']),
                               'n_whole': len(s['whole']), 'n_inproc': len(s['inproc'])})
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def write_compare(path, rows, labels, load, cmd):
    b, af = labels

    def probes(p):
        return '%d (%d files, %d toolkit, %d absent, %d directories)' % (
            sum(p.values()), p['file'], p['toolkit'], p['absent'], p.get('dir', 0)) if p else 'n/a'

    def pair(r, key, fmt):
        x, y = r[b].get(key), r[af].get(key)
        f = lambda v: fmt % v if isinstance(v, (int, float)) else 'n/a'
        return '%s / %s' % (f(x), f(y))
    for r in rows:
        for l in labels:
            for k in ('hit_whole_ir', 'hit_inproc_ir', 'resolve_cold_ir'):
                if r[l].get(k) is not None:
                    r[l][k + '_m'] = r[l][k] / 1e6
    out = ['# Real header trees: hits before and after', '',
           'Generated by `%s` on this machine (CPU only; 2 cores shared with other work: load '
           'average %.1f at the start, %.1f at the end). Each cell is "%s / %s". The two builds '
           'are timed in turns, the order swapped every round, each on a warm cache of its own; '
           'medians. "CPU": user + system time of the process (whole process) or of the hits '
           '(in process), less moved by other work than the wall clock. "instructions": millions '
           'of instructions one hit runs in user space, counted by callgrind (the same however '
           'busy the machine; in process: a process with 11 hits less one with 1, over 10; empty '
           'without --callgrind). "resolution": deriving '
           'the key alone (KEY_ONLY) in a fresh process (every header read, hashed and scanned: '
           'what a miss adds to NVRTC), then again with the process\'s header memo warm. '
           '"probes": the paths the recorded closure checks on a hit.' % (cmd, load[0], load[1], b, af), '',
           '| kernel | hit, whole process | CPU | instructions | hit, in process | CPU | instructions '
           '| first hit in a process | resolution, fresh | instructions | resolution, memo warm | headers '
           '| probes (%s) | probes (%s) |' % (b, af),
           '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|']
    for r in rows:
        out.append('| %s | %s ms | %s ms | %s M | %s ms | %s ms | %s M | %s ms | %s ms | %s M '
                   '| %s ms | %s | %s | %s |' % (
            r['kernel'], pair(r, 'hit_whole_ms', '%.1f'), pair(r, 'hit_whole_cpu_ms', '%.1f'),
            pair(r, 'hit_whole_ir_m', '%.2f'),
            pair(r, 'hit_inproc_ms', '%.2f'), pair(r, 'hit_inproc_cpu_ms', '%.2f'),
            pair(r, 'hit_inproc_ir_m', '%.2f'),
            pair(r, 'first_hit_ms', '%.1f'), pair(r, 'resolve_cold_ms', '%.0f'),
            pair(r, 'resolve_cold_ir_m', '%.0f'),
            pair(r, 'resolve_warm_ms', '%.1f'), pair(r, 'headers', '%d'),
            probes(r[b].get('probes')), probes(r[af].get('probes'))))
    notes = [r for r in rows if not (r[b].get('all_hits') and r[af].get('all_hits'))]
    if notes:
        out += ['', 'Not all hits: ' + ', '.join('%s (%s)' % (
            r['kernel'], '; '.join('%s: %s' % (l, r[l].get('store_message') or r[l].get('error') or '?')
                                  for l in labels if not r[l].get('all_hits'))) for r in notes)]
    with open(path, 'w') as f:
        f.write('\n'.join(out) + '\n')
