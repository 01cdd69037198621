"""Files inside a sandbox. Reads and writes stream; nothing is held whole in memory unless
asked for (`read`). Mirrors the TS SDK's files.ts."""

from __future__ import annotations

import base64
import io
import os
from typing import IO, Any, Callable, Iterable, Iterator, List, Mapping, Protocol, Union
from urllib.parse import quote

from .client import BLOCK_SIZE, Body, HttpClient, Response
from .dirs import extract_dir, pack_dir
from .errors import WarrenError
from .models import DirUploadResult, FileStat, WriteResult
from .watch import Watch

# str is written as UTF-8; a binary file object or an iterable of bytes is streamed.
WriteData = Union[bytes, bytearray, memoryview, str, IO[bytes], IO[str], Iterable[bytes]]


class BinaryWriter(Protocol):
    """Anything with write(bytes): a binary file, a socket file, a hashing sink."""

    def write(self, data: bytes, /) -> object: ...


class FileReader:
    """A file being downloaded: iterate it for chunks of bytes, or `read(n)` like a binary
    file (so shutil.copyfileobj and tarfile can take it). `size` is the file's size. Close it
    (or use `with`) when stopping early: the connection is dropped then."""

    def __init__(self, response: Response, chunk_size: int) -> None:
        self._response = response
        self._chunks = response.iter_chunks(chunk_size)
        self._pending = b""
        self.size = response.length

    def __iter__(self) -> Iterator[bytes]:
        if self._pending:
            pending, self._pending = self._pending, b""
            yield pending
        yield from self._chunks

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            return b"".join(self)
        while len(self._pending) < n:
            chunk = next(self._chunks, b"")
            if not chunk:
                break
            self._pending += chunk
        data, self._pending = self._pending[:n], self._pending[n:]
        return data

    def close(self) -> None:
        self._chunks.close()
        self._response.close()

    def __enter__(self) -> FileReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Files:
    """`sandbox.files` (also `sandbox.filesystem`). `path` is absolute or relative to the
    user's home; `user` acts as that user (default `user`; `root` may do anything)."""

    def __init__(self, http: HttpClient, sandbox_id: str) -> None:
        self._http = http
        self._base = f"/v1/sandboxes/{quote(sandbox_id, safe='')}/files"

    def read(self, path: str, user: str | None = None) -> bytes:
        """The whole file as bytes. For large files use `read_stream` or `download`."""
        return self._http.request("GET", self._base, query={"path": path, "user": user}).read()

    def read_text(self, path: str, user: str | None = None, encoding: str = "utf-8") -> str:
        return self.read(path, user).decode(encoding)

    def read_stream(self, path: str, user: str | None = None, chunk_size: int = BLOCK_SIZE) -> FileReader:
        """The file as it downloads, for files of any size. A transfer cut short (the
        sandbox died, the file changed size while read) raises NetworkError.

            with sbx.files.read_stream("/work/out.tar") as r:
                for chunk in r:
                    out.write(chunk)
        """
        return FileReader(self._http.request("GET", self._base, query={"path": path, "user": user}), chunk_size)

    def download(self, path: str, dest: BinaryWriter | str | os.PathLike[str], user: str | None = None) -> int:
        """Copies a sandbox file into a binary file object or to a host path (written whole
        or, on failure, removed); returns the number of bytes."""
        with self.read_stream(path, user) as reader:
            if isinstance(dest, (str, os.PathLike)):
                try:
                    with open(dest, "wb") as f:
                        return _copy(reader, f)
                except BaseException:
                    try:
                        os.unlink(dest)
                    except OSError:
                        pass
                    raise
            return _copy(reader, dest)

    def write(self, path: str, data: WriteData, user: str | None = None, mode: int | None = None) -> WriteResult:
        """Writes a file (created or replaced whole, atomically). `data` may be bytes, a str
        (UTF-8), a file object (binary, or text written as UTF-8) or an iterable of bytes;
        file objects and iterables are sent as they are read. `mode` is the permission bits
        (e.g. 0o755).

            sbx.files.write("/work/fix.patch", patch_bytes)
            with open("big.tar", "rb") as f:
                sbx.files.write("/work/big.tar", f)
        """
        headers = {"Content-Type": "application/octet-stream"}
        body: Body
        if isinstance(data, str):
            body = data.encode("utf-8")
        elif isinstance(data, (bytes, bytearray, memoryview)):
            body = data
        elif hasattr(data, "read"):
            body, size = _file_body(data)  # type: ignore[arg-type]
            if size is not None:
                # The declared length lets the daemon refuse a file over the disk limit
                # before any byte is sent.
                headers["Content-Length"] = str(size)
        else:
            body = (_as_bytes(chunk) for chunk in data)
        query = {"path": path, "user": user, "mode": format(mode, "o") if mode is not None else None}
        return WriteResult.from_wire(self._http.json("PUT", self._base, body=body, query=query, headers=headers))

    def stat(self, path: str, user: str | None = None) -> FileStat:
        return FileStat.from_wire(self._http.json("GET", f"{self._base}/stat", query={"path": path, "user": user}))

    def exists(self, path: str, user: str | None = None) -> bool:
        return bool(self._http.json("GET", f"{self._base}/exists", query={"path": path, "user": user})["exists"])

    def remove(self, path: str, user: str | None = None) -> bool:
        """Removes a file or a directory tree; False if it did not exist."""
        return bool(self._http.json("DELETE", self._base, query={"path": path, "user": user})["removed"])

    def mkdir(self, path: str, user: str | None = None) -> FileStat:
        """Like `mkdir -p`."""
        return FileStat.from_wire(self._http.json("POST", f"{self._base}/mkdir", json={"path": path}, query={"user": user}))

    def move(self, src: str, dest: str, user: str | None = None) -> FileStat:
        """Renames (moves) a file or directory; returns the destination's stat."""
        return FileStat.from_wire(self._http.json("POST", f"{self._base}/move", json={"from": src, "to": dest}, query={"user": user}))

    def list(self, path: str, depth: int | None = None, user: str | None = None) -> List[FileStat]:
        """The entries of a directory, `depth` levels down (default 1)."""
        body = self._http.json("GET", f"{self._base}/list", query={"path": path, "depth": depth, "user": user})
        return [FileStat.from_wire(e) for e in body["entries"]]

    def upload_dir(self, local_dir: str | os.PathLike[str], remote_dir: str, user: str | None = None, exists: str | None = None) -> DirUploadResult:
        """Uploads the local directory `local_dir` as `remote_dir`, streamed as tar (modes,
        symlinks and times kept). The sandbox checks every member and extracts into a
        temporary directory first: the upload appears whole, or not at all. An existing
        `remote_dir` is merged into unless `exists` is 'replace' or 'error'.

            sbx.files.upload_dir("./src", "/work/src")
        """
        query = {"path": remote_dir, "user": user, "exists": exists}
        headers = {"Content-Type": "application/x-tar"}
        return DirUploadResult.from_wire(self._http.json("PUT", f"{self._base}/dir", body=pack_dir(local_dir), query=query, headers=headers))

    def download_dir(self, remote_dir: str, local_dir: str | os.PathLike[str], user: str | None = None, exists: str = "merge") -> None:
        """Downloads the sandbox directory `remote_dir` to `local_dir`. The archive is checked
        as it arrives (no absolute names, no `..`, no link leading outside) and extracted
        beside `local_dir` first; nothing is written outside `local_dir`.

            sbx.files.download_dir("/work/out", "./out")
        """
        response = self._http.request("GET", f"{self._base}/dir", query={"path": remote_dir, "user": user})
        with FileReader(response, BLOCK_SIZE) as reader:
            extract_dir(reader, local_dir, exists)

    def write_many(self, entries: Iterable[Mapping[str, Any]], user: str | None = None) -> List[WriteResult]:
        """Writes several files in one call, each created or replaced whole: entries are
        {"path", "data" (bytes or str), "mode" (optional, e.g. 0o755)}. A failure names the
        file; the ones before it stay written. At most 16 MiB in all.

            sbx.files.write_many([{"path": "a.txt", "data": "A"}, {"path": "run.sh", "data": script, "mode": 0o755}])
        """
        files = []
        for e in entries:
            data = e["data"].encode("utf-8") if isinstance(e["data"], str) else bytes(e["data"])
            item: dict[str, Any] = {"path": e["path"], "data": base64.b64encode(data).decode("ascii")}
            if e.get("mode") is not None:
                item["mode"] = e["mode"]
            files.append(item)
        body = self._http.json("POST", f"{self._base}/batch", json={"files": files}, query={"user": user})
        return [WriteResult.from_wire(f) for f in body["files"]]

    def watch(self, path: str, recursive: bool = False, user: str | None = None) -> Watch:
        """Watches a file or directory for changes made inside the sandbox; returns once the
        watch is in place. Iterate it for WatchEvents; close it (or leave its `with` block)
        when done: an open watch keeps the sandbox awake (docs/api.md).

            with sbx.files.watch("/work", recursive=True) as w:
                for event in w:
                    print(event.type, event.path)
        """
        query = {"path": path, "recursive": 1 if recursive else None, "user": user}
        return Watch(self._http.request("GET", f"{self._base}/watch", query=query))


