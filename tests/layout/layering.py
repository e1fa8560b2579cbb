#!/usr/bin/env python3
"""The layering test: the arrows of lib/README.md, checked on the source.

System headers sit on every include path, so only this test keeps SQLite in
db/ and store/, NVRTC and nvJitLink in compile/, hiredis and libcurl in remote/, zstd and LZ4 in
util/ (the codec), and stops a folder from reaching into another's private
headers against the arrows. Inside a folder, it finds circles of calls between
files. It reads the files as text with comments and string literals removed, so
a message that says "NVRTC" is fine and a call to nvrtcCompileProgram is not.

Usage: layering.py SOURCE_ROOT  (exit 0 clean, 1 with one line per breach)
"""
import os
import re
import sys

# The arrows (folder -> the folders it may use; narrow ones, a few headers
# only) are lib/layers.py's, which the build also follows: read from this
# file's own tree, so that layering_breach.py's planted trees are judged by it.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))
from layers import ALLOWED, NARROW  # noqa: E402

# The public headers a low layer may include: its own faces, none of a layer
# above it (util/ once took the store's default cap from <kcache/store.h>).
PUBLIC = {
    'util': {'kcache/core.h'},
    'format': {'kcache/core.h', 'kcache/config.h', 'kcache/cubin.h'},
    'db': {'kcache/core.h'},
}

# (what, pattern, the folders where it belongs)
OWNED = [
    ('SQLite', re.compile(r'#\s*include\s*<sqlite3\.h>|\bsqlite3_\w+'), {'db', 'store'}),
    ('NVRTC', re.compile(r'#\s*include\s*<nvrtc\.h>|\bnvrtc[A-Z]\w*|\bNVRTC_\w+'),
     {'cuda', 'compile', 'nvrtc-shim'}),
    ('nvJitLink', re.compile(r'#\s*include\s*<nvJitLink\.h>|\bnvJitLink\w*|\bNVJITLINK_\w+'),
     {'cuda', 'compile'}),
    ('hiredis', re.compile(r'#\s*include\s*<hiredis/|\bredis[A-Z]\w*'), {'remote'}),
    ('libcurl', re.compile(r'#\s*include\s*<curl/|\bcurl_\w+|\bCURL\w*'), {'remote'}),
    # The codecs behind util/codec.h: a layer that wants bytes compressed asks the codec.
    ('zstd', re.compile(r'#\s*include\s*<zstd\.h>|\bZSTD_\w+'), {'util'}),
    ('LZ4', re.compile(r'#\s*include\s*<lz4\w*\.h>|\bLZ4\w*_\w+'), {'util'}),
]

STRIP = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
QUOTED = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def code_only(text):
    # Keep quoted #include lines (they are checked separately) out of STRIP's way.
    return STRIP.sub(lambda m: ' ' if m.group(0)[0] in '/' else '""', text)


def check_file(root, folder, path, errors):
    rel = os.path.relpath(path, root)
    with open(path, encoding='utf-8', errors='replace') as f:
        text = f.read()
    body = code_only(QUOTED.sub('', text))
    for what, pattern, owners in OWNED:
        if folder in owners:
            continue
        m = pattern.search(body)
        if m:
            line = body.count('\n', 0, m.start()) + 1
            errors.append('%s:%d: %s (%s) outside %s/' %
                          (rel, line, what, m.group(0).strip(), '/, '.join(sorted(owners))))
    for m in QUOTED.finditer(text):
        inc = m.group(1)
        line = text.count('\n', 0, m.start()) + 1
        if folder == 'cli':
            if '/' in inc or not os.path.exists(os.path.join(os.path.dirname(path), inc)):
                errors.append('%s:%d: cli/ includes "%s": it may use only <kcache/*.h> '
                              'and its own headers' % (rel, line, inc))
            continue
        if inc.startswith('kcache/'):
            if folder in PUBLIC and inc not in PUBLIC[folder]:
                errors.append('%s:%d: %s/ includes "%s", a public header of a layer above it' %
                              (rel, line, folder, inc))
            continue
        if '/' not in inc:
            errors.append('%s:%d: "%s": name private headers by folder ("%s/%s")' %
                          (rel, line, inc, folder, inc))
            continue
        target = inc.split('/', 1)[0]
        if target == folder:
            continue
        if target not in ALLOWED.get(folder, set()):
            errors.append('%s:%d: %s/ includes "%s", against the arrows (lib/README.md)' %
                          (rel, line, folder, inc))
        elif (folder, target) in NARROW and inc not in NARROW[(folder, target)]:
            errors.append('%s:%d: %s/ may include only %s from %s/' %
                          (rel, line, folder, ', '.join(sorted(NARROW[(folder, target)])),
                           target))


# Calls follow the arrows too: a function defined in one folder and named in
# another (called, or taken as a pointer) is an arrow from the second to the
# first, and must be one lib/layers.py allows; the public API (kcache_*) may
# be called from anywhere above it. Inside a folder, files are grouped by what
# belongs together and may call one another.
PREPROC = re.compile(r'^[ \t]*#(?:\\\n|[^\n])*', re.M)
DEFINE = re.compile(r'^[ \t]*#[ \t]*define[ \t]+(\w+)((?:\\\n|[^\n])*)', re.M)
IDENT = re.compile(r'\b[A-Za-z_]\w*')
# Names that are not functions though they may be spelled as one: tags, members.
NOT_CALLED = re.compile(r'\b(?:struct|union|enum)\s+\w+|(?:\.|->)\s*[A-Za-z_]\w*')
PARAMS = r'\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)'
FUNC_HEAD = re.compile(r'\b(\w+)\s*' + PARAMS + r'[\s\w()]*$')


