"""kcache from Python: the one-file cache of compiled CUDA kernels.

Three ways in, all over kcache's C library (a C extension, no ctypes):

* :class:`ProgramCache` -- a ``cuda.core.utils.ProgramCacheResource`` for
  ``Program.compile(..., cache=kcache.ProgramCache())``: one SQLite file,
  capped, safe across threads and processes, shared with the ``kcache``
  command, the drop-in NVRTC and the remote tier.
* :class:`Cache` -- the cache itself: bytes under (namespace, key), stats,
  prune, verify, export and import of bundles.
* :func:`compile` -- kcache's compile: the key covers every header the
  source reads (found on disk or handed in memory) and the name expressions,
  which cuda.core's own ``cache=`` refuses.

Errors from the library raise :class:`Error` (``.status`` is its code) with
the library's one-line message; a compile error raises :class:`CompileError`
with the compiler's ``.log``.
"""

from __future__ import annotations

import os
import time
from _thread import allocate_lock

from . import _kcache
from ._kcache import CompileError, Error

__all__ = [
    "Cache",
    "CompileError",
    "CompileResult",
    "Error",
    "ProgramCache",
    "compile",
    "key_of",
    "__version__",
]

__version__: str = _kcache.library_version

# `typing` and `threading` cost a process more to import than a hit costs
# (doc/design.md, The Python package): the names below are for
# type checkers only, and annotations stay strings (PEP 563).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable, Mapping, Sequence, Union

    PathLike = Union[str, "os.PathLike[str]"]
    KeyLike = Union[bytes, bytearray, str]

#: The namespace :class:`ProgramCache` stores under (``kcache ls --namespace cuda.core``).
PROGRAM_CACHE_NAMESPACE = "cuda.core"


def _db_path(path: PathLike | None) -> str | None:
    """A cache directory (or a database file) as the library's database path."""
    if path is None:
        return None
    p = os.fspath(path)
    if p.endswith(".db") or os.path.isfile(p):
        return p
    return os.path.join(p, "kcache.db")


def _size(value: int | str | None, what: str) -> int:
    """A size in bytes (0: the setting): an int is bytes; a str reads as the
    kcache command reads sizes ("512M", "1.5GiB", a bare number is GiB,
    "none" no cap)."""
    if value is None:
        return 0
    if isinstance(value, str):
        try:
            return _kcache.parse_max_size(value)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be bytes (an int) or a size such as '1G', "
                        f"not {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{what} must be positive or None")
    return value


def _key_bytes(key: object) -> bytes:
    if isinstance(key, bytes):
        return key
    if isinstance(key, bytearray):
        return bytes(key)
    if isinstance(key, str):
        return key.encode("utf-8")
    raise TypeError(f"cache keys must be bytes or str, got {type(key).__name__}")


def _value_bytes(value: object) -> bytes:
    """bytes of a bytes-like value or of a cuda.core ObjectCode (its code, or the file it names)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    code = getattr(value, "code", None)
    if code is not None and type(value).__name__ == "ObjectCode":
        if isinstance(code, str):
            try:
                with open(code, "rb") as f:
                    return f.read()
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"cannot store path-backed ObjectCode in cache: {code} no longer exists"
                ) from None
        return bytes(code)
    raise TypeError(f"cache values must be bytes-like or ObjectCode, got {type(value).__name__}")


def key_of(namespace: str, key: KeyLike) -> str:
    """The store's key (64 hex digits) of ``key`` in ``namespace``: what ``kcache ls`` shows."""
    return _kcache.key_caller(namespace, _key_bytes(key))


