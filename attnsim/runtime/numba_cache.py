"""Load attnsim's cached kernels safely, and without first setting up Numba's compiler.

Before Numba reads a function from its on-disk cache it refreshes the whole
compiler context: it imports and installs every lowering and typing registry
(0.15-0.4 s on the first load of a process, most of the start-up above the
bare imports). A cached function needs none of that; it needs Numba's runtime
(NRT, which that refresh would initialize) and the codegen that links its
object code. :func:`install` makes cache loads do just that. A cache miss
compiles as usual: the compiler refreshes the context itself before it types
anything (``CompilerBase.__init__``), and later loads are unaffected by it.

The patch replaces one method of ``numba.core.caching.Cache``, whose body is
``refresh(); with guard: return _load_overload(...)``; it is applied only if
the pieces it calls exist (checked below), otherwise Numba's method is kept.
It acts on attnsim's own kernels only (a cache whose function lives in the
``attnsim`` package): every other library's cached functions load through
Numba's own method, unchanged. ``MAX_NUMBA`` in :mod:`attnsim._meta` is the
newest Numba it was tested with (setup.cfg bounds the dependency by it).

Either way a cache load first starts Numba's threading layer (once per
process). A cached kernel that calls a ``parallel=True`` one (the GD kernels
call the parallel W pass) links the layer's scheduling symbols, but Numba
keeps the start of the layer only with the parallel function's own compile:
if that function came from the cache while its caller was compiled (two
processes filling a cold cache at once, or one that used only the parallel
function first), the caller's cache entry does not start it, and every later
process that loads the caller crashes with a segmentation fault until the
cache is deleted (Numba issues 8578 and 9938). Starting the layer takes about
20 ms, which loading the kernels paid before anyway.

A cached library also holds the LLVM bitcode of its functions, which Numba
parses on every load (about 3 ms per kernel, 45 ms of the default run's 15
loads) only to list the symbols the object code defines and in case a later
compilation links the library into another. For attnsim's kernels
:func:`lean_libraries` takes the symbols from the object code's ELF symbol table
instead (the same names: ``tests/test_numba.py`` compares them) and parses the
bitcode only when a compilation asks for it; on an object file that is not
ELF64 little-endian, Numba's own path runs.

Importing this module (every kernels module does, first) also refuses a Numba
older than ``MIN_NUMBA`` with a clear error: 0.59.1, 0.60.0 and 0.62.1 were
measured to crash in attnsim's GD kernel (a segmentation fault, with or
without this loader); 0.63.0 and later pass the test suite.
"""

from __future__ import annotations

import struct
import threading

import numba
from llvmlite import binding
from numba.core import caching, codegen

from .._meta import MIN_NUMBA, check_numba_version

__all__ = [
    "CACHE",
    "ERROR_MODEL",
    "FASTMATH",
    "MIN_NUMBA",
    "INSTALLED",
    "Resolving",
    "check_numba_version",
    "elf_defined_symbols",
    "install",
    "lean_libraries",
    "resolved",
]
PACKAGE = __name__.split(".")[0] + "."  # "attnsim."
CACHE = True  # every kernel: cold compilation takes 4-15 s here, a cached load well under 0.5 s
FASTMATH = False  # every kernel: kept off, results must not depend on reassociation
# every kernel: a float division by zero gives inf or NaN as in NumPy (and torch), not Python's
# ZeroDivisionError; without that check on every division the element loops vectorize (the same bits)
ERROR_MODEL = "numpy"


ON_MISS: list = []  # called once each when one of attnsim's kernels is missing from the cache


def _threading_layer_starter():
    """Numba's idempotent start of its threading layer (a no-op if this Numba has none)."""
    try:
        from numba.np.ufunc.parallel import _launch_threads  # private to Numba: looked up, not assumed
    except ImportError:  # pragma: no cover - a Numba without it
        return lambda: None
    return _launch_threads


def _load_without_refresh(cache):
    """``Cache.load_overload`` without the compiler refresh, or None if this
    Numba lacks the pieces it calls."""
    try:
        from numba.core.runtime import rtsys  # as above
    except ImportError:  # pragma: no cover - a Numba without this module
        return None
    needed = ("_load_overload", "_guard_against_spurious_io_errors")
    if not all(hasattr(cache, name) for name in needed) or not hasattr(rtsys, "initialize"):
        return None

    def load(self, sig, target_context):
        rtsys.initialize(target_context)
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)
        return None  # the guard swallowed an I/O error: a cache miss

    return load


def _ours(cache) -> bool:
    """Whether a cache holds one of attnsim's kernels (its function's module is in the package)."""
    module = getattr(getattr(cache, "_py_func", None), "__module__", "") or ""
    return module.startswith(PACKAGE)


