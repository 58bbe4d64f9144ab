"""A steppable wall clock for processes under test: libfaketime driven by an offset file.

``Clock(file)`` writes ``+0`` to ``file``; a process started with the clock (``host.popen(..., clock=c)``,
``c.popen(argv)`` or ``c.command(argv)``) preloads libfaketime reading its offset from that file.
``c.jump(3600)`` steps every such process's wall clock (``time.time()``, ``gettimeofday``,
``clock_gettime(CLOCK_REALTIME)``) an hour ahead, like an NTP step; the monotonic clock never moves
(``FAKETIME_DONT_FAKE_MONOTONIC=1``), so asyncio/uvloop timers keep their pace.

Settings, and why (libfaketime 0.9.10, Debian 12):

* ``FAKETIME_CACHE_DURATION=0``: the offset file is re-read when the real second changes, so a jump shows
  within 1 s at the cost of one read a second. ``FAKETIME_NO_CACHE=1`` reads the file on every call
  (about 5 us per ``time.time()`` instead of 0.15 us).
* ``NO_FAKE_STAT=1``: ``stat`` reports file timestamps as stored, as after a real clock step.
* ``FAKETIME``/``FAKETIME_NO_CACHE`` from the caller's environment are removed (``FAKETIME`` would be the
  fallback when the file cannot be read); the file always holds a valid ``+N``/``-N`` (libfaketime exits
  on a line it cannot parse) and is replaced atomically (rename).
* A small preloaded fix (:data:`FIX_SOURCE`, built once with ``gcc`` into the temp dir) sits before
  libfaketime: with ``FAKETIME_DONT_FAKE_MONOTONIC`` set, libfaketime 0.9.10 turns
  ``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`` into a negative time and the call fails with EINVAL
  (wolfcw/libfaketime#426): Python >= 3.11's ``time.sleep`` raises ``OSError: [Errno 22]``. The fix sends
  every clock but CLOCK_REALTIME straight to the kernel. Without ``gcc`` the clock works, minus
  ``time.sleep`` in Python (a warning is logged).
* libfaketime makes ``/dev/shm/faketime_shm_<pid>`` and ``sem.faketime_sem_<pid>`` in each process it is
  preloaded into first, removed at a clean exit only; :meth:`Clock.close` removes those of the processes
  started through it that have died (kill -9 leaves them).

Checked with uvloop (loop timers, ``call_later``), threads (``threading.Event.wait``, a thread pool),
``sqlite3``/aiosqlite and child processes (they inherit the clock): all keep working across jumps of
+-1 h. Not faked: Go binaries (no libc), static binaries, set-uid programs.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

LIBFAKETIME_PATHS = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)

FIX_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* libfaketime 0.9.10 with FAKETIME_DONT_FAKE_MONOTONIC breaks absolute CLOCK_MONOTONIC sleeps (EINVAL):
   every clock but CLOCK_REALTIME goes to the kernel untouched; CLOCK_REALTIME to libfaketime. */
int clock_nanosleep(clockid_t clock_id, int flags, const struct timespec *req, struct timespec *rem)
{
    static int (*next)(clockid_t, int, const struct timespec *, struct timespec *);
    if (clock_id == CLOCK_REALTIME) {
        if (next == NULL)
            next = dlsym(RTLD_NEXT, "clock_nanosleep");
        if (next != NULL)
            return next(clock_id, flags, req, rem);
    }
    if (syscall(SYS_clock_nanosleep, clock_id, flags, req, rem) == -1)
        return errno;
    return 0;
}
"""


def find_libfaketime() -> Path:
    """The path of ``libfaketime.so.1``.

    Raises:
        FileNotFoundError: libfaketime is not installed (Debian: ``apt-get install libfaketime``).
    """
    for candidate in LIBFAKETIME_PATHS:
        if Path(candidate).exists():
            return Path(candidate)
    listed = subprocess.run(["dpkg", "-L", "libfaketime"], capture_output=True, text=True, check=False)
    for line in listed.stdout.splitlines():
        if line.endswith("/libfaketime.so.1"):
            return Path(line)
    raise FileNotFoundError("libfaketime.so.1 not found: apt-get install libfaketime")


