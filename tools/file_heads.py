#!/usr/bin/env python3
"""Checks that every file of lib/ and cli/ opens by saying what it is.

Usage: file_heads.py SOURCE_ROOT  (exit 0 clean, 1 with one line per file)

Every source file (.c, .h, .py, meson.build, the linker's .map) opens with a
comment whose first line says what the file is; a README opens with its title.
A line that only sends the reader elsewhere ("See strmap.h.") does not say
it. A .c file of lib/ under 100 lines usually belongs with its subsystem:
when it stands alone, its first line says why, with the word "alone".
Headers are the face of a .c file and may be short. The files of the folders
being reworked elsewhere are named in LISTED: the list only shrinks, and a
listed file that now opens as it should (or has gone) is reported too, so its
line goes.
"""
import os
import re
import sys

from source_files import source_files

FOLDERS = ('lib', 'cli')
SMALL = 100

# Files of lib/ that open short of these rules, in folders this list's owners
# are reworking. Remove a line when its file is merged or says what it is and
# why it is alone.
LISTED = set()


def first_line(path, lines):
    """The first line of the file's opening comment (or title), or None."""
    name = os.path.basename(path)
    if lines and lines[0].startswith('#!'):
        lines = lines[1:]
    if not lines:
        return None
    head = lines[0].strip()
    if name.endswith(('.c', '.h', '.map')):
        if head == '/*' and len(lines) > 1:
            head = re.sub(r'^\*\s?', '', lines[1].strip())
        elif head.startswith('/* '):
            head = head[3:]
        else:
            return None
    elif name.endswith('.py'):
        if head.startswith('"""'):
            head = head[3:]
        elif head.startswith('# '):
            head = head[2:]
        else:
            return None
    elif name == 'meson.build' or name.endswith('.md'):
        if not head.startswith('# '):
            return None
        head = head[2:]
    else:
        return ''
    return head.strip() or None


def problem(rel, name, lines):
    """What is wrong with the file's opening, or None."""
    head = first_line(rel, lines)
    if head is None:
        return 'open the file with a comment whose first line says what it is'
    if re.fullmatch(r'See \S+\.?( \*/)?', head):
        return 'say on the first line what the file is, not only where to read about it'
    count = len(lines) - 1 if lines and lines[-1] == '' else len(lines)
    if (rel.startswith('lib' + os.sep) and name.endswith('.c') and count < SMALL
            and not re.search(r'\balone\b', head, re.IGNORECASE)):
        return (f'under {SMALL} lines: merge it into its subsystem, or say why it stands alone '
                f'on its first line')
    return None


def main():
    root = os.path.abspath(sys.argv[1])
    found, listed_seen = [], set()
    for rel, name, lines in source_files(root, FOLDERS):
        why = problem(rel, name, lines)
        if why and rel in LISTED:
            listed_seen.add(rel)
        elif why:
            found.append(f'{rel}:1: {why}')
    for rel in sorted(LISTED - listed_seen):
        found.append(f'{rel} opens as it should now: remove it from LISTED in tools/file_heads.py')
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
