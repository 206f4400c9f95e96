#!/usr/bin/env python3
"""No GPU kernel spills registers to local memory beyond its allowance.

Reads the ptxas reports that the nvcc compile check keeps beside its objects (kernels/gpu/
compile_logged.cmake, one LOG per source: "Function properties for NAME" then "N bytes spill
stores"). A spill turns a register into a round trip to local memory in the kernel's inner loop:
the fused SwiGLU backward producer spilled 808 bytes a thread and ran 2.5x slower than the
unfused kernels it replaces (docs/performance.md, "Kernels"). Every kernel is held to none except
those this table allows, each with its reason.

  kernel_spills_test.py LOG_DIR     exit 0 when every kernel is within its allowance, 1 when
                                    one is over or LOG_DIR holds no report at all (the check ran,
                                    so its reports must be there)
  kernel_spills_test.py --skip WHY  prints "skipped: WHY" (CTest's skip expression): the build
                                    has no nvcc compile check
  kernel_spills_test.py --self-test the parser and the allowances on synthetic reports (runs
                                    everywhere): the old producer's report must fail
"""
import pathlib
import re
import subprocess
import sys
import tempfile

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


def over_allowance(log_dir: pathlib.Path):
    """(every (source, kernel, stores, loads) found, those over their allowance, log count)."""
    logs = sorted(log_dir.glob("*.log"))
    found = [(log.stem, *r) for log in logs for r in reports(log)]
    return found, [f for f in found if f[2] > allowance(f[1])[0]], len(logs)


def report(kernel, stores, loads, prop_bytes=0):
    return (f"ptxas info    : Compiling entry function '{kernel}' for 'sm_90'\n"
            f"ptxas info    : Function properties for {kernel}\n"
            f"    {prop_bytes} bytes stack frame, {stores} bytes spill stores, {loads} bytes spill loads\n"
            f"ptxas info    : Used 80 registers, used 1 barriers, 416 bytes smem\n")


def self_test():
    producer = "_ZN8mxablate7kernels3gpu6detail12_GLOBAL__N_123produce_quantize_kernelILNS3_10ProducerOpE1ELb0EEEvv"
    quantizer = "_ZN8mxablate7kernels3gpu6detail15quantize_kernelIfLNS0_11QuantFormatE5ELb0ELb0ELb0EEEvv"
    cases = [  # (name, log text, kernels expected over their allowance)
        ("the old backward producer", report(producer, 808, 1516, 568), 1),
        ("a producer within the quantizer's allowance still fails", report(producer, 40, 88, 32), 1),
        ("a spill-free producer", report(producer, 0, 0), 0),
        ("the quantizer within its allowance", report(quantizer, 92, 148, 24), 0),
        ("the quantizer over it", report(quantizer, 120, 200, 96), 1),
        ("two kernels, one over", report(quantizer, 0, 0) + report(producer, 4, 8), 1),
    ]
    failed = 0
    for name, text, want in cases:
        with tempfile.TemporaryDirectory() as d:
            pathlib.Path(d, "case.log").write_text("nvcc warning : something said\n" + text)
            found, over, _ = over_allowance(pathlib.Path(d))
        if len(over) != want or not found:
            print(f"FAIL {name}: {len(over)} over, wanted {want} ({len(found)} parsed)")
            failed += 1
    print(f"{len(cases) - failed} of {len(cases)} cases as expected")
    return 1 if failed else 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) == 3 and argv[1] == "--skip":
        print(f"skipped: {argv[2]}")
        return 0
    if len(argv) != 2:
        print("usage: kernel_spills_test.py LOG_DIR | --skip WHY | --self-test", file=sys.stderr)
        return 2
    found, over, logs = over_allowance(pathlib.Path(argv[1]))
    if not found:
        print(f"{argv[1]}: no ptxas report in {logs} logs of the nvcc compile check "
              "(is -Xptxas=-v gone from its flags?)")
        return 1
    names = demangle(sorted({k for _, k, _, _ in over}))
    for src, kernel, stores, loads in over:
        limit, why = allowance(kernel)
        print(f"{src}.cu: {names[kernel]} spills {stores} bytes a thread ({loads} loaded back); "
              f"allowed {limit}" + (f" ({why})" if why else ""))
    print(f"{len(found)} functions in {logs} sources, {len(over)} over their spill allowance")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
