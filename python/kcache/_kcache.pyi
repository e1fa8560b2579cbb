"""Types of kcache's C extension (python/kcache/_kcache.c); use the kcache package."""

from typing import Any

library_version: str
KIND_CUBIN: int
KIND_PTX: int
KIND_LTOIR: int
KIND_DATA: int
NAMESPACE_MAX: int
ENOTFOUND: int
EINVAL: int
ECOMPILE: int
COMPILE_NO_CACHE: int
COMPILE_REFRESH: int

class Error(Exception):
    status: int
    status_name: str

class CompileError(Error):
    log: str

def parse_max_size(text: str, /) -> int: ...
def key_caller(ns: str, key: bytes, /) -> str: ...
def settings(path: str | None = ..., /) -> dict[str, str]: ...

class Store:
    def __init__(
        self,
        path: str | None,
        max_size: int = ...,
        read_only: bool = ...,
        no_create: bool = ...,
        remote: str | None = ...,
        use_remote: bool = ...,
    ) -> None: ...
    @property
    def path(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def get(self, ns: str, key: bytes, touch: bool = ..., /) -> bytes | None: ...
    def put(self, ns: str, key: bytes, data: bytes, /) -> None: ...
    def delete(self, ns: str, key: bytes, /) -> bool: ...
    def clear_namespace(self, ns: str, /) -> int: ...
    def trim_namespace(self, ns: str, max_bytes: int, /) -> int: ...
    def namespace_stats(self, ns: str, /) -> dict[str, int]: ...
    def stats(self) -> dict[str, Any]: ...
    def prune(
        self,
        max_size: int = ...,
        max_entries: int = ...,
        accessed_before_ms: int = ...,
        arch: str | None = ...,
        kind: int = ...,
        dry_run: bool = ...,
    ) -> dict[str, int]: ...
    def verify(self) -> dict[str, Any]: ...
    def export_bundle(self, path: str, arch: str | None = ..., kind: int = ...) -> dict[str, int]: ...
    def import_bundle(self, path: str, dry_run: bool = ...) -> dict[str, int]: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...

class Compiler:
    def __init__(
        self, store_path: str | None = ..., no_store: bool = ..., toolkit_root: str | None = ...
    ) -> None: ...
    def compile(
        self,
        source: str | bytes | None = ...,
        source_path: str | None = ...,
        name: str | None = ...,
        arch: str | None = ...,
        options: list[str] | None = ...,
        headers: dict[str, str | bytes] | None = ...,
        name_expressions: list[str] | None = ...,
        output: int = ...,
        flags: int = ...,
    ) -> dict[str, Any]: ...
