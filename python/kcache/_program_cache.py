"""kcache.ProgramCache: cuda.core's ProgramCacheResource in kcache's one file.

Imported on first use of ``kcache.ProgramCache`` (importing cuda.core is not
free). Without cuda.core it is a plain mapping with the same protocol.
"""

from __future__ import annotations

from typing import Any, Mapping

from . import PROGRAM_CACHE_NAMESPACE, PathLike, KeyLike, _db_path, _key_bytes, _value_bytes
from . import _kcache

try:  # ProgramCache is cuda.core's ProgramCacheResource when cuda.core is there.
    from cuda.core.utils import ProgramCacheResource as _ProgramCacheBase
except Exception:  # ImportError, or a cuda.core that cannot load its bindings

    class _ProgramCacheBase:  # type: ignore[no-redef]
        """The mapping protocol of cuda.core's ProgramCacheResource, for use without cuda.core."""

        def get(self, key: KeyLike, default: bytes | None = None) -> bytes | None:
            try:
                return self[key]  # type: ignore[index]
            except KeyError:
                return default

        def update(self, items: Any, /) -> None:
            if isinstance(items, Mapping):
                items = items.items()
            for key, value in items:
                self[key] = value  # type: ignore[index]

        def close(self) -> None:
            pass

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *exc: object) -> None:
            self.close()


class ProgramCache(_ProgramCacheBase):  # type: ignore[misc,valid-type]
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
    """

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
        k = _key_bytes(key)
        self._store.put(self._ns, k, _value_bytes(value))
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


