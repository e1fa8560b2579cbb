#!/usr/bin/env python3
"""CuPy's warm run in small: N kernels that share one include closure, each hit
once in one process, as CuPy's ~300 compiles of a warm run are.

One CuPy-shaped kernel of CuPy's real tree (realtrees/trees.py) is made N
kernels by a -D option each (the closure stays the same, the keys differ).
A first process compiles them all (misses); a second, new process asks for
each once (hits), through bench_realtree --serve; the hits' milliseconds and
the second process's CPU time are reported, for each build given, in turns.

    benchmarks/realtrees/workload.py --builds before=BUILD after=BUILD
                                     [--kernel cupy_elementwise] [--n 40] [--rounds 3]

Run benchmarks/realtrees/run once first (it fetches the wheels and writes the
kernels under realtrees/.cache).
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import json

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trees import CACHE, kernels  # noqa: E402


def serve(bench, db, source, lines):
    """The answers of one bench_realtree --serve process, and its CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([bench, '--serve', '--db', db, '--source', source], input=''.join(lines),
                       capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return [json.loads(x) for x in p.stdout.splitlines()], cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--builds', nargs='+', required=True, metavar='LABEL=BUILD')
    ap.add_argument('--kernel', default='cupy_elementwise')
    ap.add_argument('--n', type=int, default=40)
    ap.add_argument('--rounds', type=int, default=3)
    a = ap.parse_args()
    src, opts = kernels(os.path.join(CACHE, 'trees'))[a.kernel]
    work = tempfile.mkdtemp(prefix='kcache-workload-')
    source = os.path.join(work, a.kernel + '.cu')
    with open(source, 'w') as f:
        f.write(src)
    lines = ['\t'.join(['kcache', os.path.join(work, 'out'), 'compute_90'] + opts +
                       ['-DKC_WORKLOAD_KERNEL=%d' % i]) + '\n' for i in range(a.n)]
    builds = [b.split('=', 1) for b in a.builds]
    got = {label: {'hit_ms': [], 'cpu_s': []} for label, _ in builds}
    for label, build in builds:
        db = os.path.join(work, label + '.db')
        answers, _ = serve(os.path.join(build, 'benchmarks', 'bench_realtree'), db, source, lines)
        if not all(x.get('ok') and x.get('keyed') for x in answers):
            sys.exit('%s: the first process did not store every kernel' % label)
    for r in range(a.rounds):
        for label, build in (builds if r % 2 == 0 else builds[::-1]):
            db = os.path.join(work, label + '.db')
            answers, cpu = serve(os.path.join(build, 'benchmarks', 'bench_realtree'), db, source,
                                 lines)
            if not all(x.get('hit') for x in answers):
                sys.exit('%s: a kernel of the second process missed' % label)
            got[label]['hit_ms'].append(sum(x['ms'] for x in answers))
            got[label]['cpu_s'].append(cpu)
    print('%s, %d kernels sharing one closure, each hit once in a new process '
          '(median of %d rounds; load %.1f):' % (a.kernel, a.n, a.rounds, os.getloadavg()[0]))
    for label, _ in builds:
        ms = statistics.median(got[label]['hit_ms'])
        cpu = statistics.median(got[label]['cpu_s'])
        print('  %-8s %7.1f ms of hits (%.2f ms a hit); process CPU %.2f s' %
              (label, ms, ms / a.n, cpu))


if __name__ == '__main__':
    main()