def _copy(reader: FileReader, dest: BinaryWriter) -> int:
    total = 0
    for chunk in reader:
        dest.write(chunk)
        total += len(chunk)
    return total


def _as_bytes(chunk: bytes | str) -> bytes:
    return chunk.encode("utf-8") if isinstance(chunk, str) else chunk


def _file_body(f: IO[Any]) -> tuple[Body, int | None]:
    """A body for a file object. A seekable binary file has a known size and can be read
    again from where it was, so it goes as a replayable factory with a Content-Length;
    anything else (a pipe, a socket, a text file) is streamed once, chunked."""
    if not isinstance(f, io.TextIOBase):
        try:
            start = f.tell()
            end = f.seek(0, io.SEEK_END)
            f.seek(start)
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            pass
        else:
            size = max(0, end - start)

            def again() -> Iterator[bytes]:
                f.seek(start)
                return _read_upto(f, size)

            factory: Callable[[], Iterator[bytes]] = again
            return factory, size
    return _read_upto(f, None), None


def _read_upto(f: IO[Any], size: int | None) -> Iterator[bytes]:
    # Never more than the declared length: a file that grows while sent would otherwise
    # corrupt the request.
    left = size
    while left is None or left > 0:
        chunk = f.read(BLOCK_SIZE if left is None else min(BLOCK_SIZE, left))
        if not chunk:
            if left:
                # Sending less than declared would leave the daemon waiting for the rest.
                raise WarrenError("invalid_argument", f"the file to upload ended {left} bytes short of its size when the upload began (did it shrink?)")
            return
        data = _as_bytes(chunk)
        if left is not None:
            left -= len(data)
        yield data