def elf_defined_symbols(obj: bytes) -> set[str] | None:
    """Names of the symbols an ELF64 little-endian object file defines (every named
    symbol of its symbol tables with a section, sections and file names aside), or
    None for another format."""
    if obj[:4] != b"\x7fELF" or obj[4:6] != b"\x02\x01":  # ELFCLASS64, ELFDATA2LSB
        return None
    try:
        return _elf_symbols(obj)
    except (struct.error, IndexError, ValueError, UnicodeDecodeError):  # not a well-formed file
        return None


def _elf_symbols(obj: bytes) -> set[str]:
    shoff = struct.unpack_from("<Q", obj, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
    names = set()
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != 2 or not entsize:  # SHT_SYMTAB
            continue
        strings = sections[link][4]
        for at in range(offset, offset + size - entsize + 1, entsize):
            name, info, _, shndx = struct.unpack_from("<IBBH", obj, at)
            if name and shndx and (info & 0xF) not in (3, 4):  # defined, named; not STT_SECTION/FILE
                start = strings + name
                names.add(obj[start : obj.index(b"\0", start)].decode())
    return names


_LEAN = threading.local()  # .on: the library being unserialized is one of attnsim's kernels


def lean_libraries() -> bool:
    """Make an attnsim kernel's cached library load without parsing its bitcode
    (module docstring); whether this Numba has the pieces it needs."""
    lib = getattr(codegen, "CPUCodeLibrary", None)
    needed = ("_unserialize", "_get_module_for_linking", "enable_object_caching", "_set_compiled_object",
              "_finalize_final_module")  # fmt: skip
    if lib is None or not all(hasattr(lib, name) for name in needed):  # pragma: no cover - another Numba
        return False
    numba_unserialize = lib._unserialize.__func__
    numba_linking = lib._get_module_for_linking

    def _unserialize(cls, codegen, state):
        _, kind, data = state
        symbols = elf_defined_symbols(data[0]) if kind == "object" and getattr(_LEAN, "on", False) else None
        engine = getattr(codegen, "_engine", None)
        if symbols is None or not isinstance(getattr(engine, "_defined_symbols", None), set):
            return numba_unserialize(cls, codegen, state)
        self = codegen.create_library(state[0])
        self.enable_object_caching()
        self._set_compiled_object(data[0])
        self._attnsim_bitcode = data[1]  # parsed if a compilation links this library into another
        self._finalize_final_module()
        engine._defined_symbols |= symbols
        return self

    def _get_module_for_linking(self):
        bitcode = self.__dict__.pop("_attnsim_bitcode", None)
        if bitcode is not None:
            self._shared_module = binding.parse_bitcode(bitcode)
        return numba_linking(self)

    lib._unserialize = classmethod(_unserialize)
    lib._get_module_for_linking = _get_module_for_linking
    return True


def install() -> bool:
    """Make loads of attnsim's cached kernels start the threading layer first, skip
    the compiler refresh where this Numba allows and leave their bitcode unparsed
    (:func:`lean_libraries`); whether the refresh is skipped."""
    cache = caching.Cache
    start_layer = _threading_layer_starter()
    fast = _load_without_refresh(cache)
    numba_load = cache.load_overload
    load = fast if fast is not None else numba_load
    lean = lean_libraries()

    def load_overload(self, sig, target_context):
        if not _ours(self):
            return numba_load(self, sig, target_context)
        start_layer()
        _LEAN.on = lean
        try:
            loaded = load(self, sig, target_context)
        finally:
            _LEAN.on = False
        if loaded is None and ON_MISS:  # not in the cache: Numba compiles it now
            hooks = list(ON_MISS)
            ON_MISS.clear()
            for hook in hooks:
                hook()
        return loaded

    cache.load_overload = load_overload
    return fast is not None


def resolved(kernel, args: tuple):
    """``kernel``'s compiled function for arguments of the types of ``args``, to be called
    with arguments of those same types without Numba's dispatch (call ``kernel(*args)``
    once first, so it is compiled or loaded). The dispatch works out the type of every
    argument at every call: 2.6 us for a namedtuple of a dozen arrays, which a kernel
    called thousands of times per second with the same types (a flow's vector field, a
    population evaluation's passes) pays for nothing. ``kernel`` itself when this Numba
    keeps no such entry."""
    try:
        return kernel.overloads[tuple(numba.typeof(a) for a in args)].entry_point
    except (AttributeError, KeyError, TypeError, ValueError):  # another Numba: dispatch as usual
        return kernel


class Resolving:
    """``kernel`` at one call site whose arguments always have the same types (its own work
    arrays, floats, ints): the first call goes through Numba's dispatch, every later one
    straight to the compiled function of those types (:func:`resolved`)."""

    __slots__ = ("kernel", "fn")

    def __init__(self, kernel):
        self.kernel, self.fn = kernel, None

    def __call__(self, *args):
        if self.fn is not None:
            return self.fn(*args)
        out = self.kernel(*args)
        self.fn = resolved(self.kernel, args)
        return out


check_numba_version(numba.__version__)
NUMBA_LOAD = caching.Cache.load_overload  # Numba's own method (benchmarks/bench_startup.py compares)
INSTALLED = install()