class Cache:
    """A kcache cache: one database file, shared by threads and processes.

    ``path`` is a cache directory (``PATH/kcache.db``) or a database file;
    ``None`` is the user's cache, as the ``kcache`` command finds it
    (``$KCACHE_PATH``, ``$KCACHE_DIR``, ``~/.cache/kcache``). ``max_size`` caps
    the whole file: bytes (an int), or a size as the ``kcache`` command reads
    it (``"1G"``, ``"512M"``, ``"1.5GiB"``; a bare ``"5"`` is GiB; ``"none"``:
    no cap); ``None``: the setting or the default, 4 GiB.
    ``remote`` is the shared tier (``redis://host:port``; ``None``: the
    ``remote`` setting, ``$KCACHE_REMOTE`` or kcache.conf): a local miss asks
    it, a put is pushed to it, every entry from it is checked.

    Entries of your own live under a namespace (1 to 31 letters, digits,
    ``.``, ``_``, ``-``) and a key of any bytes; ``kcache ls --namespace NS``
    lists them. The methods release the GIL while the library works.
    """

    def __init__(
        self,
        path: PathLike | None = None,
        *,
        max_size: int | str | None = None,
        read_only: bool = False,
        remote: str | None = None,
    ) -> None:
        self._store = _kcache.Store(_db_path(path), _size(max_size, "max_size"), read_only,
                                    remote=remote)

    def __repr__(self) -> str:
        return f"kcache.Cache({self._store.path!r})"

    @property
    def path(self) -> str:
        """The database file."""
        return self._store.path

    def get(self, namespace: str, key: KeyLike, default: bytes | None = None) -> bytes | None:
        """The bytes under (namespace, key), checked against their digest, or ``default``."""
        data = self._store.get(namespace, _key_bytes(key))
        return default if data is None else data

    def put(self, namespace: str, key: KeyLike, value: Any) -> None:
        """Stores a bytes-like value (or an ObjectCode's bytes), replacing what was there."""
        self._store.put(namespace, _key_bytes(key), _value_bytes(value))

    def delete(self, namespace: str, key: KeyLike) -> bool:
        """Deletes (namespace, key); whether it was there."""
        return self._store.delete(namespace, _key_bytes(key))

    def clear(self, namespace: str) -> int:
        """Deletes every entry of a namespace; how many."""
        return self._store.clear_namespace(namespace)

    def stats(self, namespace: str | None = None) -> dict[str, Any]:
        """The cache's statistics, or one namespace's (entries, bytes, hits, misses)."""
        if namespace is not None:
            return self._store.namespace_stats(namespace)
        return self._store.stats()

    def prune(
        self,
        *,
        max_size: int | str | None = None,
        max_entries: int | None = None,
        older_than: float | None = None,
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, int]:
        """Evicts least recently used entries: until the file fits ``max_size``
        (bytes, or a size such as ``"512M"``; default: the cap), to ``max_entries``, or those unused for
        ``older_than`` seconds (only ``namespace``'s when given)."""
        before = 0
        if older_than is not None:
            before = max(1, int((time.time() - older_than) * 1000))
        elif namespace is not None:
            raise ValueError("namespace selects entries for older_than: give an age too")
        return self._store.prune(
            max_size=_size(max_size, "max_size"),
            max_entries=max_entries or 0,
            accessed_before_ms=before,
            arch=namespace,
            kind=_kcache.KIND_DATA if namespace is not None else 0,
            dry_run=dry_run,
        )

    def verify(self) -> dict[str, Any]:
        """Checks the file and every entry against its digest (damaged ones are deleted)."""
        return self._store.verify()

    def export_bundle(self, path: PathLike, *, namespace: str | None = None) -> dict[str, int]:
        """Writes the entries (only ``namespace``'s when given) into a bundle file."""
        kind = _kcache.KIND_DATA if namespace is not None else 0
        return self._store.export_bundle(os.fspath(path), arch=namespace, kind=kind)

    def import_bundle(self, path: PathLike, *, dry_run: bool = False) -> dict[str, int]:
        """Checks a bundle and merges it in (each entry checked as a put would be)."""
        return self._store.import_bundle(os.fspath(path), dry_run=dry_run)

    def flush(self) -> None:
        """Writes this process's pending hit counts and times of use now and, if
        this cache wrote, hands the WAL's frames to the database file (a
        checkpoint, with an fsync) so the next process has none to replay:
        call it when done writing, not after every put."""
        self._store.flush()

    def close(self) -> None:
        """Releases the file; later calls raise ValueError."""
        self._store.close()

    def __enter__(self) -> "Cache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def __getattr__(name: str) -> Any:
    # ProgramCache subclasses cuda.core's ProgramCacheResource, and importing
    # cuda.core costs a process far more than a hit: only its users pay it.
    # The class is made here, not imported from a module of its own: a module
    # import is a few file lookups and reads, about as long as a warm hit.
    if name == "ProgramCache":
        cls = _program_cache_class()
        globals()["ProgramCache"] = cls
        return cls
    raise AttributeError(f"module 'kcache' has no attribute {name!r}")


def __dir__() -> list[str]:
    # The API, not the modules and helpers the package uses (os, time, ...):
    # what tab completion and help() show.
    return sorted(__all__ + ["PROGRAM_CACHE_NAMESPACE", "triton"])


