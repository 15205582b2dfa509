"""numba's compiled kernels: a writable folder for their on-disk cache, and serial and parallel twins.

Parallel compilation dominated a fresh clone's first run, and most ranks get one core, hence
`serial_or_parallel`; not every kernel is as fast serially (dropout's are not): measure first (figures:
docs/training.md, "The quick start's first run"). numba is imported where used.
"""
from __future__ import annotations

import logging
import os
import stat
import sys
import tempfile
import types
from typing import Any, Callable

__all__ = ["ensure_numba_cache_dir", "serial_or_parallel", "read_only"]

log = logging.getLogger(__name__)


def serial_or_parallel(func: Callable[..., Any]) -> Callable[..., Any]:
    """Compile `func` (its loops `prange`) serially, called where numba runs one thread, and in parallel.

    The parallel twin gets its own name: numba's on-disk cache keys files by name."""
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


def read_only(array: Any) -> Any:
    """A read-only view of a numpy array. numba compiles a variant per mix of writable and read-only arguments, so
    callers hand a kernel read-only views whether their arrays are mapped from a file or in memory: one variant."""
    view = array.view()
    view.flags.writeable = False
    return view


def _writable_folder(path: str) -> bool:
    """numba's own test (`_CacheLocator.ensure_cache_path`), so it also answers for root and read-only mounts."""
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def _private_folder(path: str) -> bool:
    """A writable folder of this user's own: not a link, nor one another user planted in a shared /tmp."""
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
    """Give numba's on-disk cache a writable folder; every module with `@njit(cache=True)` calls it first.

    Where none of numba's folders is writable (a read-only install) numba refuses to define the function, so
    NUMBA_CACHE_DIR is then set to a private temporary folder, and returned (None where nothing was changed);
    LaunchError, naming how to set it, where no folder at all is writable.
    """
    env = os.environ if env is None else env  # type: ignore[assignment]
    given = env.get("NUMBA_CACHE_DIR", "")
    tried = [given] if given else []
    if user_dir is None:  # numba's user-wide cache folder, the one it tries after __pycache__
        user_dir = (os.path.expanduser("~/Library/Caches/numba") if sys.platform == "darwin" else
                    os.path.join(env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "numba"))
    tried += [os.path.join(package_dir, "__pycache__"), user_dir]
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
