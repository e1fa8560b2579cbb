"""kcache.triton: Triton's compiled kernels in kcache's one file.

Set ``TRITON_CACHE_MANAGER=kcache.triton:CacheManager`` and every artifact
Triton writes through its cache manager -- each kernel's CUBIN, PTX, metadata
JSON and the IR stages it keeps, the launcher and driver modules it builds,
the autotuner's timings -- goes into the kcache database (the user's cache,
or ``$KCACHE_DIR``/``$KCACHE_PATH``) under the namespace ``triton``, with the
same LRU, cap, digest check, stats, prune and bundles as every other entry
(``kcache ls --namespace triton``). ``torch.compile`` compiles its kernels
with Triton, so it is covered by the same variable.

Design (README, "Triton and torch.compile"):

* Keys. A file is stored under (Triton's key, filename); a group
  (``put_group``) under (Triton's key, ``__grp__`` + filename) as ONE entry
  holding every member's bytes. One row is one kernel: a reader gets the
  whole group or none of it (one SQLite read), and the cap evicts a kernel
  whole, never one member of it.
* Writes. Triton's compile of a kernel first asks for its group; a manager
  that was asked for one stores nothing until ``put_group``, which writes
  the group in one put (one transaction). So another process sees a kernel
  whole or not at all -- never a member before its group, nor one of a
  compile in progress beside a group stored before -- a compile that dies
  leaves nothing, and there is nothing to delete. A manager that was not
  asked for a group (the launcher modules, the autotuner's timings) stores
  each ``put`` at once, as Triton's own cache does. (A caller that puts files
  and then a group without asking for it first, which Triton never does,
  keeps both: the same bytes twice until evicted, never a torn group.)
* A miss, never a crash. A group entry that cannot be decoded, lacks the
  file it is named for, or names a member that is not a plain file name is a
  miss (Triton compiles again and replaces it); a store that cannot be
  opened or written is reported once (logger ``kcache.triton``), counted in
  :func:`stats`, and Triton goes on with the bytes it has.
* Paths. Triton reads what it is handed by path (and takes the file type
  from its suffix; the launcher modules are dlopen'ed), so the bytes are put
  in a staging directory of this process: ``kcache-triton-UID-PID-START-*``
  (0700) on a memory file system -- ``$KCACHE_TRITON_STAGING``, else
  ``$XDG_RUNTIME_DIR``, else ``/dev/shm``, else the temporary directory;
  one mounted ``noexec`` is passed over, since a module there cannot be
  loaded. A file is never seen half-written: a path no one has been handed
  yet is written in place, one Triton may hold already is written under a
  temporary name and renamed over. A hit stages every member of the group:
  Triton reads them all at once (``CompiledKernel`` reads each IR stage into
  ``kernel.asm``, where callers look for ``asm["ptx"]``), so none can be left
  out or written lazily, and a hit costs one read of the database and one
  memory file per member where Triton's own cache reads a file per member.
  When nothing can be staged (no usable base, or it is full) the files go
  where Triton's own cache keeps them (``TRITON_CACHE_DIR``), reported once:
  the compile goes on as without kcache, and the database gets the bytes.
  The staging directory is removed when the process exits,
  and directories of processes that are gone (their PID and start time no
  longer match) are removed by the next process that stages. No inode
  outlives the process; the database file (and its WAL) is all that stays.
  Memory files (memfd, ``/proc/self/fd/N``) were measured and rejected: the
  path has no suffix, so Triton cannot tell a CUBIN from a PTX, and Python
  cannot load a module from it.
* Processes. After a miss a process claims the kernel (a POSIX record lock
  on a byte of ``kcache.db-triton`` beside the database) until its
  ``put_group`` has stored the group; other processes wait for that group
  instead of compiling it again, for at most ``KCACHE_TRITON_WAIT`` seconds
  (60). A claim ends with its process. A forked child stages into a
  directory of its own and never removes its parent's.
* Soundness. The key is Triton's: its version and the hash of its compiler,
  backend and language sources and of libtriton, the kernel's source and
  signature, the backend (target architecture and ptxas version), the
  options and the environment variables Triton says change a compile. Two
  architectures have two keys (``GPUTarget('cuda', 80, 32)`` and ``90``
  never share an entry). kcache derives its own key from the namespace and
  Triton's key, so Triton's entries never meet another caller's.
* ``override`` and ``dump`` managers (``TRITON_KERNEL_OVERRIDE``,
  ``TRITON_KERNEL_DUMP``) are directories of files a person reads or edits:
  they stay Triton's own file managers.
* The remote tier is the store's: with ``remote`` set (``KCACHE_REMOTE``), a
  local miss asks it and every put is pushed, so a fleet compiles a kernel
  once; a remote that cannot be opened leaves the local file serving. Every
  put is pushed, none is kept local-only: a group is one entry and goes
  whole (its IR stages are part of the kernel Triton hands back, above); a
  launcher module is keyed by its source, the machine and OS and the
  compiler flags, named for the Python ABI, and one that does not load is
  rebuilt by Triton; autotuning timings are keyed by the target, not the
  GPU model, so machines of one architecture share their choices (a slower
  choice at worst, never a wrong result). Triton's own remote cache pushes
  the same files.
* Settings are the command line's (``kcache config``), read once per
  process: the cap, the codec and the remote when the store opens,
  ``disable`` when the first manager is made. Off (``KCACHE_DISABLE=1`` or
  ``disable = true`` in kcache.conf) kcache steps out of Triton's way: every
  call goes to Triton's own ``FileCacheManager`` (``TRITON_CACHE_DIR``), as
  if ``TRITON_CACHE_MANAGER`` were not set, and the database is not opened;
  a user turns kcache off to see Triton as it is without it (for no cache
  at all, Triton has ``TRITON_ALWAYS_COMPILE=1``). Settings that cannot be
  read are reported once and taken as off, as the library takes them.
"""