class _ProgramCacheProtocol:
    """The defaults of cuda.core's ProgramCacheResource, for use without cuda.core."""

    def get(self, key: KeyLike, default: bytes | None = None) -> bytes | None:
        try:
            return self[key]  # type: ignore[index]
        except KeyError:
            return default

    def update(self, items: Any, /) -> None:
        if hasattr(items, "keys"):  # a mapping, by dict.update's own test
            items = ((k, items[k]) for k in items.keys())
        for key, value in items:
            self[key] = value  # type: ignore[index]

    def close(self) -> None:
        pass

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _ProgramCacheMethods:
    """What kcache.ProgramCache adds to cuda.core's ProgramCacheResource (see its docstring)."""

    def __init__(self, path: PathLike | None = None, *, max_size_bytes: int | None = None) -> None:
        if max_size_bytes is not None and max_size_bytes <= 0:
            raise ValueError("max_size_bytes must be positive or None (0 would evict every write)")
        self._store = _kcache.Store(_db_path(path))
        self._max_size_bytes = max_size_bytes
        self._ns = PROGRAM_CACHE_NAMESPACE

    def __getitem__(self, key: KeyLike) -> bytes:
        data = self._store.get(self._ns, _key_bytes(key))
        if data is None:
            raise KeyError(key)
        return data

    def __setitem__(self, key: KeyLike, value: Any) -> None:
        self._store.put(self._ns, _key_bytes(key), _value_bytes(value))
        if self._max_size_bytes is not None:
            self._store.trim_namespace(self._ns, self._max_size_bytes)

    def __delitem__(self, key: KeyLike) -> None:
        if not self._store.delete(self._ns, _key_bytes(key)):
            raise KeyError(key)

    def __len__(self) -> int:
        return self._store.namespace_stats(self._ns)["entries"]

    def clear(self) -> None:
        """Removes every entry of this cache (the namespace; the rest of the file stays)."""
        self._store.clear_namespace(self._ns)

    def close(self) -> None:
        """Releases the file."""
        self._store.close()

    @property
    def path(self) -> str:
        """The database file."""
        return self._store.path


def _program_cache_class() -> type:
    try:  # cuda.core's ProgramCacheResource when cuda.core is there
        from cuda.core.utils import ProgramCacheResource as base
    except Exception:  # ImportError, or a cuda.core that cannot load its bindings
        base = _ProgramCacheProtocol

    class ProgramCache(_ProgramCacheMethods, base):  # type: ignore[misc,valid-type]
        """A program cache for cuda.core in kcache's one file.

        ``Program.compile("cubin", cache=kcache.ProgramCache())`` stores its
        compiles in the user's kcache cache (or ``path``, a cache directory),
        beside the ``kcache`` command's and the drop-in's, under the namespace
        ``cuda.core`` (``kcache ls --namespace cuda.core``).

        As ``FileStreamProgramCache``: persistent across processes, safe across
        threads and processes (a reader sees a whole entry or none), and, with
        ``max_size_bytes``, the least recently read entries of this namespace
        evicted once their bytes pass it (the file's own cap still holds).
        Keys are ``bytes`` or ``str`` (its UTF-8 bytes); values bytes-like or
        ``ObjectCode`` (stored as its bytes). Every read is checked against the
        entry's digest. With a remote tier set (``remote`` in kcache's settings,
        ``$KCACHE_REMOTE``), a local miss asks it and a write is pushed to it, as
        for kcache's own compiles. Like cuda.core's caches there is no
        ``__contains__``: use :meth:`get`, which answers and reads in one step.
        Without cuda.core installed it is a plain mapping with the same protocol.
        """

    ProgramCache.__module__ = __name__
    ProgramCache.__qualname__ = "ProgramCache"
    return ProgramCache


if TYPE_CHECKING:
    class ProgramCache(_ProgramCacheMethods, _ProgramCacheProtocol):
        pass


class CompileResult:
    """What :func:`compile` returns."""

    __slots__ = ("data", "kind", "arch", "hit", "key", "log", "lowered_names", "message",
                 "store_message", "compile_ns", "elapsed_ns", "remote_hit")

    data: bytes
    """The artifact (CUBIN, PTX or LTO-IR), checked against its digest."""
    kind: str
    """"cubin", "ptx" or "ltoir"."""
    arch: str
    hit: bool
    """Served from the cache (locally or from the remote tier)."""
    key: str
    """The key (64 hex digits; "" when the compile could not be cached: see store_message)."""
    log: str
    lowered_names: dict[str, str]
    """Each name expression's lowered (mangled) name, kept with the entry."""
    message: str
    store_message: str
    compile_ns: int
    elapsed_ns: int
    remote_hit: bool

    def __init__(self, d: Mapping[str, Any]) -> None:
        for name in self.__slots__:
            setattr(self, name, d[name])

    def __repr__(self) -> str:
        return (f"CompileResult(kind={self.kind!r}, arch={self.arch!r}, hit={self.hit}, "
                f"key={self.key[:16]!r}, size={len(self.data)})")


