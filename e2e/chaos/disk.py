"""A small disk for the fault runner: a size-limited tmpfs that can be filled to the last byte.

``SmallDisk(path, size_mb)`` mounts a tmpfs of ``size_mb`` MiB at ``path`` (root only); :meth:`fill`
writes a filler file until the file system says ENOSPC (or until ``leave`` bytes remain),
:meth:`free` deletes it, :meth:`close` unmounts (lazily when busy; also registered with :mod:`atexit`).
The mount's source is named ``otc-smalldisk-<pid>``: :func:`cleanup_stale` (called by every new
``SmallDisk``) unmounts those whose process is gone, left by a run killed with SIGKILL.

Mount namespaces: ``/`` is a private mount here, so a process started with ``ip netns exec`` (which makes
its own mount namespace) sees the disk only if it was mounted *before* the process started; filling and
freeing act on the same file system and are seen at once. After :meth:`close` such a process keeps its
copy of the mount until it exits (the root namespace shows nothing).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import logging
import os
import re
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)

FILLER = ".otc-filler"
SOURCE = "otc-smalldisk"
CHUNKS = (1 << 20, 1 << 16, 1 << 12, 1)  # write sizes tried, largest first


class DiskError(RuntimeError):
    """mount or umount failed; the message holds the command's output."""


def _unescape(field: str) -> str:
    """A /proc/mounts field with its octal escapes (``\\040`` for a space) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def cleanup_stale() -> list[str]:
    """Unmount (lazily) the small disks whose creating process is gone.

    Returns:
        The mount points unmounted.
    """
    removed = []
    for line in Path("/proc/mounts").read_text().splitlines():
        source, target, *_ = line.split()
        match = re.fullmatch(rf"{SOURCE}-(\d+)", source)
        if match is None or Path(f"/proc/{match.group(1)}").exists():
            continue
        target = _unescape(target)
        log.info("unmounting stale small disk %s", target)
        subprocess.run(["umount", "-l", target], capture_output=True, check=False)
        removed.append(target)
    return removed


class SmallDisk:
    """A tmpfs of ``size_mb`` MiB mounted at ``path``; a context manager.

    Args:
        path: the mount point (created when missing, removed again by :meth:`close`).
        size_mb: the size, in MiB.
        mode: the permissions of the file system's root.

    Raises:
        DiskError: the mount failed (not root, or ``path`` is busy).
    """

    def __init__(self, path: str | os.PathLike[str], size_mb: int, *, mode: int = 0o755) -> None:
        cleanup_stale()
        self.path = Path(path).absolute()
        self.size_bytes = int(size_mb) << 20
        self._created = not self.path.exists()
        self.path.mkdir(parents=True, exist_ok=True)
        options = f"size={self.size_bytes},mode={mode:o}"
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, f"{SOURCE}-{os.getpid()}", str(self.path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            if self._created:
                self.path.rmdir()
            raise DiskError(f"mount tmpfs at {self.path} failed: {done.stderr.strip()}")
        self._mounted = True
        atexit.register(self.close)
        log.info("tmpfs of %d MiB at %s", size_mb, self.path)

    @property
    def filler(self) -> Path:
        """The file :meth:`fill` writes."""
        return self.path / FILLER

    def available(self) -> int:
        """The bytes still free for writing (``statvfs``'s ``f_bavail``)."""
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int = 0) -> int:
        """Write to the filler file until the disk is full, or until only ``leave`` bytes remain free.

        With ``leave=0`` the writes go on, in smaller and smaller pieces, until ENOSPC: nothing is left
        (a new file can still be made, but not given a byte). ``leave`` is rounded down to whole pages.

        Returns:
            The bytes written by this call.

        Raises:
            OSError: a write failed with anything but ENOSPC.
        """
        written = 0
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for chunk in CHUNKS:
                block = b"\0" * chunk
                while True:
                    room = self.available() - leave
                    if leave and room < chunk:
                        break
                    try:
                        written += os.write(fd, block)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        finally:
            os.close(fd)
        log.info("%s filled: %d bytes written, %d free", self.path, written, self.available())
        return written

    def free(self) -> None:
        """Delete the filler file (the disk has its room again)."""
        self.filler.unlink(missing_ok=True)

    def close(self) -> None:
        """Unmount (lazily when busy) and remove the mount point if this object made it (idempotent)."""
        if not getattr(self, "_mounted", False):
            return
        self._mounted = False
        atexit.unregister(self.close)
        done = subprocess.run(["umount", str(self.path)], capture_output=True, text=True, check=False)
        if done.returncode:
            log.warning("umount %s: %s; unmounting lazily", self.path, done.stderr.strip())
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True, check=False)
        if self._created:
            with contextlib.suppress(OSError):
                self.path.rmdir()
        log.info("tmpfs at %s unmounted", self.path)

    def __enter__(self) -> SmallDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