def file_scope(code):
    """(head, body) for each piece of file scope: the text before a brace block
    and the block, or a declaration and ''."""
    depth, start, head, opened = 0, 0, '', 0
    for m in re.finditer(r'[{};]', code):
        c = m.group(0)
        if c == '{':
            if depth == 0:
                head, opened = code[start:m.start()], m.end()
            depth += 1
        elif c == '}':
            depth -= 1
            if depth == 0:
                yield head, code[opened:m.start()]
                start = m.end()
        elif depth == 0:
            yield code[start:m.start()], ''
            start = m.end()


def read_code(path):
    with open(path, encoding='utf-8', errors='replace') as f:
        text = f.read()
    macros = {m.group(1): set(IDENT.findall(NOT_CALLED.sub(' ', code_only(m.group(2)))))
              for m in DEFINE.finditer(text)}
    return NOT_CALLED.sub(' ', PREPROC.sub('', code_only(text))), macros


def functions(code):
    """{name: (is static, identifiers its body names)}, and the identifiers of
    file-scope initializers (tables of functions)."""
    defs, loose = {}, set()
    for head, body in file_scope(code):
        m = None if '=' in head else FUNC_HEAD.search(head)
        if m and body:
            static = re.search(r'\bstatic\b', head[:m.start()]) is not None
            defs[m.group(1)] = (static, set(IDENT.findall(body)))
        elif '=' in head:
            loose |= set(IDENT.findall(head.split('=', 1)[1] + ' ' + body))
    return defs, loose


def call_graph(lib, folders):
    """{file: {file it calls: sorted functions}}, files named from lib/."""
    expand, external, uses = {}, {}, {}
    for folder in folders:
        for dirpath, _, files in os.walk(os.path.join(lib, folder)):
            for f in sorted(files):
                if not f.endswith('.h'):
                    continue
                code, macros = read_code(os.path.join(dirpath, f))
                expand.update(macros)
                for name, (_, names) in functions(code)[0].items():
                    expand[name] = names
    for folder in folders:
        for dirpath, _, files in os.walk(os.path.join(lib, folder)):
            for f in sorted(files):
                if not f.endswith('.c'):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), lib)
                code, macros = read_code(os.path.join(dirpath, f))
                defs, named = functions(code)
                for name, (static, body) in defs.items():
                    named |= body
                    if not static:
                        external.setdefault(name, rel)
                local = dict(expand, **macros)
                seen, todo = set(), list(named)
                while todo:
                    n = todo.pop()
                    if n not in seen:
                        seen.add(n)
                        todo.extend(local.get(n, ()))
                uses[rel] = seen - set(defs)
    graph = {}
    for rel, names in uses.items():
        edges = graph.setdefault(rel, {})
        for n in names:
            to = external.get(n)
            if to and to != rel:
                edges.setdefault(to, []).append(n)
    for edges in graph.values():
        for to in edges:
            edges[to].sort()
    return graph


def check_calls(lib, folders, errors):
    graph = call_graph(lib, folders)
    for a, edges in sorted(graph.items()):
        src = os.path.dirname(a)
        for b, names in sorted(edges.items()):
            dst = os.path.dirname(b)
            private = [n for n in names if not n.startswith('kcache_')]
            if dst == src or not private or dst in ALLOWED.get(src, set()):
                continue
            errors.append('lib/%s: %s/ calls %s of %s/ (%s), against the arrows' %
                          (a, src, private[0], dst, os.path.basename(b)))


def main():
    root = sys.argv[1]
    errors = []
    lib = os.path.join(root, 'lib')
    folders = [d for d in sorted(os.listdir(lib))
               if os.path.isdir(os.path.join(lib, d)) and d != 'include']
    for folder in folders:
        if folder not in ALLOWED:
            errors.append('lib/%s/: a folder the layering test does not know: add its arrows' %
                          folder)
            continue
    loose = [f for f in os.listdir(lib) if f.endswith(('.c', '.h'))]
    for f in loose:
        errors.append('lib/%s: every source lives in a layer folder' % f)
    checked = 0
    for folder in folders + ['../cli']:
        base = os.path.normpath(os.path.join(lib, folder))
        name = os.path.basename(base)
        for dirpath, _, files in os.walk(base):
            for f in sorted(files):
                if f.endswith(('.c', '.h')):
                    check_file(root, name, os.path.join(dirpath, f), errors)
                    checked += 1
    check_calls(lib, [f for f in folders if f in ALLOWED], errors)
    # File names unique across the tree, so that a name says which file.
    seen = {}
    for top in ('lib', 'cli'):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith(('.c', '.h')):
                    seen.setdefault(f, []).append(os.path.relpath(os.path.join(dirpath, f), root))
    for f, paths in sorted(seen.items()):
        if len(paths) > 1:
            errors.append('%s: one name for %d files (%s)' % (f, len(paths), ', '.join(paths)))
    for e in errors:
        print(e)
    print('layering: %d files checked, %d breaches' % (checked, len(errors)))
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