_compilers: dict[Any, Any] = {}
_compilers_lock = allocate_lock()

_KINDS = {None: 0, "cubin": _kcache.KIND_CUBIN, "ptx": _kcache.KIND_PTX, "ltoir": _kcache.KIND_LTOIR}


def _pip_cuda() -> str | None:
    """pip's CUDA (nvidia/cu13 with NVRTC, as PyTorch's and cuda-python's wheels
    bring it) in this Python's environment or beside this package, as
    cuda.pathfinder finds it; None when there is none."""
    import sys

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for d in [here] + sys.path:
        root = os.path.join(d or ".", "nvidia", "cu13")
        if os.path.exists(os.path.join(root, "lib", "libnvrtc.so.13")) and os.path.isdir(
            os.path.join(root, "include")
        ):
            return root
    return None


def _compiler(cache: PathLike | None, no_store: bool, toolkit: str | None) -> Any:
    key = (_db_path(cache), no_store, toolkit)
    with _compilers_lock:
        c = _compilers.get(key)
        if c is None:
            try:
                c = _kcache.Compiler(store_path=key[0], no_store=no_store, toolkit_root=toolkit)
            except Error:
                # No toolkit at CUDA_HOME, CUDA_PATH or where kcache was built to look:
                # pip's NVRTC and headers, when this environment has them.
                pip = _pip_cuda() if toolkit is None else None
                if pip is None:
                    raise
                c = _kcache.Compiler(store_path=key[0], no_store=no_store, toolkit_root=pip)
            _compilers[key] = c
        return c


def compile(
    source: str | bytes | None = None,
    *,
    arch: str,
    path: PathLike | None = None,
    name: str | None = None,
    options: Sequence[str] = (),
    include_paths: Iterable[PathLike] = (),
    headers: Mapping[str, str | bytes] | None = None,
    name_expressions: Sequence[str] = (),
    output: str | None = None,
    cache: PathLike | None = None,
    no_cache: bool = False,
    refresh: bool = False,
    toolkit: str | None = None,
) -> CompileResult:
    """Compiles CUDA C++ through the cache: NVRTC on a miss, the cache on a hit.

    Give the source as text (``source``) or a file (``path``). ``arch`` is the
    target ("sm_90", "compute_90" for PTX). ``options`` are NVRTC's
    (``-std=c++17``, ``-DN=4``, ...); ``include_paths`` add ``-I``; ``headers``
    maps include names to their text, handed to NVRTC in memory. Every header
    the compile reads, on disk or in memory, is part of the key, and so are
    the ``name_expressions``, whose lowered names come back with the result
    even on a hit. ``output``: "cubin" (default for sm_*), "ptx" or "ltoir".
    ``cache`` is a cache directory (default: the user's). ``toolkit``: the
    CUDA toolkit's directory (default: ``$CUDA_HOME``, ``$CUDA_PATH``, the one
    kcache was built for, else pip's ``nvidia/cu13`` in this environment).
    ``name`` is the
    program's name as NVRTC sees it (``__FILE__``, ``assert`` messages, the
    log): by default the base name of ``path``, else ``"kernel.cu"``, as in
    ``kcache compile``. The kernel's bytes can hold it, so the key covers it:
    to share entries with ``kcache compile DIR/saxpy.cu``, give
    ``path="DIR/saxpy.cu"`` or ``name="saxpy.cu"``.

    Raises :class:`CompileError` (with ``.log``) when NVRTC rejects the source.
    """
    if (source is None) == (path is None):
        raise TypeError("give the source as text (source=) or a file (path=), one of the two")
    if output not in _KINDS:
        raise ValueError(f"output {output!r}: use 'cubin', 'ptx' or 'ltoir'")
    opts = [str(o) for o in options] + ["-I" + os.fspath(p) for p in include_paths]
    flags = (_kcache.COMPILE_NO_CACHE if no_cache else 0) | (_kcache.COMPILE_REFRESH if refresh else 0)
    d = _compiler(cache, False, toolkit).compile(
        source=source,
        source_path=os.fspath(path) if path is not None else None,
        name=name,
        arch=arch,
        options=opts,
        headers=dict(headers) if headers else None,
        name_expressions=list(name_expressions),
        output=_KINDS[output],
        flags=flags,
    )
    if d["cache_failed"] and not no_cache:
        # As the command's row does: the kernel is made, the cache said why not.
        import warnings

        warnings.warn(f"kcache: not cached: {d['store_message']}", RuntimeWarning, stacklevel=2)
    return CompileResult(d)