from __future__ import annotations

import atexit
import errno
import hashlib
import logging
import os
import re
import shutil
import stat
import struct
import tempfile
import threading
import time
import weakref
from typing import Any, Dict, Optional

from . import _db_path, _kcache

try:
    import fcntl
except ImportError:  # not POSIX: no compile is shared, each process compiles its own
    fcntl = None  # type: ignore[assignment]

try:  # Triton checks the class's MRO for a class named CacheManager; subclass its own when there.
    from triton.runtime.cache import CacheManager as _TritonCacheManager
except Exception:  # not installed: the class still works, for tools and tests without Triton
    _TritonCacheManager = object  # type: ignore[assignment,misc]

__all__ = ["CacheManager", "NAMESPACE", "stats", "staging_dir"]

#: The namespace Triton's entries live in (``kcache ls --namespace triton``).
NAMESPACE = "triton"

_GROUP_PREFIX = "__grp__"
# A group entry: this line, then for each member a 2-byte name length, the
# name (UTF-8), an 8-byte data length and the data (big-endian), to the end.
_GROUP_MAGIC = b"kcache-triton-group 1\n"
_STAGE_PREFIX = "kcache-triton-"
_NO_STAGING = "cannot stage Triton's files"
_TO_TRITON_DIR = "they go to Triton's cache directory, and to the cache"

_log = logging.getLogger("kcache.triton")

_lock = threading.Lock()
_off: Optional[bool] = None  # disable, once resolved (_disabled)
_store: Any = None
_store_failed = False
_stage_dir: Optional[str] = None
_stage_owner = 0
_staged: Dict[tuple, tuple] = {}  # (key, filename) -> (path, (size, hash))
_made: set = set()  # directories made in the staging directory
_warned: set = set()
_counters = {"hits": 0, "misses": 0, "puts": 0, "groups_put": 0, "groups_hit": 0,
             "groups_missed": 0, "damaged": 0, "errors": 0, "waited": 0, "waits_timed_out": 0}
