#!/usr/bin/env python3
"""Renders the reliability figures that the suites wrote as a Markdown table.

    tests/report.py [--update tests/README.md] BUILDDIR...

Each BUILDDIR is a meson build directory in which tests ran: its figures are
BUILDDIR/tests/results/*.tsv (written by test_crash, test_corruption,
test_faults, test_hostile_input, test_perms, test_trust, the programs of named cases
(CASE_PROGRAMS below) and tests/fuzz/fuzz.sh; one line each:
the name, then key=value fields) and its pass/fail counts come from
BUILDDIR/meson-logs/testlog.json. The sanitizer a directory was built with is
read from meson's introspection files, so one table covers plain, ASan+UBSan,
TSan and libFuzzer builds. With --update, the table replaces the text between
the report markers in the given file.
"""
import argparse
import json
import os
import sys

BEGIN = '<!-- report:begin (tests/report.py writes this table) -->'
END = '<!-- report:end -->'


def sanitizer(build):
    try:
        with open(os.path.join(build, 'meson-info', 'intro-buildoptions.json')) as f:
            opts = {o['name']: o['value'] for o in json.load(f)}
    except (OSError, ValueError):
        return '?'
    san = opts.get('b_sanitize', 'none')
    if isinstance(san, list):
        san = ','.join(san) or 'none'
    fuzz = ' + libFuzzer' if opts.get('fuzzing') else ''
    return {'none': 'plain', 'address,undefined': 'ASan+UBSan', 'thread': 'TSan'}.get(
        san, san) + fuzz


def results(build):
    out = {}
    d = os.path.join(build, 'tests', 'results')
    if not os.path.isdir(d):
        return out
    for name in sorted(os.listdir(d)):
        if not name.endswith('.tsv'):
            continue
        with open(os.path.join(d, name)) as f:
            line = f.readline().rstrip('\n')
        fields = {}
        for part in line.split('\t')[1:]:
            if '=' in part:
                k, v = part.split('=', 1)
                fields[k] = int(v) if v.lstrip('-').isdigit() else v
        out[name[:-4]] = fields
    return out


def testlog(build):
    """Counts of meson test outcomes in the last run, by suite."""
    # testlog.json, or testlog-SETUP.json after `meson test --setup SETUP`: the newest.
    logs = os.path.join(build, 'meson-logs')
    try:
        names = [n for n in os.listdir(logs) if n.startswith('testlog') and n.endswith('.json')]
    except OSError:
        return None
    if not names:
        return None
    path = max((os.path.join(logs, n) for n in names), key=os.path.getmtime)
    runs = {}
    try:
        with open(path) as f:
            for line in f:
                t = json.loads(line)
                runs[t['name']] = t
    except (OSError, ValueError):
        return None
    counts = {'OK': 0, 'FAIL': 0, 'SKIP': 0, 'TIMEOUT': 0, 'other': 0}
    for t in runs.values():
        r = t.get('result', 'other')
        counts[r if r in counts else 'other'] += 1
    return counts, sorted(runs)


def row(cells):
    return '| ' + ' | '.join(str(c) for c in cells) + ' |'


# The programs of named cases (tests/common/casetest.h): what their cases do.
CASE_PROGRAMS = {
    'hostile-files': "files others left at the path: recovery without rm, other users' "
                     "caches, a symlinked database, a cache being created, a 0700 clone",
    'shared-use': 'maintenance while others delete, other hosts\' leases, a full disk counted',
    'bundle-ingest': 'the importer\'s gate: poisoned entries, a decompression bomb, entries '
                     'put would refuse, export names',
    'config-file': 'kcache.conf read whole or refused: unknown lines, leading zeros, a FIFO',
    'terminal-output': 'control bytes from the cache printed safely, JSON valid UTF-8',
}


def plural(n, word):
    return f"{n} {word}{'' if n == 1 else 's'}"


