#!/usr/bin/env python3
"""layering.py finds the breaches it is there for: on planted trees.

A layering test that passes on the real tree says nothing unless it can fail.
Each case builds a small lib/ in a temporary directory, runs layering.py on
it, and expects the breach (or, for the clean tree, none).

Usage: layering_breach.py LAYERING_PY  (exit 0 when every case behaves)
"""
import os
import subprocess
import sys
import tempfile

CLEAN = {
    'lib/util/common.h': '#pragma once\n',
    'lib/db/db.h': '#include "util/common.h"\n#include <sqlite3.h>\n',
    'lib/db/dbint.h': '#include "db/db.h"\n',
    'lib/db/conn.c': '#include "db/dbint.h"\nint f(void) { return sqlite3_open(0, 0); }\n',
    'lib/store/entry.c': '#include "db/db.h"\n#include "util/common.h"\n',
    # Files of one folder may call one another, in a circle too; a struct
    # named as a function is not a call of it.
    'lib/store/stats.c': 'int kc_stats(void) { return kc_hitlog_usage(); }\n'
                         'int kc_stats_merge(int n) { return n; }\n',
    'lib/store/hitlog.c': 'struct kc_stats { int n; };\n'
                          'int kc_hitlog_usage(void) { struct kc_stats s = {0}; '
                          'return kc_stats_merge(s.n); }\n',
    # Above the store, its public API may be called from anywhere.
    'lib/store/store.c': 'int kcache_store_count(void) { return kc_stats(); }\n',
    'lib/remote/remote.c': '#include "store/storeint.h"\n'
                           'int kc_remote_n(void) { return kcache_store_count(); }\n',
    'lib/store/storeint.h': '#pragma once\n',
}

# name -> (files planted over the clean tree, text the breach line must hold)
CASES = {
    "store/ reaches db/'s private header": (
        {'lib/store/entry.c': '#include "db/dbint.h"\n'},
        'lib/store/entry.c:1: store/ may include only db/db.h, db/schema.h from db/'),
    'db/ reaches up into store/': (
        {'lib/store/storeint.h': '#pragma once\n',
         'lib/db/open.c': '#include "store/storeint.h"\n'},
        'lib/db/open.c:1: db/ includes "store/storeint.h", against the arrows'),
    "format/ takes a default from the store's public header": (
        {'lib/format/settings.c': '#include "kcache/store.h"\n'},
        'lib/format/settings.c:1: format/ includes "kcache/store.h", a public header of a layer'),
    'SQLite outside db/ and store/': (
        {'lib/util/bad.c': 'int g(void) { return sqlite3_close(0); }\n'},
        'lib/util/bad.c:1: SQLite (sqlite3_close) outside db/, store/'),
    'db/ calls up into the store': (
        {'lib/db/conn.c': '#include "db/dbint.h"\nint f(void) { return kc_stats(); }\n'},
        'lib/db/conn.c: db/ calls kc_stats of store/ (stats.c), against the arrows'),
    # db/'s error macro names a function of the store: the macro counts as its call.
    'a call against the arrows through a macro': (
        {'lib/db/dbint.h': '#include "db/db.h"\n#define kc_fail(d) kc_hitlog_usage()\n',
         'lib/db/conn.c': '#include "db/dbint.h"\nint kc_db_step(int d) { return kc_fail(d); }\n'},
        'lib/db/conn.c: db/ calls kc_hitlog_usage of store/ (hitlog.c), against the arrows'),
}


def run(layering, files):
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, 'w') as f:
                f.write(text)
        os.makedirs(os.path.join(root, 'cli'), exist_ok=True)
        p = subprocess.run([sys.executable, layering, root], capture_output=True, text=True)
        return p.returncode, p.stdout


def main():
    layering = sys.argv[1]
    failures = 0
    rc, out = run(layering, CLEAN)
    if rc != 0:
        print('FAIL clean tree: layering.py found breaches:\n' + out)
        failures += 1
    for name, (planted, expect) in CASES.items():
        rc, out = run(layering, {**CLEAN, **planted})
        if rc != 1 or expect not in out:
            print('FAIL %s: expected exit 1 and "%s", got exit %d:\n%s' % (name, expect, rc, out))
            failures += 1
        else:
            print('ok   %s' % name)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
