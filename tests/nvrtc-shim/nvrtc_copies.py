"""Copies of NVIDIA's NVRTC for the drop-in's tests: one as a pip wheel ships
it (the soname a file, no version in its name), and the same library as
another build (its GNU build-id rewritten)."""
import os
import shutil
import struct


def nvrtc_copy(real, d):
    """NVIDIA's NVRTC (real: its soname's path) and its builtins in d; returns the copy."""
    os.makedirs(d, exist_ok=True)
    src = os.path.dirname(os.path.realpath(real))
    for f in os.listdir(src):
        path = os.path.join(src, f)
        if f.startswith("libnvrtc-builtins") and not os.path.islink(path):
            shutil.copy2(path, os.path.join(d, f))
    copy = os.path.join(d, os.path.basename(real))
    shutil.copy2(os.path.realpath(real), copy)
    return copy


def gnu_build_id_note(elf):
    """(offset of its note, offset of its descriptor, descriptor size) of elf's GNU
    build-id note, or None."""
    phoff, = struct.unpack_from("<Q", elf, 32)
    phentsize, phnum = struct.unpack_from("<HH", elf, 54)
    for i in range(phnum):
        ptype, = struct.unpack_from("<I", elf, phoff + i * phentsize)
        off, = struct.unpack_from("<Q", elf, phoff + i * phentsize + 8)
        size, = struct.unpack_from("<Q", elf, phoff + i * phentsize + 32)
        at = off
        while ptype == 4 and at + 12 <= off + size:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, at)
            desc = at + 12 + ((namesz + 3) & ~3)
            if ntype == 3 and elf[at + 12:at + 16] == b"GNU\0":
                return at, desc, descsz
            at = desc + ((descsz + 3) & ~3)
    return None


def build_id(path):
    """path's GNU build-id in hex, as kcache keys the library, or None."""
    with open(path, "rb") as f:
        elf = f.read()
    note = gnu_build_id_note(elf)
    return elf[note[1]:note[1] + note[2]].hex() if note else None


def rewrite(path, elf):
    """elf's bytes as path: a new file renamed over it, as an installer does."""
    tmp = path + ".new"
    with open(tmp, "wb") as f:
        f.write(elf)
    os.chmod(tmp, 0o755)
    os.rename(tmp, path)


def other_build(path, drop=False):
    """Rewrites path's GNU build-id: the same code, another build as far as any key
    can tell. With drop, the note is no build-id any more (its type changed): a
    library with none. True if it had one."""
    with open(path, "rb") as f:
        elf = bytearray(f.read())
    note = gnu_build_id_note(elf)
    if not note:
        return False
    at, desc, descsz = note
    if drop:
        struct.pack_into("<I", elf, at + 8, 0x4b43)
    for k in range(descsz):
        elf[desc + k] ^= 0x5a
    rewrite(path, elf)
    return True


def other_release_string(path):
    """Changes the release NVRTC writes into PTX's header comment (V13.0.88 to
    V13.0.99, same length): a build whose output differs. True if found."""
    with open(path, "rb") as f:
        elf = f.read()
    old = b"Cuda compilation tools, release 13.0, V13.0.88"
    if elf.count(old) != 1:
        return False
    rewrite(path, elf.replace(old, old[:-2] + b"99"))
    return True