# Stores a forked child inherited: never closed in the child (closing a SQLite
# connection that the parent still uses would release the parent's locks).
_inherited: list = []


def stats() -> Dict[str, int]:
    """This process's counts: hits and misses of files and groups, files stored on their
    own (puts),
    damaged group entries (served as misses), store errors, groups served after
    waiting for another process's compile, and waits that ran out."""
    with _lock:
        return dict(_counters)


def _count(name: str) -> None:
    with _lock:
        _counters[name] += 1


def _report(what: str, ex: BaseException, then: str = "Triton goes on without the cache") -> None:
    """Counts a failure and reports the first of its kind; the compile goes on."""
    _count("errors")
    with _lock:
        first = what not in _warned
        _warned.add(what)
    if first:
        _log.warning("kcache: %s: %s (%s)", what, ex, then)


_OFF = ("", "0", "false", "no", "off")


def _disabled() -> bool:
    """Whether kcache is off for this process: disable in the settings the command line
    shows (KCACHE_DISABLE, else kcache.conf beside the database), resolved once. Settings
    that cannot be read are taken as off, as the library takes them: a stray line next to
    "disable = true" must not turn the cache back on."""
    global _off
    off = _off
    if off is not None:
        return off
    err = None
    try:
        value = _kcache.settings().get("disable", "").strip().lower()
        off = value not in _OFF  # a value not understood: off, the safe side
    except Exception as ex:
        off, err = True, ex
    with _lock:
        _off = off
    if err is not None:
        _report("cannot read kcache's settings", err, "Triton's own file cache serves")
    return off


def _get_store() -> Any:
    global _store, _store_failed
    with _lock:
        if _store is not None or _store_failed:
            return _store
        remote_err = None
        try:
            _store = _kcache.Store(_db_path(None))
        except Exception as ex:
            err = ex
            try:  # a remote setting that cannot be used: the local file still serves
                _store = _kcache.Store(_db_path(None), use_remote=False)
                remote_err = ex
            except Exception as ex2:  # a cache that cannot be opened: Triton compiles without it
                _store_failed = True
                err = ex2
        if _store is not None and remote_err is None:
            return _store
        store = _store
    if store is not None:
        _report("cannot use the remote, the local cache serves alone", remote_err)
        return store
    _report("cannot open the cache", err)
    return None


# --- staging: the paths Triton reads ---------------------------------------------------------


def _start_time(pid: int) -> Optional[str]:
    """The process's start time (clock ticks since boot), which a reused PID does not share."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from its end.
    fields = data[data.rfind(b")") + 2:].split()
    return fields[19].decode() if len(fields) > 19 else None


def _usable(base: str) -> bool:
    try:
        st = os.stat(base)
        vfs = os.statvfs(base)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and os.access(base, os.W_OK | os.X_OK)
            and not vfs.f_flag & getattr(os, "ST_NOEXEC", 8))


def _staging_bases() -> list:
    out = []
    for b in (os.environ.get("KCACHE_TRITON_STAGING"), os.environ.get("XDG_RUNTIME_DIR"),
              "/dev/shm", tempfile.gettempdir()):
        if b and b not in out:
            out.append(b)
    return out


def _remove_stale(base: str) -> None:
    """Removes staging directories of this user's processes that are gone."""
    uid = os.getuid()
    prefix = "%s%d-" % (_STAGE_PREFIX, uid)
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        if not name.startswith(prefix):
            continue
        parts = name[len(prefix):].split("-")
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        pid, start = int(parts[0]), parts[1]
        if pid == os.getpid() or _start_time(pid) == start:
            continue  # alive (or this process)
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
            shutil.rmtree(path, ignore_errors=True)


def _at_exit() -> None:
    # The hits and times of use this process gathered go to the file (the LRU
    # and `kcache stats` count them), and its staging directory goes.
    store = _store
    if store is not None:
        try:
            store.flush()
        except Exception:
            pass
    _remove_own_stage()


