"""The drop-in NVRTC's report ($KCACHE_NVRTC_REPORT), read by its tests and by
benchmarks/gpu/dropin/dropin.py: each process that used the drop-in appends
one line of "name value" pairs at exit (lib/nvrtc-shim/shim.c, at_exit)."""
import os


def read_report(path):
    """The lines as dicts ({'pid': n, 'hits': n, 'misses': n, reason: n, ...,
    'nvrtc-path': the NVRTC forwarded to}, numbers as int), and the file
    removed so that the next run starts empty."""
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line, _, real = line.rstrip("\n").partition(" nvrtc-path ")
                w = line.split()
                rows.append({w[i]: (int(w[i + 1]) if w[i + 1].isdigit() else w[i + 1])
                             for i in range(0, len(w) - 1, 2)})
                if real:
                    rows[-1]["nvrtc-path"] = real
        os.unlink(path)
    return rows
