#!/usr/bin/env python3
"""Lists the C functions of lib/, cli/, benchmarks/ and python/ that run past 100 lines.

Usage: long_functions.py SOURCE_ROOT  (exit 0 clean, 1 with one line per function)

A function fits on a screen; one that runs past 100 lines is split, or the
comment right above it holds a line that starts "Long:" and says why it reads
best whole (a switch over options, a table). The functions of the folders
being reworked elsewhere are named in LISTED: the list only shrinks, and a
listed function that has been split is reported too, so its line goes.

A function is read as kcache's layout writes one (.clang-format, Linux
braces): its body opens with "{" alone at column 0 and closes with "}" alone
at column 0; its length counts both.
"""
import os
import re
import sys

from source_files import source_files

FOLDERS = ('lib', 'cli', 'benchmarks', 'python')
LIMIT = 100

# Functions over the limit in folders this list's owners are reworking
# (path:function). Remove a line when its function is split.
LISTED = set()

NAME = re.compile(r'([A-Za-z_]\w*)\s*\(')


def functions(lines):
    """Yields (name, first line, length, the comment above it) of each function."""
    i = 0
    while i < len(lines):
        if lines[i] != '{':
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end] != '}':
            end += 1
        # The signature: the lines above the brace, back to a blank line,
        # a comment's end or the end of a declaration.
        start = i
        while start > 0 and lines[start - 1].strip() and not re.search(
                r'(\*/|;|\}|^#.*)$', lines[start - 1]):
            start -= 1
        match = NAME.search(' '.join(lines[start:i]))
        comment = []
        if start > 0 and lines[start - 1].rstrip().endswith('*/'):
            c = start - 1
            while c > 0 and '/*' not in lines[c]:
                c -= 1
            comment = lines[c:start]
        yield (match.group(1) if match else '?'), start + 1, end - i + 1, comment
        i = end + 1


def has_reason(comment):
    return any(re.match(r'\s*(/\*|\*)?\s*Long:\s*\S', line) for line in comment)


def main():
    root = os.path.abspath(sys.argv[1])
    found, seen = [], set()
    for rel, _, lines in source_files(root, FOLDERS, '.c'):
        for fn, line, length, comment in functions(lines):
            if length <= LIMIT or has_reason(comment):
                continue
            key = f'{rel}:{fn}'
            seen.add(key)
            if key not in LISTED:
                found.append(f'{rel}:{line}: {fn} runs {length} lines: split it, or say why it '
                             f'reads best whole on a "Long:" line of its comment')
    for key in sorted(LISTED - seen):
        found.append(f'{key} is at most {LIMIT} lines now: remove it from LISTED in '
                     f'tools/long_functions.py')
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
