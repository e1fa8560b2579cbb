"""The arrows between lib/'s folders, read by the build and by the layering test.

ALLOWED: folder -> the folders whose private headers it may include (itself
implied). NARROW: (folder, target) -> the only headers of target it may
include. lib/README.md draws them; lib/meson.build gives each folder an
include path holding only these (tools/layer_includes.py), so the compiler
refuses an include against them; tests/layout/layering.py checks calls.
"""
ALLOWED = {
    'util': set(),
    'format': {'util'},
    'cuda': {'util'},
    'db': {'util', 'format'},
    'store': {'util', 'format', 'db'},
    'remote': {'util', 'format', 'store'},
    'resolve': {'util'},
    'compile': {'util', 'format', 'store', 'remote', 'resolve', 'cuda'},
    'gpu': {'util', 'cuda'},
    'nvrtc-shim': {'util', 'cuda'},
}
# The store reaches the file through db/'s header for the layers above it
# (with the schema's version and application id it includes); the rest of
# db/ (how it opens, identifies, recovers) is db/'s own.
NARROW = {('store', 'db'): {'db/db.h', 'db/schema.h'}}