def _remove_own_stage() -> None:
    global _stage_dir
    with _lock:
        d, owner = _stage_dir, _stage_owner
        if owner != os.getpid():
            return  # a forked child never removes its parent's directory
        _stage_dir = None
        _staged.clear()
        _made.clear()
    if d:
        shutil.rmtree(d, ignore_errors=True)


def staging_dir() -> str:
    """This process's staging directory (made on first use)."""
    global _stage_dir, _stage_owner
    with _lock:
        if _stage_dir is not None and _stage_owner == os.getpid():
            return _stage_dir
    last: Optional[BaseException] = None
    for base in _staging_bases():
        if not _usable(base):
            continue
        _remove_stale(base)
        prefix = "%s%d-%d-%s-" % (_STAGE_PREFIX, os.getuid(), os.getpid(),
                                  _start_time(os.getpid()) or "0")
        try:
            d = tempfile.mkdtemp(prefix=prefix, dir=base)  # 0700
        except OSError as ex:
            last = ex
            continue
        with _lock:
            _stage_dir, _stage_owner = d, os.getpid()
        return d
    raise OSError("kcache: no directory to stage Triton's files in (tried %s): %s; set "
                  "KCACHE_TRITON_STAGING to a writable directory not mounted noexec"
                  % (", ".join(_staging_bases()), last or "none usable"))


def _reset() -> None:
    """Forgets this process's store, settings and staging directory (removing it): for
    tests that point one process at several caches."""
    global _store, _store_failed, _off
    _remove_own_stage()
    with _lock:
        _off = None
        if _store is not None:
            _store.close()
        _store, _store_failed = None, False
        _warned.clear()
        for k in _counters:
            _counters[k] = 0
        if _claims["fd"] is not None:
            os.close(_claims["fd"])
        _claims.update(fd=None, tried=False)


def _after_fork_in_child() -> None:
    global _store, _store_failed, _stage_dir, _lock
    _lock = threading.Lock()  # another thread of the parent may have held it at the fork
    if _store is not None:
        _inherited.append(_store)
    _store, _store_failed, _stage_dir = None, False, None
    _staged.clear()
    _made.clear()
    # _stage_owner stays the parent's PID: the child makes its own directory on
    # first use, and its exit removes only that one.


atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

_SAFE_KEY = re.compile(r"[A-Za-z0-9_.=-]{1,128}\Z")


def _safe_name(name: str) -> bool:
    return (0 < len(name) <= 255 and "/" not in name and "\0" not in name
            and name not in (".", ".."))


def _key_dir(key: str) -> str:
    """KEY's directory in the staging directory (one per key, as in Triton's own cache, so
    that each file keeps the name Triton gave it), made on first use."""
    sub = key if _SAFE_KEY.match(key) else "k" + _kcache.key_caller(NAMESPACE, key.encode())[:40]
    d = os.path.join(staging_dir(), sub)
    if d not in _made:
        os.makedirs(d, mode=0o700, exist_ok=True)
        with _lock:
            _made.add(d)
    return d


_O_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def _write_all(fd: int, data: Any) -> None:
    n = os.write(fd, data)
    if n < len(data):  # a short write (a signal, a full file system): the rest
        view = memoryview(data)[n:]
        while view:
            view = view[os.write(fd, view):]


def _write_new(path: str, data: Any) -> bool:
    """Writes data to a path that does not exist yet, in place: no one has been handed the
    path, so no one can see it half-written. False when the path exists."""
    try:
        fd = os.open(path, _O_NEW, 0o600)
    except FileExistsError:
        return False
    try:
        _write_all(fd, data)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)
    return True


