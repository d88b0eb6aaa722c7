"""Lab test equipment: a bytecode cache for the Python modules a lab node imports from a zip.

Ansible runs every module on a node from a zip archive it sends with the task (AnsiballZ), and
Python's zipimport compiles each of the archive's files from source on every run: the bytecode
cache a module on disk gets (``__pycache__``) does not exist for a zip. On the lab's two cores that
compile is about a third of every task's time on a node (``import ansible.module_utils.basic``:
133 ms from the zip, 75 ms with its bytecode; docs/PERFORMANCE.md). The lab node's Python
keeps the compiled code here instead, by the source's sha256, so the second run of any module
loads its bytecode as it would from disk.

Nothing else changes: the same source gives the same code (the key is the source itself, with
the interpreter's bytecode tag and optimization level), the code's file names are the archive's
of this run (as a fresh compile gives them), and any failure to read or write the cache falls
back to the compile. Real nodes have no such cache; a product role never relies on it. Loaded at
every Python start by ``gx10-lab-zipimport-cache.pth`` beside it; ``GX10_LAB_ZIPIMPORT_CACHE``
moves the directory (the unit tests).
"""

from __future__ import annotations

import os
import zipimport

CACHE = os.environ.get("GX10_LAB_ZIPIMPORT_CACHE", "/var/cache/gx10-lab/zipimport")
_compile_source = zipimport._compile_source  # type: ignore[attr-defined]


def _cached_compile_source(pathname: str, source: bytes) -> object:
    """zipimport's compile step, through the cache. The imports are here: a Python start that
    never imports from a zip (every other program on the node) pays for none of them."""
    import _imp  # noqa: PLC0415
    import hashlib  # noqa: PLC0415
    import marshal  # noqa: PLC0415
    import sys  # noqa: PLC0415

    tag = f"{sys.implementation.cache_tag}-O{sys.flags.optimize}"
    path = os.path.join(CACHE, tag, hashlib.sha256(source).hexdigest())
    try:
        with open(path, "rb") as cached:
            code = marshal.loads(cached.read())
    except (OSError, ValueError, EOFError, TypeError):
        code = _compile_source(pathname, source)
        try:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            partial = f"{path}.{os.getpid()}"
            with open(partial, "wb") as out:
                out.write(marshal.dumps(code))
            os.replace(partial, path)
        except OSError:
            pass
        return code
    _imp._fix_co_filename(code, pathname)  # type: ignore[attr-defined]  # what importlib does for a .pyc
    return code


zipimport._compile_source = _cached_compile_source  # type: ignore[attr-defined]
