"""Output folders: what vgcsim writes, it marks, and it never replaces what it did not write.

Every folder a command writes (a result table, a scenario, a report, a validation, the demo)
carries a marker file, :data:`MARKER` (``.vgcsim.json``), naming the command and listing the
files it wrote. A trace folder's ``header.json`` (kind ``vgcsim-trace``) is its marker.

The rules (:func:`prepare_output`):

* a missing or empty folder is created and written;
* a non-empty folder without a marker (and that is not a trace) is refused: vgcsim did not
  write it, so nothing in it is vgcsim's to replace;
* a folder holding an earlier vgcsim output is refused unless ``overwrite``; with it, only
  files the marker lists (or new names) are written, nothing is deleted, and a file about to
  be written that the marker does not list is refused (a report is the exception: it
  replaces the whole of an earlier report, removing the files of it that it does not write
  again, :meth:`OutputDir.commit_changed`);
* ``overwrite`` replaces only an output of the same kind (:func:`output_kind`: any result
  table, or the same command's output): another command's files would stay beside the new
  ones.

:func:`atomic_write` is the one way files are written: a temporary file in the same folder,
fsync, the permissions the umask gives a new file (0644 under the usual umask 022, not the
0600 of a temporary file), then a rename, so that a full disk or a crash never leaves a
half-written file under the final name.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vgcsim.core.errors import VgcsimError

__all__ = [
    "MARKER",
    "MARKER_KIND",
    "OutputDir",
    "OutputError",
    "WriteError",
    "atomic_write",
    "atomic_write_text",
    "check_output",
    "check_output_file",
    "fsync_dir",
    "is_trace_dir",
    "prepare_output",
    "read_marker",
    "write_json_output",
]

MARKER = ".vgcsim.json"
MARKER_KIND = "vgcsim-output"
#: The header file and kind that mark a trace folder (kept equal to the trace schema's).
TRACE_HEADER = "header.json"
TRACE_KIND = "vgcsim-trace"


class OutputError(VgcsimError):
    """An output path vgcsim must not write (not a folder, not vgcsim's, or already written)."""


class WriteError(OutputError, OSError):
    """A file could not be written: no permission, a read-only file system, a file where a
    folder should be, a full disk. Also an :class:`OSError` (``errno``, ``strerror`` and
    ``filename`` of the failure), so code that handles failed writes keeps doing so; its
    message is one line naming the file."""

    def __init__(self, message: str, errno: int | None, strerror: str | None, filename: str):
        OSError.__init__(self, errno, strerror, filename)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def fsync_dir(path: Path) -> None:
    """fsync a folder (its entries, after a rename); a no-op where folders cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | Path, write: Callable[[str], Any]) -> Path:
    """Write ``path`` through ``write(tmp_path)`` atomically; return ``path``.

    The temporary file is removed when ``write`` (or the disk) fails, so the final name holds
    either the previous file or the complete new one. The file gets mode 0666 minus the umask.
    """
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise write_error(exc, path) from exc
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, WriteError):
            raise write_error(exc, path) from exc
        raise
    fsync_dir(path.parent)
    return path


#: errno values of a full disk or an exhausted quota.
DISK_FULL = frozenset(e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if e is not None)


def write_error(exc: OSError, path: str | Path) -> WriteError:
    """The one-line error of a failed write of ``path`` (no permission, read-only file
    system, a file where a folder should be, a full disk): names the file and what to do.
    """
    path = Path(path)
    why = exc.strerror or str(exc)
    if exc.errno in DISK_FULL:
        msg = f"{why} writing {path}; free space and run it again"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        msg = f"cannot write {path}: {why} (choose a folder you can write to with -o)"
    elif exc.errno in (errno.EEXIST, errno.ENOTDIR):
        msg = f"cannot write {path}: a folder on its path is a file"
    else:
        msg = f"cannot write {path}: {why}"
    return WriteError(msg, exc.errno, exc.strerror, str(exc.filename or path))


def atomic_write_text(path: str | Path, text: str) -> Path:
    """:func:`atomic_write` of UTF-8 text."""
    return atomic_write(path, lambda p: Path(p).write_text(text, encoding="utf-8"))


def read_marker(folder: str | Path) -> dict[str, Any] | None:
    """The marker of ``folder`` as a dict, or None when it has none (or an unreadable one)."""
    p = Path(folder) / MARKER
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("kind") != MARKER_KIND:
        return None
    files = data.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    return data


def is_trace_dir(folder: str | Path) -> bool:
    """True when ``folder`` holds a vgcsim trace header (its marker)."""
    p = Path(folder) / TRACE_HEADER
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("kind") == TRACE_KIND


@dataclass
class OutputDir:
    """A folder prepared by :func:`prepare_output`; :meth:`commit` writes its marker."""

    path: Path
    command: str
    previous: tuple[str, ...] = ()
    planned: tuple[str, ...] = ()
    written: list[str] = field(default_factory=list)

    def file(self, name: str) -> Path:
        """The path of ``name`` (relative, may hold a subfolder), recorded as written."""
        self._check(name)
        if name not in self.written:
            self.written.append(name)
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def _check(self, name: str) -> None:
        target = self.path / name
        known = (*self.previous, *self.planned, *self.written)
        if target.exists() and name not in known:
            raise OutputError(
                f"{target} exists and was not written by vgcsim; not replacing it "
                "(choose another -o)"
            )

    def write(self, name: str, write: Callable[[str], Any]) -> Path:
        """:func:`atomic_write` of ``name`` inside the folder."""
        return atomic_write(self.file(name), write)

    def write_text(self, name: str, text: str) -> Path:
        return atomic_write_text(self.file(name), text)

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """Every file below the folder (but the marker) → (mtime_ns, size), for
        :meth:`commit_changed` after a writer that names its own files."""
        out = {}
        for f in sorted(self.path.rglob("*")):
            if f.is_file() and f.name != MARKER:
                st = f.stat()
                out[f.relative_to(self.path).as_posix()] = (st.st_mtime_ns, st.st_size)
        return out

    def commit_changed(self, before: dict[str, tuple[int, int]], *, replace: bool = False) -> Path:
        """:meth:`commit` listing the files new or changed since ``before``. With ``replace``
        (an output derived whole from its inputs, such as a report) the files an earlier
        run listed that this one did not write again are removed first: they describe other
        inputs. Only files a marker listed are removed, never a user's."""
        after = self.snapshot()
        changed = [name for name, stat in after.items() if before.get(name) != stat]
        if replace:
            stale = [f for f in self.previous if f not in changed and (self.path / f).is_file()]
            for name in stale:
                (self.path / name).unlink()
            self.previous = tuple(f for f in self.previous if f not in stale)
        return self.commit(changed)

    def commit(self, extra: Iterable[str] = ()) -> Path:
        """Write the marker listing every file written (now or by an earlier vgcsim run) and
        every file planned (so that an interrupted run's files stay vgcsim's)."""
        for name in extra:
            if name not in self.written:
                self.written.append(name)
        kept = [f for f in self.previous if (self.path / f).exists()]
        names = set(self.written) | set(self.planned) | set(kept)
        from vgcsim.core.version import __version__

        marker = {
            "kind": MARKER_KIND,
            "command": self.command,
            "files": sorted(names),
            "vgcsim": __version__,
        }
        return atomic_write_text(self.path / MARKER, json.dumps(marker, indent=2) + "\n")


#: Commands whose output is one result table (and its extras): any of them may replace another's.
_RESULT_WRITERS = frozenset({"predict", "simulate", "sweep", "scenario", "save"})


def output_kind(command: str) -> str:
    """What an output folder holds, from the command a marker names (``"vgcsim predict"``,
    ``"vgcsim.api.save"``, ``"vgcsim api.report"``): ``"results"`` for a result table, else
    the command's name. ``--overwrite`` replaces only an output of the same kind."""
    words = command.replace("vgcsim.api.", "vgcsim ").replace("api.", "").split()
    name = words[-1] if words else ""
    name = {"save_validation": "validate"}.get(name, name)  # the API's name of validate -o
    return "results" if name in _RESULT_WRITERS else name


def check_output(
    folder: str | Path,
    command: str,
    *,
    overwrite: bool = False,
    files: Iterable[str] = (),
    legacy: Callable[[Path], Iterable[str] | None] | None = None,
) -> tuple[str, ...]:
    """Refuse (:class:`OutputError`, one line naming the folder) an output folder ``command``
    may not write (see the module doc); create nothing. Returns the files an earlier vgcsim
    output there lists. Commands call it before their work, :func:`prepare_output` again
    when they write. ``legacy(folder)`` recognises an output written before markers existed
    (the files vgcsim wrote there, or None)."""
    out = Path(folder)
    if out.exists() and not out.is_dir():
        raise OutputError(f"cannot write {command} output to {out}: it is not a folder")
    previous: tuple[str, ...] = ()
    if out.is_dir() and any(out.iterdir()):
        marker = read_marker(out)
        known = legacy(out) if marker is None and legacy is not None else None
        if marker is None and known is not None:
            marker = {"command": "an earlier vgcsim", "files": sorted(known)}
        if marker is None:
            if is_trace_dir(out):
                raise OutputError(
                    f"{out} holds a vgcsim trace; write {command} output to another folder"
                )
            raise OutputError(
                f"{out} is not empty and was not written by vgcsim; not writing {command} "
                "output there (choose a new or empty folder)"
            )
        if not overwrite:
            raise OutputError(
                f"{out} already holds {marker.get('command', 'vgcsim')} output; pass "
                "--overwrite to replace its files, or choose another folder"
            )
        earlier = str(marker.get("command", ""))
        if known is None and earlier and output_kind(earlier) != output_kind(command):
            raise OutputError(
                f"{out} holds {earlier} output, which {command} does not replace (its files "
                "would stay beside the new ones); choose another folder"
            )
        previous = tuple(marker["files"])
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(f"cannot write {command} output to {out}: {parent} is a file")
            break
    probe = OutputDir(out, command, previous)
    for name in files:
        probe._check(name)
    return previous


def prepare_output(
    folder: str | Path,
    command: str,
    *,
    overwrite: bool = False,
    files: Iterable[str] = (),
    legacy: Callable[[Path], Iterable[str] | None] | None = None,
) -> OutputDir:
    """:func:`check_output`, then create the folder and mark it at once (listing ``files``, so
    that a run stopped half-way leaves a folder vgcsim may write again); write through the
    returned :class:`OutputDir` and :meth:`OutputDir.commit` the final marker at the end."""
    files = tuple(files)
    previous = check_output(folder, command, overwrite=overwrite, files=files, legacy=legacy)
    out = Path(folder)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot write {command} output to {out}: {exc.strerror}") from None
    result = OutputDir(out, command, previous, files)
    result.commit()
    return result


#: The key a JSON file written with ``-o FILE`` carries: its marker (the command that wrote it).
WRITTEN_BY = "written_by"


def _json_written_by_vgcsim(path: Path) -> bool:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and str(data.get(WRITTEN_BY, "")).startswith("vgcsim")


def check_output_file(path: str | Path, command: str, *, overwrite: bool = False) -> None:
    """The single-file form of :func:`check_output` for a JSON file written with ``-o FILE``:
    a folder, or a file vgcsim did not write, is refused; a file vgcsim wrote is replaced only
    with ``overwrite``."""
    out = Path(path)
    if out.is_dir():
        raise OutputError(f"cannot write {command} output to {out}: it is a folder")
    if out.exists():
        if not _json_written_by_vgcsim(out):
            raise OutputError(f"{out} exists and was not written by vgcsim; not replacing it")
        if not overwrite:
            raise OutputError(
                f"{out} already holds vgcsim output; pass --overwrite to replace it, or choose "
                "another -o"
            )


def write_json_output(
    path: str | Path, command: str, data: dict[str, Any], *, overwrite: bool = False
) -> Path:
    """Write ``data`` (plus ``written_by: command``, the file's marker) as the JSON file
    ``path``, atomically, after :func:`check_output_file`."""
    check_output_file(path, command, overwrite=overwrite)
    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot write {command} output to {out}: {exc.strerror}") from None
    text = json.dumps({WRITTEN_BY: command, **data}, indent=2, allow_nan=False) + "\n"
    return atomic_write_text(out, text)