def _replace(path: str, data: Any) -> None:
    """Replaces a path Triton may have been handed already: written under a temporary name
    and renamed, so that a reader has the old bytes or the new, never half of either."""
    # The directory is this process's own: a temporary name per thread is unique, and
    # costs none of mkstemp's random names and retries.
    tmp = os.path.join(os.path.dirname(path), ".stage-%d" % threading.get_ident())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        _write_all(fd, data)
        os.close(fd)
        fd = -1
        os.rename(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _stage(key: str, filename: str, data: bytes) -> str:
    """Puts data where Triton can read it: KEY/FILENAME in the staging directory."""
    memo = (key, filename)
    sig = (len(data), hash(data))
    with _lock:
        seen = _staged.get(memo)
    if seen is not None and seen[1] == sig and os.path.exists(seen[0]):
        return seen[0]  # staged before with these bytes: Triton asked again
    path = os.path.join(_key_dir(key), filename)
    if not _write_new(path, data):
        _replace(path, data)
    with _lock:
        _staged[memo] = (path, sig)
    return path


def _stage_group(key: str, members: Dict[str, Any]) -> Dict[str, str]:
    """Stages a group's members (a hit): KEY/NAME for each. The first time in a process each
    path is new and written in place; a group staged again replaces its files."""
    d = _key_dir(key) + os.sep
    if _staged:
        with _lock:  # these paths no longer hold what _stage memoised for them
            for name in members:
                _staged.pop((key, name), None)
    out = {}
    for name, data in members.items():
        path = d + name
        if not _write_new(path, data):
            _replace(path, data)
        out[name] = path
    return out


# --- claims: one process compiles a kernel, the others wait for its group -----------------
#
# A byte of one file beside the database, locked with fcntl (POSIX record locks): the
# kernel's key picks the byte. A lock held by a process that ends is gone with it, so a
# crash never leaves a claim behind; a wait is bounded (KCACHE_TRITON_WAIT seconds). Two
# keys that pick one byte only make one wait for the other. Threads of one process share
# its locks: they may compile one kernel twice, as without kcache.

_claims = {"fd": None, "tried": False}
_DEFAULT_WAIT_S = 60.0


def _wait_s() -> float:
    v = os.environ.get("KCACHE_TRITON_WAIT", "")
    try:
        w = float(v) if v.strip() else _DEFAULT_WAIT_S
    except ValueError as ex:
        _report("KCACHE_TRITON_WAIT must be a number of seconds, waiting %g" % _DEFAULT_WAIT_S, ex)
        w = _DEFAULT_WAIT_S
    return min(max(w, 0.0), 3600.0)


def _claims_fd() -> Optional[int]:
    if fcntl is None:
        return None
    with _lock:
        if _claims["tried"]:
            return _claims["fd"]
        _claims["tried"] = True
    store = _get_store()
    if store is None:
        return None
    try:
        # Never closed: closing any descriptor of the file drops this process's locks on it.
        fd = os.open(store.path + "-triton", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0),
                     0o600)
    except OSError as ex:
        _report("cannot open the file of Triton compile claims (compiles are not shared)", ex)
        return None
    with _lock:
        _claims["fd"] = fd
    return fd


def _claim_offset(key: str, filename: str) -> int:
    digest = hashlib.blake2b(_caller_key(key, filename), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


def _release_claim(fd: int, off: int) -> None:
    try:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, off, 0)
    except OSError:
        pass


# --- group entries -------------------------------------------------------------------------


def _encode_group(members: Dict[str, bytes]) -> bytes:
    out = [_GROUP_MAGIC]
    for name in sorted(members):
        raw = name.encode("utf-8")
        out.append(struct.pack(">H", len(raw)))
        out.append(raw)
        out.append(struct.pack(">Q", len(members[name])))
        out.append(members[name])
    return b"".join(out)


