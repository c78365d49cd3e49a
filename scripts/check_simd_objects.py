"""Fails if a SIMD object of the library defines a function the rest of the program could bind to.

The *_avx2.cpp and *_avx512.cpp files are compiled for their instruction set and entered only
after a run-time CPU check. An inline function one of them uses but does not inline (a template
instantiation such as std::vector<float>::resize, or an inline function of a shared header) is
emitted there as a weak symbol, compiled for that instruction set; the linker keeps one copy of
each weak symbol for the whole program, and where it keeps that one, baseline code runs AVX2 or
AVX-512 instructions on a CPU that lacks them (SIGILL). The kernels take scratch memory from
storage/thread_scratch.h instead of containers, and this check keeps it so.

It holds for optimized builds, where such small functions are inlined; at -O0 or -O1 (Debug and
the sanitizer builds) the compiler leaves some out of line, so the tests run it on the release
build only.

Usage: check_simd_objects.py LIBRARY.a
"""
import re
import subprocess
import sys

SIMD_OBJECT = re.compile(r"_(avx2|avx512)\.cpp\.o$")
# Emitted by clang for a noexcept function's terminate path: no vector code in it.
ALLOWED = {"__clang_call_terminate"}


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1])
        return 2
    library = argv[1]
    listing = subprocess.run(["nm", "-A", "-C", "--defined-only", library], check=True, capture_output=True,
                             text=True).stdout
    errors = []
    objects = set()
    for line in listing.splitlines():
        # "LIBRARY.a:member.cpp.o:0000000000000000 W name"
        where, _, rest = line.partition(" ")
        member = where.rsplit(":", 2)[-2] if where.count(":") >= 2 else ""
        if not SIMD_OBJECT.search(member):
            continue
        objects.add(member)
        kind, _, name = rest.partition(" ")
        if kind == "W" and name not in ALLOWED:
            errors.append(f"{member}: weak function {name}")
    for e in errors:
        print(e)
    if not objects:
        print(f"{library}: no *_avx2.cpp.o or *_avx512.cpp.o members (not the library?)")
        return 1
    print(f"SIMD objects: {len(objects)} checked, {len(errors)} weak function(s) the baseline code could bind to")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