def sleep_fix_library() -> Path | None:
    """The preloadable fix of libfaketime's monotonic ``clock_nanosleep`` (built on first use), or None.

    Built with ``gcc`` into ``<tempdir>/otc-faketime-fix-<hash>.so`` (atomically: concurrent builders
    cannot hand out a half-written file); None when it cannot be built.
    """
    digest = hashlib.sha256(FIX_SOURCE.encode()).hexdigest()[:12]
    target = Path(tempfile.gettempdir()) / f"otc-faketime-fix-{digest}.so"
    if target.exists():
        return target
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        log.warning("no C compiler: Python's time.sleep fails under this clock (libfaketime#426)")
        return None
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    built = subprocess.run(
        [gcc, "-shared", "-fPIC", "-O2", "-o", str(partial), "-x", "c", "-", "-ldl"],
        input=FIX_SOURCE,
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode:
        log.warning("cannot build the libfaketime sleep fix: %s", built.stderr.strip())
        partial.unlink(missing_ok=True)
        return None
    os.replace(partial, target)
    return target


def _format_offset(seconds: float) -> str:
    # libfaketime reads "+N"/"-N" with atof; no m/h/d/y letter may appear (they multiply)
    return f"{seconds:+.6f}"


class Clock:
    """One host's wall clock: an offset file read by the libfaketime of every process started with it.

    Args:
        file: the offset file (created or overwritten with ``offset``).
        offset: the initial offset, in seconds.

    Raises:
        FileNotFoundError: libfaketime is not installed.
    """

    def __init__(self, file: str | os.PathLike[str], offset: float = 0.0) -> None:
        self.path = Path(file)
        self.library = find_libfaketime()
        self.fix = sleep_fix_library()
        self._offset = 0.0
        self._pids: set[int] = set()
        self.set(offset)

    @property
    def offset(self) -> float:
        """The current offset of the faked wall clock from the real one, in seconds."""
        return self._offset

    def set(self, offset: float) -> None:
        """Make the faked wall clock run ``offset`` seconds from the real one (seen within ~1 s)."""
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        partial.write_text(_format_offset(offset) + "\n")
        partial.chmod(0o644)  # processes running as another user (postgres) read it too
        os.replace(partial, self.path)
        self._offset = float(offset)
        log.info("clock %s: offset %+.3f s", self.path, self._offset)

    def jump(self, seconds: float) -> float:
        """Step the faked wall clock by ``seconds`` (negative: backwards); the new offset."""
        self.set(self._offset + seconds)
        return self._offset

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) plus the variables of this clock."""
        env = dict(os.environ if base is None else base)
        for key in ("FAKETIME", "FAKETIME_NO_CACHE"):
            env.pop(key, None)
        preload = env.get("LD_PRELOAD")
        env.update(self.variables())
        if preload:
            env["LD_PRELOAD"] = f"{env['LD_PRELOAD']} {preload}"
        return env

    def variables(self) -> dict[str, str]:
        """Just the variables this clock sets (``LD_PRELOAD`` lists the fix first, then libfaketime)."""
        preload = " ".join(str(p) for p in (self.fix, self.library) if p is not None)
        return {
            "LD_PRELOAD": preload,
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_CACHE_DURATION": "0",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "NO_FAKE_STAT": "1",
        }

    def command(self, argv: Sequence[str | os.PathLike[str]]) -> list[str]:
        """``argv`` wrapped in ``env VAR=... argv``: only the program itself (not ``ip``, not a shell)
        loads libfaketime, so its pid is the one :meth:`track` records."""
        unset = [arg for key in ("FAKETIME", "FAKETIME_NO_CACHE") for arg in ("-u", key)]
        assignments = [f"{key}={value}" for key, value in self.variables().items()]
        return ["env", *unset, *assignments, *(os.fspath(a) for a in argv)]

    def popen(self, argv: Sequence[str | os.PathLike[str]], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` on this clock in the current namespace (``kwargs``: as for ``subprocess.Popen``)."""
        proc = subprocess.Popen(self.command(argv), **kwargs)
        self.track(proc.pid)
        return proc

    def track(self, pid: int) -> None:
        """Remember ``pid`` so :meth:`close` removes libfaketime's shared memory it may leave behind."""
        self._pids.add(pid)

    def close(self) -> None:
        """Remove the offset file and the ``/dev/shm`` leftovers of dead processes started with the clock."""
        for pid in list(self._pids):
            if _alive(pid):
                continue
            for name in (f"faketime_shm_{pid}", f"sem.faketime_sem_{pid}"):
                with contextlib.suppress(FileNotFoundError):
                    (Path("/dev/shm") / name).unlink()
            self._pids.discard(pid)
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> Clock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
