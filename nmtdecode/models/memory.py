"""Running out of memory: recognising it, and seeing it coming on CPU.

On CUDA an allocation that does not fit raises `torch.OutOfMemoryError`. On CPU
torch raises a RuntimeError (`DefaultCPUAllocator: can't allocate memory`, or
`std::bad_alloc`), Python a MemoryError; and where the kernel overcommits, an
allocation can succeed and the process be killed later, when the pages are
touched (the OOM killer: no message, no exit code of ours). So on CPU a batch
whose decoding certainly needs more than the memory available is split before
it is tried, and a request that cannot fit even for one sentence is refused
before decoding starts (resolve.py); what the estimate misses is caught as an
allocation error and split the same way (`in_halves_when_out_of_memory`).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

import torch


try:
    import resource
except ImportError:  # not on Windows
    resource = None


CPU_MESSAGES = ("out of memory", "can't allocate memory", "cannot allocate memory", "not enough memory", "bad_alloc")


def is_out_of_memory(error: BaseException) -> bool:
    """CUDA's and the CPU allocator's out-of-memory errors, and Python's MemoryError."""
    if isinstance(error, (MemoryError, torch.cuda.OutOfMemoryError)):
        return True
    return isinstance(error, RuntimeError) and any(m in str(error).lower() for m in CPU_MESSAGES)


def _kib_entry(path: str, key: str) -> int | None:
    """A `Key: N kB` line of /proc/meminfo or /proc/self/status (Linux), in bytes, or None."""
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _meminfo(key: str) -> int | None:
    return _kib_entry("/proc/meminfo", key)


def _address_space_left() -> int | None:
    """What `ulimit -v` (RLIMIT_AS) still allows this process, or None without a limit."""
    limit = resource.getrlimit(resource.RLIMIT_AS)[0] if resource else None
    if limit is None or limit == resource.RLIM_INFINITY:
        return None
    size = _kib_entry("/proc/self/status", "VmSize")
    return max(0, limit - size) if size is not None else limit


def total_bytes() -> int | None:
    """The most this process could ever get: physical memory and swap, within its address-space
    limit; None when unknown."""
    physical = _meminfo("MemTotal")
    if physical is None and hasattr(os, "sysconf"):
        try:
            physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            physical = None
    if physical is not None:
        physical += _meminfo("SwapTotal") or 0
    limits = [x for x in (physical, _address_space_left()) if x is not None]
    return min(limits) if limits else None


def available_bytes() -> int | None:
    """What can be allocated now without pushing the machine into the OOM killer (Linux's
    MemAvailable plus free swap); None when unknown."""
    available = _meminfo("MemAvailable")
    return None if available is None else available + (_meminfo("SwapFree") or 0)


# glibc's mallopt parameters (malloc.h), and the largest block its heap keeps for reuse once freed
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
REUSED_BLOCK = 128 << 20


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library, where it is glibc on Linux (its malloc_trim and mallopt); else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None
    except OSError:  # not glibc (musl, another libc): its own allocator's habits
        return None


def give_back_freed() -> None:
    """Return the free memory of the C library's heaps to the system (glibc's malloc_trim)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def tune_allocator() -> bool:
    """Once a model is loaded: hand back to the system what loading freed, and from then on keep
    freed blocks up to REUSED_BLOCK for the next allocation.

    Loading reads, converts and frees blocks between the weights it keeps, and glibc keeps those
    holes (hundreds of megabytes on a real-size model); `malloc_trim` returns them. And glibc
    gives a block above 32 MB its own mapping and unmaps it when freed, so each decoding step's
    logits at a 256k vocabulary (65 MB at 64 rows) would be new pages, each faulted in on its first
    write: a large share of a step (docs/speed.md#real-size-models-on-the-cpu). Blocks above
    REUSED_BLOCK (a real-size model's cache) still get mappings of their own, given back when
    freed. Process-wide; only where the C library is glibc (elsewhere nothing changes). Returns
    whether it was set."""
    libc = _glibc()
    if libc is None:
        return False
    give_back_freed()
    return bool(libc.mallopt(M_MMAP_THRESHOLD, REUSED_BLOCK)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 2 * REUSED_BLOCK))


def readable_size(n: int) -> str:
    """A byte count for a message: GiB, or MiB below a tenth of one."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 / 10 else f"{n / 2**20:.1f} MiB"
