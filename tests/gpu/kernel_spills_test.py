#!/usr/bin/env python3
"""No GPU kernel spills registers to local memory beyond its allowance.

Reads the ptxas reports that the nvcc compile check keeps beside its objects (kernels/gpu/
compile_logged.cmake, one LOG per source: "Function properties for NAME" then "N bytes spill
stores"). A spill turns a register into a round trip to local memory in the kernel's inner loop:
the fused SwiGLU backward producer spilled 808 bytes a thread and ran 2.5x slower than the
unfused kernels it replaces (docs/performance.md, "Kernels"). Every kernel is held to none except
those this table allows, each with its reason.

  kernel_spills_test.py LOG_DIR     exit 0 when every kernel is within its allowance; prints
                                    "skipped: ..." (CTest's skip expression) when LOG_DIR holds
                                    no reports (no nvcc here).
"""
import pathlib
import re
import subprocess
import sys

# (pattern on the mangled name, bytes of spill stores a thread may have, why). The length prefix
# of the Itanium mangling names the general quantizer alone, not produce_quantize_kernel.
ALLOWANCES = [
    (re.compile(r"15quantize_kernelI"), 96,
     "the general quantizer's telemetry, stochastic-rounding and float32 NVFP4 variants keep a "
     "few bytes (kernels/gpu/quantize_kernels.cuh, quantize_staged_tile)"),
]

PROPERTIES = re.compile(r"Function properties for (\S+)")
SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def reports(log: pathlib.Path):
    """(kernel, spill store bytes, spill load bytes) for each function ptxas reported."""
    name = None
    for line in log.read_text(errors="replace").splitlines():
        m = PROPERTIES.search(line)
        if m:
            name = m.group(1)
            continue
        m = SPILLS.search(line)
        if m and name:
            yield name, int(m.group(1)), int(m.group(2))
            name = None


def allowance(kernel: str):
    for pattern, limit, why in ALLOWANCES:
        if pattern.search(kernel):
            return limit, why
    return 0, None


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                             check=True).stdout.splitlines()
        return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def main(argv):
    if len(argv) != 2:
        print("usage: kernel_spills_test.py LOG_DIR", file=sys.stderr)
        return 2
    logs = sorted(pathlib.Path(argv[1]).glob("*.log"))
    found = [(log.stem, *r) for log in logs for r in reports(log)]
    if not found:
        print(f"skipped: no ptxas reports in {argv[1]} (the nvcc compile check did not run here)")
        return 0
    over = [(src, k, s, l) for src, k, s, l in found if s > allowance(k)[0]]
    names = demangle(sorted({k for _, k, _, _ in over}))
    for src, kernel, stores, loads in over:
        limit, why = allowance(kernel)
        print(f"{src}.cu: {names[kernel]} spills {stores} bytes a thread ({loads} loaded back); "
              f"allowed {limit}" + (f" ({why})" if why else ""))
    print(f"{len(found)} functions in {len(logs)} sources, {len(over)} over their spill allowance")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
