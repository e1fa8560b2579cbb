"""The files of some folders of the checkout, read as lines in a stable order (tools/'s checks)."""
import os


def source_files(root, folders, suffix=''):
    """Yields (path relative to root, file name, lines) of each file whose name ends with suffix."""
    for folder in folders:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, folder)):
            dirnames.sort()
            for name in sorted(filenames):
                if not name.endswith(suffix):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding='utf-8', errors='replace') as f:
                    yield os.path.relpath(path, root), name, f.read().split('\n')
