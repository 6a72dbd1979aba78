"""Valgrind client requests from Python: is this process running under Valgrind, and
Callgrind's switches (instrumentation, collection, dumping the counts).

Valgrind's ``valgrind.h`` macros are an instruction sequence that does nothing on a
real CPU and that Valgrind's JIT recognises as a request. torch exposes only two
Callgrind requests (``torch._C._valgrind_toggle``), not the one that switches
instrumentation on, and instrumenting from the start makes ``import torch`` cost 84 s
of CPU instead of 27 s. So the sequence is written here, as 40 bytes of x86-64
machine code in an executable page, and called through ``ctypes``. Natively it
returns the default (0): nothing is running it.
"""

from __future__ import annotations

import ctypes
import mmap
import platform
import sys
from collections.abc import Callable

# the function (System V ABI): rdi = address of the six-word request, rsi = default,
# returns the answer; the four rotations of rdi add up to 128 bits (no change)
_X86_64 = bytes.fromhex(
    "4889f8"  # mov rax, rdi  (valgrind.h: the request's address in rax)
    "4889f2"  # mov rdx, rsi  (the default, replaced by the answer)
    "48c1c703" "48c1c70d" "48c1c73d" "48c1c733"  # rol rdi, 3 / 13 / 61 / 51
    "4887db"  # xchg rbx, rbx: the request itself
    "4889d0"  # mov rax, rdx
    "c3"  # ret
)  # fmt: skip

_RUNNING_ON_VALGRIND = 0x1001
_CALLGRIND = (ord("C") << 24) | (ord("T") << 16)
_DUMP_STATS_AT = _CALLGRIND + 3
_ZERO_STATS = _CALLGRIND + 1
_TOGGLE_COLLECT = _CALLGRIND + 2
_START_INSTRUMENTATION = _CALLGRIND + 4
_STOP_INSTRUMENTATION = _CALLGRIND + 5

_request: Callable[[int, int], int] | None = None
#: kept alive with the function made from them
_pages: list[mmap.mmap] = []


def supported() -> str | None:
    """None where requests can be made here; otherwise why not, for a message."""
    if not sys.platform.startswith("linux"):
        return f"this is {platform.system() or sys.platform}, not Linux"
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64"):
        return f"this CPU is {machine}; instruction counts are supported on x86-64 only"
    return None


def _make_request() -> Callable[[int, int], int]:
    global _request
    if _request is None:
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        page.write(_X86_64)
        _pages.append(page)
        address = ctypes.addressof(ctypes.c_char.from_buffer(page))
        _request = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64)(address)
    return _request


def request(code: int, *args: int, default: int = 0) -> int:
    """Make the client request ``code`` with up to five arguments; ``default`` natively."""
    if supported() is not None:
        return default
    words = (ctypes.c_uint64 * 6)(code, *args, *([0] * (5 - len(args))))
    return int(_make_request()(ctypes.addressof(words), default))


def running_on_valgrind() -> bool:
    """Whether this process runs under Valgrind (valgrind.h's ``RUNNING_ON_VALGRIND``)."""
    return request(_RUNNING_ON_VALGRIND) > 0


def start_instrumentation() -> None:
    """Callgrind: instrument the code from now on (it then runs about 3x slower)."""
    request(_START_INSTRUMENTATION)


def stop_instrumentation() -> None:
    request(_STOP_INSTRUMENTATION)


def toggle_collect() -> None:
    """Callgrind: start counting if it was not, stop if it was."""
    request(_TOGGLE_COLLECT)


def zero_stats() -> None:
    request(_ZERO_STATS)


def dump_stats(reason: str) -> None:
    """Callgrind: write the counts since the last dump to the next output file, with
    ``reason`` as its trigger, and zero them."""
    text = ctypes.create_string_buffer(reason.encode())
    request(_DUMP_STATS_AT, ctypes.addressof(text))