def describe(name, f):
    """(what ran, figures, entries lost, stale or altered returned) for one results line."""
    g = f.get
    if name.startswith('crash'):
        return ('SIGKILL of writers (puts with inputs, hits, imports, prunes, vacuum)',
                f"{g('kills')} kills survived in {g('rounds')} rounds; {g('committed')} puts "
                f"reported committed; {g('checked')} entry reads checked; integrity failures "
                f"{g('integrity_failures')}; opens that found damage {g('damaged_opens')}",
                g('lost'), g('wrong'))
    if name == 'corruption':
        return ('zeroed header, WAL and -shm garbage, artifacts and inputs altered in the file',
                f"{g('cases')} cases: {g('recovered')} recovered, {g('refused')} altered "
                f"entries refused (a miss, deleted, counted); {g('dropped')} entries of damaged "
                f"WAL frames or written through a garbage -shm dropped, as the recovery table "
                f"allows",
                g('lost'), g('wrong'))
    if name == 'faults':
        return ('disk full (RLIMIT_FSIZE, tmpfs), read-only cache, stuck lock',
                f"{g('faults')} faults run ({g('skipped')} skipped); {g('compiles')} compiles "
                f"returned their artifact", g('lost'), g('wrong'))
    if name == 'hostile-input':
        return ('hostile sources, include loops, CLI values, crafted bundles',
                f"{g('inputs')} bad inputs tried, {g('handled')} refused or handled as "
                f"promised; {g('connections')} SQLite connections checked, "
                f"{g('insecure_connections')} without defensive/trusted_schema",
                0 if g('stored_wrongly') == 0 else f"stored wrongly: {g('stored_wrongly')}", 0)
    if name == 'perms':
        return ('modes of what kcache creates, planted symlinks',
                f"{g('modes')} modes checked ({g('modes_wrong')} wrong); {g('symlinks')} "
                f"symlinks planted, {g('victims_written')} targets written", 0, 0)
    if name == 'trust':
        return ('entries arriving from bundles and the shared tier: a held key with other '
                'bytes kept as a conflict, a kind or architecture its key does not say refused',
                f"{plural(g('cases'), 'case')} run, {g('failed')} failed", 0, 0)
    if name in CASE_PROGRAMS:
        return (CASE_PROGRAMS[name],
                f"{plural(g('cases'), 'case')} run, {g('failed')} failed, {g('skipped')} skipped",
                0, 0)
    if name.startswith('fuzz-'):
        return (f"libFuzzer: {name[5:]}",
                f"{g('executions')} executions in {g('seconds')} s; {g('crashes')} crashes in "
                f"this run; {g('regressions')} regress-* inputs kept from earlier finds", 0, 0)
    return (name, ', '.join(f'{k}={v}' for k, v in f.items()), '?', '?')


def render(builds):
    lines = [row(['build', 'suite', 'what', 'figures', 'entries lost',
                  'stale or altered artifacts returned']),
             row(['---'] * 6)]
    runs = []
    for b in builds:
        san = sanitizer(b)
        for name, f in results(b).items():
            what, figures, lost, wrong = describe(name, f)
            lines.append(row([san, name, what, figures, lost, wrong]))
        log = testlog(b)
        if log:
            counts, names = log
            listed = ': ' + ', '.join(n.split(' / ')[-1] for n in names) if len(names) <= 5 else ''
            runs.append(row([san, 'meson test', f"{len(names)} tests{listed}",
                             f"{counts['OK']} ok, {counts['FAIL']} failed, {counts['SKIP']} "
                             f"skipped, {counts['TIMEOUT']} timed out", '', '']))
    return '\n'.join(lines + runs) + '\n'


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('builds', nargs='+', help='meson build directories')
    ap.add_argument('--update', help='file whose report section is replaced')
    a = ap.parse_args()
    table = render(a.builds)
    if not a.update:
        sys.stdout.write(table)
        return 0
    with open(a.update) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        sys.stderr.write(f'report.py: {a.update} has no report markers\n')
        return 1
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(a.update, 'w') as f:
        f.write(head + BEGIN + '\n' + table + END + tail)
    return 0


if __name__ == '__main__':
    sys.exit(main())
