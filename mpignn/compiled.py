"""numba's compiled kernels: a writable folder for their on-disk cache, and serial and parallel twins.

Every module with an `@njit(cache=True)` first calls `ensure_numba_cache_dir` (a read-only install would
otherwise fail at import). numba's parallel compilation (`parallel=True`) is slow: it dominated a fresh clone's
first run, where every kernel compiles once, and most runs give each MPI rank one core, where a serial kernel can
do the same work without the threading layer: `serial_or_parallel` compiles the one the thread count needs. Not
every kernel runs as fast serially (the in-place dropout kernels did not, and stay parallel): measure before
using it. Figures: docs/training.md ("The quick start's first run"). Stdlib only at import (numba is imported
where it is used).
"""
from __future__ import annotations

import logging
import os
import stat
import sys
import tempfile
import types
from typing import Any, Callable, Mapping

__all__ = ["ensure_numba_cache_dir", "serial_or_parallel"]

log = logging.getLogger(__name__)


def serial_or_parallel(func: Callable[..., Any]) -> Callable[..., Any]:
    """`func` (its loops `prange`) compiled twice: serially, called where numba runs one thread (an MPI rank per
    core, the usual layout: the serial kernel compiles in a fraction of the time), and in parallel otherwise.
    The parallel twin gets its own name, so numba's on-disk cache, which keys files by name, keeps the two
    apart. Call `ensure_numba_cache_dir` first, as for any cached kernel."""
    import numba

    twin = types.FunctionType(func.__code__, func.__globals__, func.__name__ + "_parallel", func.__defaults__,
                              func.__closure__)
    twin.__qualname__ = func.__qualname__ + "_parallel"
    twin.__doc__ = func.__doc__
    serial = numba.njit(cache=True, nogil=True)(func)
    parallel = numba.njit(cache=True, nogil=True, parallel=True)(twin)

    def kernel(*args: Any) -> Any:
        return (serial if numba.get_num_threads() == 1 else parallel)(*args)

    kernel.__name__, kernel.__qualname__, kernel.__doc__ = func.__name__, func.__qualname__, func.__doc__
    kernel.serial, kernel.parallel = serial, parallel  # type: ignore[attr-defined]
    return kernel


def _writable_folder(path: str) -> bool:
    """Whether `path` is (or can be made) a folder a file can be created in: numba's own test
    (`_CacheLocator.ensure_cache_path`), so it also answers for root and read-only mounts."""
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def _numba_user_dir(env: Mapping[str, str]) -> str:
    """numba's user-wide cache folder (its appdirs `user_cache_dir`, "numba"): the one it tries after __pycache__."""
    if sys.platform == "darwin":
        return os.path.expanduser("~/Library/Caches/numba")
    return os.path.join(env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "numba")


def _private_folder(path: str) -> bool:
    """`path` is a writable folder of this user's own (not a link, nor a folder another user made in a shared
    temporary folder), readable by this user only."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
        if not (stat.S_ISDIR(info.st_mode) and info.st_uid == _uid()):
            return False
        os.chmod(path, 0o700)
    except OSError:
        return False
    return _writable_folder(path)


def _uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else 0  # no getuid: Windows


def ensure_numba_cache_dir(package_dir: str, env: dict[str, str] | None = None, *, temp_dir: str | None = None,
                           user_dir: str | None = None) -> str | None:
    """Give numba's on-disk cache (`@njit(cache=True)`) a writable folder before any such function is defined.

    numba caches in NUMBA_CACHE_DIR when set, else in __pycache__ beside the source, else in its user-wide
    folder (~/.cache/numba); where none of them is writable (a read-only install without a writable home) it
    refuses to define the function. Then NUMBA_CACHE_DIR is set to a per-user temporary folder,
    `tempfile.gettempdir()`/mpignn-numba-<uid>, with one log line, and numba's config is reloaded where numba
    is imported already. Every module with an `@njit(cache=True)` calls it first (one writable folder answers
    for the whole install; later calls find NUMBA_CACHE_DIR writable and change nothing).

    Args:
        package_dir: the folder of the module whose functions numba caches (its __pycache__ is tried).
        env: the environment to read and write (default `os.environ`); temp_dir, user_dir: instead of
            `tempfile.gettempdir()` and numba's user-wide folder (tests).
    Returns:
        The folder NUMBA_CACHE_DIR now names, or None where nothing was changed.
    Raises:
        LaunchError: no folder at all is writable, with how to set NUMBA_CACHE_DIR.
    """
    env = os.environ if env is None else env  # type: ignore[assignment]
    given = env.get("NUMBA_CACHE_DIR", "")
    tried = [given] if given else []
    tried += [os.path.join(package_dir, "__pycache__"), user_dir or _numba_user_dir(env)]
    if any(_writable_folder(path) for path in tried):
        return None
    fallback = os.path.join(temp_dir or tempfile.gettempdir(), f"mpignn-numba-{_uid()}")
    if not _private_folder(fallback):
        from mpignn.errors import LaunchError

        raise LaunchError(f"expected a writable folder for numba's compiled kernels; got none of {', '.join(tried)} "
                          f"and {fallback}. HINT: export NUMBA_CACHE_DIR=/a/writable/folder (e.g. on a node-local "
                          "disk) before starting the job")
    env["NUMBA_CACHE_DIR"] = fallback
    numba = sys.modules.get("numba")  # imported already: it read its variables then (not imported here)
    if numba is not None and env is os.environ:
        numba.config.reload_config()
    was = f" (it was {given}: not writable)" if given else ""
    log.warning("numba's cache folders are not writable: NUMBA_CACHE_DIR=%s for this process%s; "
                "set NUMBA_CACHE_DIR to keep compiled kernels elsewhere", fallback, was)
    return fallback
