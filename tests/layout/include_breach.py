#!/usr/bin/env python3
"""The build refuses an include against the arrows: planted in each layer, compiled.

Each folder of lib/ is compiled with an include path that holds only the
folders it may use (lib/layers.py, tools/layer_includes.py). For every pair
of folders the arrows do not join, this plants a file that includes a header
of the other folder, compiles it with the very command the build uses for a
file of the first folder (from compile_commands.json), and requires the
compiler not to find it; a narrow arrow's other headers likewise. The control:
the same command compiles the first header that file includes itself.

Usage: include_breach.py SOURCE_ROOT BUILD_ROOT  (exit 0 when every pair behaves)
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile

root, build = (os.path.abspath(a) for a in sys.argv[1:3])
sys.path.insert(0, os.path.join(root, 'lib'))
from layers import ALLOWED, NARROW  # noqa: E402

lib = os.path.join(root, 'lib')


def command_for(folder, commands):
    """The build's compile command for a .c file of folder, as an argument list, its
    directory, and the first private header that file includes (the control)."""
    for c in commands:
        path = os.path.normpath(os.path.join(c['directory'], c['file']))
        if os.path.dirname(path) != os.path.join(lib, folder) or not path.endswith('.c'):
            continue
        with open(path) as f:
            first = next((l.split('"')[1] for l in f if l.startswith('#include "')), None)
        if not first:
            continue
        args = c.get('arguments') or shlex.split(c['command'])
        out, skip = [], False
        for a in args:
            if skip:
                skip = False
            elif a in ('-o', '-MQ', '-MF', '-c'):
                skip = True
            elif a != '-MD':
                out.append(a)
        return out, c['directory'], first
    return None, None, None


def headers(folder):
    """Each header of folder, as an include names it."""
    d = os.path.join(lib, folder)
    return sorted('%s/%s' % (folder, f) for f in os.listdir(d) if f.endswith('.h'))


def compiles(args, cwd, include, scratch):
    src = os.path.join(scratch, 'planted.c')
    with open(src, 'w') as f:
        f.write('#include "%s"\nint kc_planted(void);\nint kc_planted(void) { return 0; }\n'
                % include)
    p = subprocess.run(args + ['-fsyntax-only', src], cwd=cwd, capture_output=True, text=True)
    return p.returncode == 0, p.stderr


def main():
    with open(os.path.join(build, 'compile_commands.json')) as f:
        commands = json.load(f)
    failures = checked = 0
    with tempfile.TemporaryDirectory() as scratch:
        for folder in sorted(ALLOWED):
            args, cwd, control = command_for(folder, commands)
            if not args:
                print('FAIL %s/: no compile command in the build' % folder)
                failures += 1
                continue
            ok, err = compiles(args, cwd, control, scratch)
            checked += 1
            if not ok:
                print('FAIL %s/: the control "%s" does not compile:\n%s'
                      % (folder, control, err[-800:]))
                failures += 1
                continue
            for other in sorted(ALLOWED):
                narrow = NARROW.get((folder, other))
                if other == folder or (other in ALLOWED[folder] and narrow is None):
                    continue
                denied = [h for h in headers(other) if not narrow or h not in narrow]
                if not denied:
                    continue
                ok, err = compiles(args, cwd, denied[0], scratch)
                checked += 1
                if ok or 'No such file' not in err:
                    print('FAIL %s/ includes "%s" against the arrows and the build %s'
                          % (folder, denied[0],
                             'takes it' if ok else 'fails otherwise:\n' + err[-800:]))
                    failures += 1
    print('include_breach: %d includes compiled, %d failures' % (checked, failures))
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
