#!/usr/bin/env python3
"""Makes, for each folder of lib/, an include directory that holds only what it may include.

Usage: layer_includes.py LIB_SOURCE_DIR OUT_DIR

OUT_DIR/FOLDER/ gets a link to the folder itself and to each folder it may
use (lib/layers.py), or, for a narrow arrow, a folder holding links to the
allowed headers only. A layer compiled with -I OUT_DIR/FOLDER (and not with
-I lib/) cannot include a header against the arrows: the compiler does not
find it. Run by lib/meson.build at configure time; prints nothing.
"""
import os
import shutil
import sys

lib, out = (os.path.abspath(a) for a in sys.argv[1:3])
sys.path.insert(0, lib)
from layers import ALLOWED, NARROW  # noqa: E402

for folder, allowed in ALLOWED.items():
    top = os.path.join(out, folder)
    if os.path.lexists(top):
        shutil.rmtree(top)
    os.makedirs(top)
    for target in sorted(allowed | {folder}):
        link = os.path.join(top, target)
        narrow = NARROW.get((folder, target))
        if narrow is None:
            os.symlink(os.path.join(lib, target), link)
            continue
        os.makedirs(link)
        for header in sorted(narrow):
            os.symlink(os.path.join(lib, header), os.path.join(top, header))