def _decode_group(blob: bytes) -> Optional[Dict[str, memoryview]]:
    """The members of a group entry (views of blob), or None for anything not exactly one."""
    if not blob.startswith(_GROUP_MAGIC):
        return None
    pos, end = len(_GROUP_MAGIC), len(blob)
    members: Dict[str, memoryview] = {}
    view = memoryview(blob)
    while pos < end:
        if end - pos < 2:
            return None
        (n,) = struct.unpack_from(">H", blob, pos)
        pos += 2
        if end - pos < n + 8:
            return None
        try:
            name = bytes(view[pos:pos + n]).decode("utf-8")
        except UnicodeDecodeError:
            return None
        pos += n
        (size,) = struct.unpack_from(">Q", blob, pos)
        pos += 8
        if end - pos < size or not _safe_name(name) or name in members:
            return None
        members[name] = view[pos:pos + size]
        pos += size
    return members


def _caller_key(key: str, filename: str) -> bytes:
    # Triton's keys and file names hold no NUL: the pair is encoded unambiguously.
    return key.encode("utf-8") + b"\0" + filename.encode("utf-8")


class CacheManager(_TritonCacheManager):  # type: ignore[misc,valid-type]
    """Triton's cache manager over kcache: ``TRITON_CACHE_MANAGER=kcache.triton:CacheManager``.

    Triton makes one per key (a kernel, a launcher module, an autotuning)
    and asks it for files by name; see the module's documentation for where
    the bytes live and which paths Triton is handed.
    """

    def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
        self.key = key
        self._files: Any = None
        if override or dump or _disabled():
            from triton.runtime.cache import FileCacheManager

            self._files = FileCacheManager(key, override=override, dump=dump)
        # This manager's puts, by file name: (path handed out, bytes), for put_group.
        self._put: Dict[str, tuple] = {}
        self._triton_files: Any = None  # Triton's own files, when staging cannot be used
        # Asked for a group: Triton's compile of this key. Its files are stored only as
        # that group, by put_group, in one write (put).
        self._grouped = False
        # The claim to compile this key's group, taken after a miss (_wait_or_claim).
        self._claim: Any = None

    # Triton's FileCacheManager has it; some callers ask.
    def has_file(self, filename: str) -> bool:
        return self.get_file(filename) is not None

    def _lookup(self, filename: str, touch: bool = True) -> Optional[bytes]:
        store = _get_store()
        if store is None:
            return None
        try:
            # touch=False: a waiter's polls neither count as misses nor move the LRU.
            return store.get(NAMESPACE, _caller_key(self.key, filename), touch)
        except Exception as ex:
            _report("cannot read the cache", ex)
            return None

    def _store_put(self, filename: str, data: bytes) -> bool:
        store = _get_store()
        if store is None:
            return False
        try:
            store.put(NAMESPACE, _caller_key(self.key, filename), data)
        except Exception as ex:
            _report("cannot write the cache", ex)
            return False
        return True

    def get_file(self, filename: str) -> Optional[str]:
        if self._files is not None:
            return self._files.get_file(filename)
        mine = self._put.get(filename)
        if mine is not None:
            return self._materialise(filename, mine[1])
        data = self._lookup(filename)
        if data is None:
            # Inside a compile's group: Triton names it after the kernel (NAME.json for NAME.EXT).
            stem = filename.rsplit(".", 1)[0]
            blob = self._lookup(_GROUP_PREFIX + stem + ".json")
            members = _decode_group(blob) if blob is not None else None
            view = members.get(filename) if members else None
            data = bytes(view) if view is not None else None
        if data is None:
            _count("misses")
            return None
        _count("hits")
        return self._materialise(filename, data)

    def put(self, data: Any, filename: str, binary: bool = True) -> str:
        if self._files is not None:
            return self._files.put(data, filename, binary=binary)
        if not _safe_name(filename):
            raise ValueError("kcache: Triton file name %r is not a plain file name" % filename)
        raw = bytes(data) if isinstance(data, (bytes, bytearray, memoryview)) else str(data).encode("utf-8")
        if not self._grouped and self._store_put(filename, raw):
            _count("puts")
        path = self._materialise(filename, raw)
        self._put[filename] = (path, raw)
        return path

    def _group(self, filename: str, again: bool = False) -> Optional[Dict[str, str]]:
        """The group staged, or None for a miss (a damaged entry counted, once)."""
        blob = self._lookup(_GROUP_PREFIX + filename, touch=not again)
        if blob is None:
            return None
        members = _decode_group(blob)
        if members is None or filename not in members:
            if not again:
                _count("damaged")
            return None
        try:
            return _stage_group(self.key, members)
        except OSError as ex:
            _report(_NO_STAGING, ex, _TO_TRITON_DIR)
        return {name: self._fallback(name, bytes(data)) for name, data in members.items()}

    def _materialise(self, filename: str, data: bytes) -> str:
        """A path that holds data, for Triton to read: staged (_stage), or where Triton's
        own cache would put it when nothing can be staged."""
        try:
            return _stage(self.key, filename, data)
        except OSError as ex:
            _report(_NO_STAGING, ex, _TO_TRITON_DIR)
        return self._fallback(filename, data)

    def _fallback(self, filename: str, data: bytes) -> str:
        # Staging cannot be used (no usable memory file system, one that is full): the
        # compile goes on with files where Triton keeps its own, as without kcache; the
        # bytes are stored in kcache all the same. Raises what Triton's cache would.
        if self._triton_files is None:
            from triton.runtime.cache import FileCacheManager

            self._triton_files = FileCacheManager(self.key)
        return self._triton_files.put(data, filename, binary=True)

    def get_group(self, filename: str) -> Optional[Dict[str, str]]:
        if self._files is not None:
            return self._files.get_group(filename)
        self._grouped = True
        group = self._group(filename)
        if group is None:
            group = self._wait_or_claim(filename)
        _count("groups_hit" if group is not None else "groups_missed")
        return group

    def _wait_or_claim(self, filename: str) -> Optional[Dict[str, str]]:
        """After a miss: the group another process is compiling, once it is stored, or
        None with the claim to compile it (released by put_group, or when this manager
        is dropped, or when the process ends)."""
        fd = _claims_fd()
        if fd is None:
            return None
        off = _claim_offset(self.key, filename)
        deadline = time.monotonic() + _wait_s()
        pause = 0.005
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, off, 0)
                break
            except OSError as ex:
                if ex.errno not in (errno.EACCES, errno.EAGAIN):
                    _report("cannot take a claim on a Triton compile", ex)
                    return None
            if time.monotonic() >= deadline:
                _count("waits_timed_out")
                return None  # compile it here too: a wait is bounded
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
            group = self._group(filename, again=True)
            if group is not None:
                _count("waited")
                return group
        # Claimed. Whoever held the claim stored its group before letting go.
        group = self._group(filename, again=True)
        if group is not None:
            _release_claim(fd, off)
            _count("waited")
            return group
        self._claim = weakref.finalize(self, _release_claim, fd, off)
        return None

    def put_group(self, filename: str, group: Dict[str, str]) -> Optional[str]:
        if self._files is not None:
            return self._files.put_group(filename, group)
        members: Dict[str, bytes] = {}
        for name, path in group.items():
            mine = self._put.get(name)
            if mine is not None and mine[0] == path:
                members[name] = mine[1]
                continue
            try:  # a member this manager did not put: its bytes are where Triton says
                with open(path, "rb") as f:
                    members[name] = f.read()
            except OSError as ex:
                # Storing the group without it would hand out a torn group later.
                _report("a member of a Triton group is missing, the group is not stored", ex)
                return None
        if filename not in members or not all(_safe_name(n) for n in members):
            _count("damaged")
            return None
        try:
            # One put, one transaction: the group appears whole or not at all. Its members
            # were never stored on their own (get_group came first), so nothing is deleted.
            if not self._store_put(_GROUP_PREFIX + filename, _encode_group(members)):
                return None
            _count("groups_put")
        finally:
            if self._claim is not None:
                self._claim()  # after the store: a waiter that takes the claim finds the group
                self._claim = None
        return None
