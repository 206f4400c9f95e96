# Sourced by the GPU machine's trainer checks (gpu-train-check.sh, gpu-scale-check.sh).
# They set DATA (a prepared data directory), OUT (run directories), PY and TRAIN.
#
# build_trainer BUILD_DIR LOG_PREFIX PYTHON builds mxablate-train in BUILD_DIR unless it is there
# (scripts/gpu-check.sh's build counts), configured as gpu-check.sh does: CUDA kernels for sm_90,
# the image's torch, the packages carried in .carry/.
build_trainer() {
  local BUILD_DIR=$1 OUT=$2 PY=$3
  if [ ! -x "$BUILD_DIR/bin/mxablate-train" ]; then
    echo "gpu-build-trainer: building mxablate-train in $BUILD_DIR"
    PREFIX=$PWD/.carry/prefix
    if compgen -G ".carry/debs/*.deb" >/dev/null; then
      mkdir -p "$PREFIX"
      for deb in .carry/debs/*.deb; do dpkg -x "$deb" "$PREFIX"; done
      sed -i "s|^prefix=/usr\$|prefix=$PREFIX/usr|" "$PREFIX"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc 2>/dev/null
      cp -n /usr/lib/x86_64-linux-gnu/cmake/BoostDetectToolset-*.cmake "$PREFIX/usr/lib/x86_64-linux-gnu/cmake/" 2>/dev/null
    fi
    MULTIARCH=$PREFIX/usr/lib/x86_64-linux-gnu
    export PKG_CONFIG_PATH=$MULTIARCH/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    export LD_LIBRARY_PATH=$MULTIARCH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export CPATH=$PREFIX/usr/include${CPATH:+:$CPATH}
    export TORCH_CUDA_ARCH_LIST=9.0
    TORCH_PREFIX=$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')
    GENERATOR=()
    command -v ninja >/dev/null 2>&1 && GENERATOR=(-G Ninja)
    CONFIGURE=(cmake -S . -B "$BUILD_DIR" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release
      -DMXABLATE_CUDA=ON -DMXABLATE_CUDA_ARCHITECTURES=90
      "-DCMAKE_PREFIX_PATH=$TORCH_PREFIX;$PREFIX/usr;$MULTIARCH/cmake" "-DSQLite3_INCLUDE_DIR=$PREFIX/usr/include")
    [ -f /usr/lib/x86_64-linux-gnu/libsqlite3.so.0 ] && CONFIGURE+=("-DSQLite3_LIBRARY=/usr/lib/x86_64-linux-gnu/libsqlite3.so.0")
    mkdir -p "$(dirname "$OUT")"
    "${CONFIGURE[@]}" >"$OUT.configure.log" 2>&1 || { tail -30 "$OUT.configure.log" >&2; exit 1; }
    cmake --build "$BUILD_DIR" --target mxablate-train -j "$(nproc)" >"$OUT.build.log" 2>&1 ||
      { tail -40 "$OUT.build.log" >&2; exit 1; }
  fi
}

# config NAME DEVICE MODEL PRECISION SEQ GLOBAL MICRO STEPS EVAL_EVERY_STEPS EVAL_TOKENS THREADS [EXTRA]
# prints a run config on $DATA; EXTRA is JSON merged over it (e.g. '{"parallel": {"data": 2}}').
config() {
  $PY - "$@" "$DATA" <<'PYEOF'
import json, sys
args = sys.argv[1:]
if len(args) == 12: args.insert(11, "{}")
name, device, model, prec, seq, glob, micro, steps, every, evtok, threads, extra, data = args
seq, glob, micro, steps, every, evtok, threads = map(int, (seq, glob, micro, steps, every, evtok, threads))
# "mxfp4+h16": all three GEMMs in MXFP4 with the deterministic 16-point Hadamard rotation on
# Wgrad (the paper's FDW+H16 arm, the arm of the DESIGN step-time target).
hadamard = prec.endswith("+h16")
prec = prec.removesuffix("+h16")
p = {"fprop": prec, "dgrad": prec, "wgrad": prec}
c = {"run_id": name, "arm": prec, "model": model, "device": device, "threads": threads,
     "data": {"dataset": data, "seq_len": seq},
     "train": {"global_batch_tokens": glob, "micro_batch_tokens": micro, "max_tokens": glob * steps,
               "lr": 1e-3, "warmup_tokens": glob * max(1, steps // 10), "seed": 1},
     "eval": {"every_tokens": glob * every, "tokens": evtok},
     "precision": p,
     **({"quant": {"hadamard": {"mode": "deterministic", "size": 16, "gemms": ["wgrad"]}}} if hadamard else {}),
     "checkpoint": {"every_steps": 0},
     "telemetry": {"train_every_steps": 1 if steps <= 50 else 10, "quant_every_steps": 0}}
def merge(base, over):
    for k, v in over.items():
        base[k] = merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return base
print(json.dumps(merge(c, json.loads(extra)), indent=1))
PYEOF
}

# run NAME CONFIG-ARGS…: writes the config, runs, returns the exit code
run() {
  local name=$1; shift
  local dir=$OUT/$name
  rm -rf "$dir" && mkdir -p "$dir"
  config "$name" "$@" >"$dir/config.json"
  local t0=$SECONDS rc=0
  "$TRAIN" --run-dir "$dir" >"$dir/output.txt" 2>&1 || rc=$?
  echo "  $name: exit $rc in $((SECONDS - t0)) s ($(tail -1 "$dir/output.txt"))"
  return $rc
}


# summary DIR: median tokens/s of the train events after step 3, run_end's figure, peak GPU memory
summary() {
  [ -f "$1/events.jsonl" ] || { echo "    $(basename "$1"): no events"; return 0; }
  $PY - "$1" <<'PYEOF'
import json, sys, statistics
ev = [json.loads(l) for l in open(sys.argv[1] + "/events.jsonl") if l.endswith("\n")]
tps = [e["tokens_per_s"] for e in ev if e["kind"] == "train" and e["step"] > 3]
end = [e for e in ev if e["kind"] == "run_end"][-1]
print(f"    {sys.argv[1].rsplit('/', 1)[1]}: {statistics.median(tps) if tps else 0:,.0f} tokens/s | "
      f"{end['tokens_per_s']:,.0f} | peak GPU {end['peak_gpu_bytes'] / 2**30:.1f} GiB")
PYEOF
}
