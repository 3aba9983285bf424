#!/usr/bin/env bash
# The edge install checked on aarch64 (the Jetson's CPU) without a Jetson: a Debian bookworm arm64 root
# (CPython 3.11) run under qemu-user-static on this x86-64 host. Not in the default CI (about 15 minutes
# the first time); run it before a release and put its figures in docs/jetson.md.
#
#   sudo scripts/check_arm64.sh              # the whole check; root only (debootstrap, chroot, mounts)
#   sudo scripts/check_arm64.sh --prepare    # step 1 and the download/unpack half of step 2, no emulation
#
# Steps:
#   1. qemu-user-static and the binfmt_misc entry for aarch64 (with the F flag: the kernel keeps the
#      emulator open, so it needs no copy inside the root)
#   2. the arm64 root: debootstrap --foreign (download + unpack), then the second stage under qemu; built
#      once and cached in $RL2EDGE_ARM64_CACHE (default /var/cache/rl2edge-arm64, outside the repository)
#   3. the rl2edge wheel (built here) installed in the root: [edge] (ai-edge-litert) and [edge-tflite]
#      (tflite-runtime 2.14.0) in two venvs, timed and sized; and the offline recipe
#      (scripts/check_offline_edge.sh 3.11: an aarch64 wheelhouse, then pip install --no-index)
#   4. imports in the root: runtime and plc_bridge load without torch, tensorflow, gymnasium, onnxruntime
#   5. the same artifacts (every mode) on x86 and aarch64: discrete actions, Box actions
#   6. `rl2edge bench latency` in the root (emulated timings: they say nothing about a real Cortex-A78AE)
#   7. the closed loop: plc-sim on the host, serve in the root, over loopback, through a PLC restart;
#      None and SignAndEncrypt
#   8. a summary: benchmarks/results/arm64_check.md and .json
#
# Environment: RL2EDGE_ARM64_CACHE (cache folder), RL2EDGE_ARM64_REBUILD=1 (rebuild the root),
# RL2EDGE_ARM64_SAMPLES (held-out observations per artifact, default 2000), RL2EDGE_ARM64_SECURE=0 (skip
# the SignAndEncrypt loop), RL2EDGE_ARM64_CPU (qemu CPU model, default cortex-a76: see IN_ROOT),
# MAIN_PY (the workstation's Python, default .venv/bin/python).
# Exits non-zero when any check fails; the summary is written either way once the root is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
MAIN_PY=${MAIN_PY:-$REPO/.venv/bin/python}
MAIN_BIN=$(dirname "$MAIN_PY")
CACHE=${RL2EDGE_ARM64_CACHE:-/var/cache/rl2edge-arm64}
ROOT=$CACHE/bookworm-arm64
SUITE=bookworm
MIRROR=${RL2EDGE_ARM64_MIRROR:-http://deb.debian.org/debian}
SAMPLES=${RL2EDGE_ARM64_SAMPLES:-2000}
QEMU_CPU=${RL2EDGE_ARM64_CPU:-cortex-a76}
IN=/opt/rl2edge-check    # the check's folder inside the root (cleared every run)
HOST_IN=$ROOT$IN         # the same folder seen from the host
RESULTS=$REPO/benchmarks/results
PREPARE=0
[[ ${1:-} == --prepare ]] && PREPARE=1

[[ $(id -u) == 0 ]] || { echo "check_arm64.sh needs root (debootstrap, chroot, mounts)" >&2; exit 2; }
[[ -x $MAIN_PY ]] || { echo "no workstation venv at $MAIN_PY (make install)" >&2; exit 2; }

WORK=$(mktemp -d /tmp/rl2edge-arm64-XXXXXX)   # host-side results of each step, composed in step 8
T_START=$(date +%s)
MOUNTS=()       # what mount_root mounted, unmounted in reverse on exit
FAILED=0

cleanup() {
  local pid m i
  # plc-sim and serve, if a failure left them running: only this shell's own unreaped jobs, by pid.
  for pid in $(jobs -p); do kill -9 "$pid" 2>/dev/null || true; done
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
    m=${MOUNTS[i]}
    mountpoint -q "$m" && { umount "$m" 2>/dev/null || umount -l "$m"; }
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

STEP_NAME="" STEP_T0=0
step() {  # a heading, and the previous step's time in $WORK/timings.tsv
  end_step
  STEP_NAME=$1 STEP_T0=$(date +%s)
  printf '\n== %s  [%s]\n' "$STEP_NAME" "$(date +%H:%M:%S)"
}
end_step() {
  [[ -n $STEP_NAME ]] || return 0
  local dt=$(( $(date +%s) - STEP_T0 ))
  printf '%s\t%s\n' "$STEP_NAME" "$dt" >>"$WORK/timings.tsv"
  printf -- '-- %s: %d s\n' "$STEP_NAME" "$dt"
  STEP_NAME=""
}
fail() { echo "FAIL: $*" | tee -a "$WORK/failures.txt" >&2; FAILED=1; }
note() { printf '%s\t%s\n' "$1" "$2" >>"$WORK/facts.tsv"; }   # key/value for the summary

# A command inside the root, with a clean environment: none of the host's pip settings (local indexes,
# find-links) apply there. PIP_CERT: the host's CA bundle, where TLS to PyPI goes through a proxy that
# re-signs it (the root's own ca-certificates bundle would do on an open network).
# QEMU_CPU: qemu's default model ("max") has SVE and i8mm, which the Orin's Cortex-A78AE lacks, and
# XNNPACK picks its kernels by those features; cortex-a76 is the closest model qemu 7.2 has (Armv8.2-A
# with dot product and fp16, no SVE, no i8mm), so the kernels run here are the kind the Orin runs.
IN_ROOT=(chroot "$ROOT" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb QEMU_CPU="$QEMU_CPU"
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  PIP_CERT=/etc/ssl/certs/rl2edge-host-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180)
# (chroot execs env, env execs the command: "${IN_ROOT[@]}" CMD & gives CMD's own pid in $!)
in_root() { "${IN_ROOT[@]}" "$@"; }

# ------------------------------------------------------------------------------------------------ 1
ensure_qemu() {
  step "1. qemu-user-static and binfmt_misc (aarch64)"
  if ! command -v qemu-aarch64-static >/dev/null || ! command -v debootstrap >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static debootstrap binfmt-support >/dev/null
  fi
  local bm=/proc/sys/fs/binfmt_misc
  mountpoint -q $bm || mount -t binfmt_misc binfmt_misc $bm
  # update-binfmts registers the entries from the package's postinst; without systemd (containers) it may
  # not have run, so enable them here, and register by hand if that fails too.
  [[ -e $bm/qemu-aarch64 ]] || update-binfmts --enable qemu-aarch64 2>/dev/null || true
  if [[ ! -e $bm/qemu-aarch64 ]]; then
    # ELF64, little endian, e_machine 0xb7 (AArch64); F: the kernel opens the interpreter now, so a chroot
    # without /usr/bin/qemu-aarch64-static inside still runs arm64 binaries.
    # shellcheck disable=SC2028  # the kernel, not echo, decodes the \x escapes
    echo ':qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:/usr/bin/qemu-aarch64-static:F' >$bm/register
  fi
  [[ $(head -1 $bm/qemu-aarch64) == enabled ]] || echo 1 >$bm/qemu-aarch64
  grep -q '^flags:.*F' $bm/qemu-aarch64 \
    || { echo "binfmt qemu-aarch64 lacks the F flag: a chroot cannot find the emulator" >&2; exit 1; }
  echo "qemu: $(qemu-aarch64-static --version | head -1); binfmt: $(grep -E '^(interpreter|flags)' $bm/qemu-aarch64 | tr '\n' ' ')"
  note qemu "$(qemu-aarch64-static --version | head -1)"
}

# ------------------------------------------------------------------------------------------------ 2
# Stamps in the root record how far the build got, so an interrupted build resumes and a finished one
# is reused: .rl2edge-stage1-done (downloaded, unpacked), .rl2edge-root-done (second stage done).
build_root() {
  step "2. Debian $SUITE arm64 root ($ROOT)"
  local m
  mkdir -p "$CACHE"
  if [[ ${RL2EDGE_ARM64_REBUILD:-0} == 1 && -d $ROOT ]]; then
    echo "RL2EDGE_ARM64_REBUILD=1: removing the cached root"
    for m in dev/pts dev sys proc; do mountpoint -q "$ROOT/$m" && umount "$ROOT/$m"; done
    rm -rf --one-file-system "$ROOT"
  fi
  if [[ -f $ROOT/.rl2edge-root-done ]]; then
    echo "cached: $(cat "$ROOT/.rl2edge-root-done")"
    note root_build cached
    note root_built_on "$(cat "$ROOT/.rl2edge-root-done")"
    return
  fi
  local t0 s1 t1 t2
  if [[ ! -f $ROOT/.rl2edge-stage1-done ]]; then
    rm -rf --one-file-system "$ROOT"
    t0=$(date +%s)
    # minbase + what a venv with manylinux wheels needs; no compiler: everything installs from wheels.
    debootstrap --arch=arm64 --foreign --variant=minbase --include=python3,python3-venv,ca-certificates \
      "$SUITE" "$ROOT" "$MIRROR" >"$CACHE/first-stage.log" 2>&1 \
      || { tail -20 "$CACHE/first-stage.log"; echo "debootstrap first stage failed (log: $CACHE/first-stage.log)" >&2; exit 1; }
    echo "first stage: $(grep -c '^I: Extracting' "$CACHE/first-stage.log") packages downloaded and unpacked"
    echo $(( $(date +%s) - t0 )) >"$ROOT/.rl2edge-stage1-done"   # its duration, for the report
  else
    echo "first stage cached (downloaded and unpacked earlier)"
  fi
  s1=$(cat "$ROOT/.rl2edge-stage1-done")
  echo "first stage (download + unpack): ${s1:-?} s"
  [[ $PREPARE == 1 ]] && return
  # The second stage runs the packages' arm64 maintainer scripts: every binary under qemu.
  t1=$(date +%s)
  chroot "$ROOT" /debootstrap/debootstrap --second-stage >"$CACHE/second-stage.log" 2>&1 \
    || { tail -20 "$CACHE/second-stage.log"; echo "debootstrap second stage failed (log: $CACHE/second-stage.log)" >&2; exit 1; }
  echo "second stage: $(grep -c '^I: Configuring' "$CACHE/second-stage.log") packages configured under qemu"
  t2=$(date +%s)
  local py
  py=$(chroot "$ROOT" /usr/bin/python3 -c 'import platform; print(platform.python_version(), platform.machine())')
  echo "$(date -u +%FT%TZ) $SUITE arm64, python $py, first stage ${s1:-?} s, second stage $((t2 - t1)) s" \
    >"$ROOT/.rl2edge-root-done"
  echo "built: $(cat "$ROOT/.rl2edge-root-done")"
  note root_build "$(( ${s1:-0} + t2 - t1 ))"
  note root_stage1 "${s1:-?}"
  note root_stage2 "$((t2 - t1))"
}

# /proc, /sys, /dev for pip and Python inside the root; resolv.conf and the CA bundle for PyPI.
mount_root() {
  local m
  for m in proc sys dev dev/pts; do
    MOUNTS+=("$ROOT/$m")   # also one left by a run that was killed: unmounted on exit all the same
    mountpoint -q "$ROOT/$m" && continue
    mkdir -p "$ROOT/$m"
    case $m in
      proc) mount -t proc proc "$ROOT/proc" ;;
      sys) mount -t sysfs sysfs "$ROOT/sys" ;;
      *) mount --bind "/$m" "$ROOT/$m" ;;
    esac
  done
  cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
  cp -L /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/rl2edge-host-ca.crt"
  rm -rf "$HOST_IN" && mkdir -p "$HOST_IN"
  PY_ROOT=$(in_root /usr/bin/python3 -c 'import platform; print(platform.python_version(), platform.machine())')
  # The CPU features the emulated process sees (AT_HWCAP/AT_HWCAP2: what XNNPACK's cpuinfo reads).
  CPU_FEATURES=$(in_root /usr/bin/python3 -c '
import ctypes
libc = ctypes.CDLL(None); libc.getauxval.restype = ctypes.c_ulong
hw, hw2 = libc.getauxval(16), libc.getauxval(26)
bits = {"fp16": hw >> 9 & 1, "dotprod": hw >> 20 & 1, "sve": hw >> 22 & 1, "i8mm": hw2 >> 13 & 1, "bf16": hw2 >> 14 & 1}
print(", ".join(k + (" yes" if v else " no") for k, v in bits.items()))')
  echo "root: Python $PY_ROOT (emulated), qemu CPU model $QEMU_CPU: $CPU_FEATURES"
  note root_python "$PY_ROOT"
  note qemu_cpu "$QEMU_CPU ($CPU_FEATURES)"
}

# ------------------------------------------------------------------------------------------------ 3
build_wheel() {
  step "3a. rl2edge wheel (host)"
  # Into a folder of its own, not dist/: scripts/test_edge.sh clears and refills dist/ and may run meanwhile.
  "$MAIN_PY" -m pip wheel --quiet --no-deps --no-build-isolation -w "$WORK/dist" . >/dev/null
  WHEEL=$(ls "$WORK"/dist/rl2edge-*-py3-none-any.whl)
  mkdir -p "$HOST_IN/dist" && cp "$WHEEL" "$HOST_IN/dist/"
  WHEEL_IN=$IN/dist/$(basename "$WHEEL")
  echo "$WHEEL"
}

# One venv in the root with the wheel and an extra, timed and sized. pip's cache is off, so the time is
# that of a fresh device: download from PyPI, unpack, byte-compile (under emulation, i.e. slower).
install_venv() {
  local name=$1 extra=$2 t0 dt mb
  step "3b. pip install rl2edge[$extra] in the root (venv $IN/$name)"
  in_root /usr/bin/python3 -m venv "$IN/$name"
  t0=$(date +%s)
  in_root "$IN/$name/bin/python" -m pip install --quiet --no-cache-dir "${WHEEL_IN}[$extra]"
  dt=$(( $(date +%s) - t0 ))
  mb=$(du -sm "$HOST_IN/$name" | cut -f1)
  echo "installed in ${dt} s; venv ${mb} MB"
  in_root "$IN/$name/bin/python" -m pip list --format=freeze >"$WORK/freeze-$name.txt"
  note "install_s_$name" "$dt"
  note "venv_mb_$name" "$mb"
}

# The offline recipe of docs/jetson.md for this root's Python: a wheelhouse downloaded on the host for
# aarch64, then pip install --no-index in the root. requirements-edge.lock is compiled for the Jetson's
# CPython 3.10 and may pin packages whose Requires-Python excludes 3.11 (backports: e.g.
# backports-strenum <3.11); where the hashed lock cannot be used for 3.11, the wheelhouse is made from
# the wheel's [edge] instead (the lock's versions as constraints) and that is what installs. Either way
# the report says which, and how the installed versions differ from the lock's.
offline_install() {
  step "3c. offline recipe: aarch64 wheelhouse for CPython 3.11, pip install --no-index in the root"
  local wh=$HOST_IN/wheelhouse t0 dt mb
  rm -rf "$wh" && mkdir -p "$wh"
  local how=lock
  if ! scripts/check_offline_edge.sh 3.11 "$wh" >"$WORK/offline-host.log" 2>&1; then
    how="wheel[edge], the lock's versions as constraints but for its backports (the 3.10 lock does not resolve on 3.11)"
    echo "check_offline_edge.sh 3.11 failed; its last lines:"; tail -5 "$WORK/offline-host.log" | sed 's/^/  /'
    note offline_lock_error "$(grep -m1 ERROR "$WORK/offline-host.log" || tail -1 "$WORK/offline-host.log")"
    rm -rf "$wh" && mkdir -p "$wh"
    # The lock's versions as constraints (no hashes), but for the backports: those pins are 3.10's (e.g.
    # ai-edge-litert needs backports.strenum on every Python, and 1.3.1 requires <3.11: 3.11 gets 1.2.8).
    # Everything else installs at the lock's version, as on the Jetson.
    grep -E '^[A-Za-z0-9]' requirements-edge.lock | sed 's/ *\\$//' | grep -v '^backports' >"$WORK/lock-constraints.txt"
    note offline_dropped_pins "$(grep -E '^backports' requirements-edge.lock | sed 's/ *\\$//' | tr '\n' ' ')"
    "$MAIN_PY" -m pip download --quiet --no-cache-dir --only-binary=:all: --implementation cp --python-version 3.11 \
      --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 --platform manylinux_2_27_aarch64 \
      --platform manylinux_2_28_aarch64 -c "$WORK/lock-constraints.txt" -d "$wh" "${WHEEL}[edge]" \
      >>"$WORK/offline-host.log" 2>&1 || { tail -5 "$WORK/offline-host.log"; fail "offline: wheelhouse download"; return 0; }
    cp "$WHEEL" "$wh/"
  else
    sed 's/^/  /' "$WORK/offline-host.log"
    cp "$WHEEL" "$wh/"   # this run's wheel, not whatever dist/ held
  fi
  local whls=("$wh"/*.whl)
  echo "wheelhouse: ${#whls[@]} wheels, $(du -sm "$wh" | cut -f1) MB"
  in_root /usr/bin/python3 -m venv "$IN/venv-offline"
  local pip=("$IN/venv-offline/bin/python" -m pip install --quiet --no-index --find-links "$IN/wheelhouse")
  t0=$(date +%s)
  if [[ $how == lock ]]; then
    cp requirements-edge.lock "$HOST_IN/"
    if in_root "${pip[@]}" --require-hashes -r "$IN/requirements-edge.lock" 2>"$WORK/offline-lock.err"; then
      in_root "${pip[@]}" --no-deps "$IN/wheelhouse/$(basename "$WHEEL")"
    else
      how="wheel[edge] from the lock's wheelhouse (the hashed lock failed on 3.11)"
      echo "hashed lock install failed on 3.11:"; tail -3 "$WORK/offline-lock.err" | sed 's/^/  /'
      note offline_lock_error "$(grep -m1 ERROR "$WORK/offline-lock.err" || tail -1 "$WORK/offline-lock.err")"
      in_root "${pip[@]}" "$IN/wheelhouse/$(basename "$WHEEL")[edge]"
    fi
  else
    in_root "${pip[@]}" "$IN/wheelhouse/$(basename "$WHEEL")[edge]"
  fi
  dt=$(( $(date +%s) - t0 ))
  mb=$(du -sm "$HOST_IN/venv-offline" | cut -f1)
  in_root "$IN/venv-offline/bin/python" -c 'import rl2edge.runtime, rl2edge.plc_bridge.loop' \
    || fail "offline venv: runtime/plc_bridge do not import"
  in_root "$IN/venv-offline/bin/python" -m pip list --format=freeze >"$WORK/freeze-venv-offline.txt"
  local vs_lock
  vs_lock=$("$MAIN_PY" - requirements-edge.lock "$WORK/freeze-venv-offline.txt" <<'EOF'
import re, sys
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
pins = lambda path: dict(l.split("==")[:2] for l in (x.split(" ")[0].strip() for x in open(path)) if "==" in l)
lock = {norm(k): v for k, v in pins(sys.argv[1]).items()}
got = {norm(k): v for k, v in pins(sys.argv[2]).items() if norm(k) not in ("pip", "setuptools", "rl2edge")}
diff = [f"{k} {got.get(k, 'absent')} (lock {lock.get(k, 'absent')})" for k in sorted(lock.keys() | got.keys())
        if got.get(k) != lock.get(k)]
print("same versions as the lock" if not diff else "as the lock but " + ", ".join(diff))
EOF
)
  echo "installed vs requirements-edge.lock: $vs_lock"
  note offline_vs_lock "$vs_lock"
  echo "offline install ($how): ${dt} s, venv ${mb} MB"
  note offline_how "$how"
  note offline_install_s "$dt"
  note offline_venv_mb "$mb"
  rm -rf "$wh"
}

# ------------------------------------------------------------------------------------------------ 4
check_imports() {
  local name=$1
  step "4. imports in the root ($name)"
  if in_root "$IN/$name/bin/python" - >"$WORK/imports-$name.json" <<'EOF'
import importlib.util, json, platform, sys
import rl2edge.runtime, rl2edge.plc_bridge.loop, rl2edge.plc_bridge.client  # noqa: F401  what serve imports
from rl2edge.runtime.interpreters import TFLITE_ENGINES
heavy = ("torch", "tensorflow", "gymnasium", "onnxruntime")
loaded = [m for m in heavy if m in sys.modules]
installed = [m for m in heavy if importlib.util.find_spec(m) is not None]
engines = [n for n, mod in TFLITE_ENGINES.items() if importlib.util.find_spec(mod.split(".")[0]) is not None]
print(json.dumps({"machine": platform.machine(), "python": platform.python_version(), "loaded": loaded,
                  "installed": installed, "engines": engines, "ok": not loaded and not installed}))
sys.exit(1 if loaded or installed else 0)
EOF
  then
    echo "ok: $(cat "$WORK/imports-$name.json")"
  else
    cat "$WORK/imports-$name.json"; fail "imports ($name): heavy modules present or import error"
  fi
}

# ------------------------------------------------------------------------------------------------ 5
# The artifacts of the tests (testkit.runs.build_artifacts: a tiny PPO per env, every mode), made by
# the workstation; held-out observations, x86 actions and, for discrete, the source's top-two margins.
make_reference() {
  step "5a. artifacts and x86 reference (host, workstation venv)"
  local art=$HOST_IN/artifacts
  "$MAIN_PY" -c "import sys; sys.path.insert(0, '.'); from pathlib import Path; from testkit.runs import build_artifacts; build_artifacts(Path('$art'))" \
    >"$WORK/artifacts.log" 2>&1 || { tail -20 "$WORK/artifacts.log"; echo "building the artifacts failed" >&2; exit 1; }
  "$MAIN_PY" - "$art" "$SAMPLES" <<'EOF'
import json, sys
from pathlib import Path
import numpy as np
sys.path.insert(0, ".")
from rl2edge.export.checkpoint_source import source_from_checkpoint
from rl2edge.runtime import Policy, load_manifest
from rl2edge.runtime.bench import artifact_observations

art, n = Path(sys.argv[1]), int(sys.argv[2])
index = []
for name, run in [("cartpole-all/fp32", "cartpole"), ("cartpole-all/fp16", "cartpole"),
                  ("cartpole-all/dynamic", "cartpole"), ("cartpole-all/int8", "cartpole"),
                  ("pendulum-fp32", "pendulum"), ("pendulum-int8", "pendulum")]:
    d = art / name
    m = load_manifest(d)
    obs = artifact_observations(m.observation, n)
    policy = Policy.load(d, explore=False)  # folded noise (if any) fed zeros: deterministic on both
    x86 = np.array([policy.predict(o) for o in obs])
    ref = art / "ref" / name.replace("/", "-")
    ref.mkdir(parents=True, exist_ok=True)
    np.save(ref / "obs.npy", obs)
    np.save(ref / "x86.npy", x86)
    entry = {"name": name, "mode": m.quantization["mode"], "discrete": m.action.discrete,
             "backend": policy.backend_name, "samples": n, "ref": str(ref.relative_to(art))}
    if entry["discrete"]:
        np.save(ref / "margins.npy", source_from_checkpoint(art / "runs" / run).margins(obs))
    else:
        entry["range"] = (np.asarray(m.action.high, float) - np.asarray(m.action.low, float)).tolist()
    index.append(entry)
    print(f"  {name:22s} {entry['mode']:8s} {n} observations, x86 via {policy.backend_name}")
(art / "index.json").write_text(json.dumps(index, indent=1))
EOF
}

# Actions of the same observations on aarch64, with each interpreter's venv.
predict_in_root() {
  local name=$1
  step "5b. aarch64 predictions in the root ($name)"
  in_root "$IN/$name/bin/python" - "$IN/artifacts" "$name" <<'EOF'
import json, sys, time
from pathlib import Path
import numpy as np
from rl2edge.runtime import Policy

from rl2edge.errors import BackendError

art, tag = Path(sys.argv[1]), sys.argv[2]
for e in json.loads((art / "index.json").read_text()):
    ref = art / e["ref"]
    obs = np.load(ref / "obs.npy")
    try:
        policy = Policy.load(art / e["name"], explore=False)
    except BackendError as exc:  # compare decides whether this one is expected
        (ref / f"arm-{tag}.error").write_text(str(exc))
        print(f"  {e['name']:22s} cannot load: {exc}")
        continue
    t0 = time.perf_counter()
    np.save(ref / f"arm-{tag}.npy", np.array([policy.predict(o) for o in obs]))
    print(f"  {e['name']:22s} {len(obs)} predictions via {policy.backend_name} in {time.perf_counter() - t0:.1f} s")
EOF
}

# Tolerances (the export's own, export/tolerances.py):
#   discrete: identical actions wherever the source's top-two margin >= 1e-4 (Tolerances.discrete_margin);
#             a near tie may flip between any two conversions or CPUs, so it does not count against.
#   Box:      max |aarch64 - x86| <= 1e-4 x (high - low) for fp32, fp16, dynamic (float arithmetic; only
#             kernel order differs between NEON and AVX2), and <= 2% of the range for int8 (XNNPACK's
#             requantization differs by ISA: one quantization step of the output is within that).
compare() {
  step "5c. compare aarch64 with x86"
  "$MAIN_PY" - "$HOST_IN/artifacts" "$WORK/compare.json" "$@" <<'EOF'
import json, sys
from pathlib import Path
import numpy as np

art, out, tags = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
MARGIN, BOX_FLOAT, BOX_INT8 = 1e-4, 1e-4, 0.02
rows, ok = [], True
for e in json.loads((art / "index.json").read_text()):
    ref = art / e["ref"]
    x86 = np.load(ref / "x86.npy")
    for tag in tags:
        row = {"artifact": e["name"], "mode": e["mode"], "venv": tag, "samples": int(len(x86))}
        if (ref / f"arm-{tag}.error").exists():
            # Known and documented (docs/install.md, tests/test_runtime.py): tflite-runtime 2.14 lacks the
            # FULLY_CONNECTED v12 that TF 2.19 writes into dynamic-range files. Anything else fails.
            err = (ref / f"arm-{tag}.error").read_text()
            expected = tag == "venv-tflite" and e["mode"] == "dynamic" and "FULLY_CONNECTED" in err
            row.update(agree=0, samples=0, error=err.split(":")[-1].strip()[:80] if not expected else
                       "cannot load (expected: TFLite 2.14 lacks FULLY_CONNECTED v12)", tolerance="-", expected_error=expected)
            row["pass"] = expected
            ok &= row["pass"]
            rows.append(row)
            continue
        arm = np.load(ref / f"arm-{tag}.npy")
        if e["discrete"]:
            margins = np.load(ref / "margins.npy")
            differ = arm != x86
            row.update(agree=int((~differ).sum()), near_ties=int((margins < MARGIN).sum()),
                       differ_outside_ties=int((differ & (margins >= MARGIN)).sum()),
                       tolerance=f"same action where margin >= {MARGIN:g}")
            row["pass"] = row["differ_outside_ties"] == 0
        else:
            rng = np.asarray(e["range"], float)
            tol = (BOX_INT8 if e["mode"] == "int8" else BOX_FLOAT) * rng
            diff = np.abs(arm.astype(float) - x86.astype(float)).reshape(len(x86), -1)
            row.update(max_abs_diff=float(diff.max()), tolerance=f"<= {float(tol.max()):g}",
                       agree=int((diff == 0).all(axis=1).sum()))
            row["pass"] = bool((diff <= tol).all())
        ok &= row["pass"]
        rows.append(row)
out.write_text(json.dumps(rows, indent=1))
print("| artifact | mode | venv | samples | identical | near ties | differ outside ties / max abs diff | tolerance | result |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    diff = r.get("error") or (r["differ_outside_ties"] if "differ_outside_ties" in r else f"{r['max_abs_diff']:.2e}")
    print(f"| {r['artifact']} | {r['mode']} | {r['venv']} | {r['samples']} | {r['agree']} | {r.get('near_ties', '-')} "
          f"| {diff} | {r['tolerance']} | {'pass' if r['pass'] else 'FAIL'} |")
sys.exit(0 if ok else 1)
EOF
}

# ------------------------------------------------------------------------------------------------ 6
bench_latency() {
  step "6. rl2edge bench latency (int8 CartPole) in the root: EMULATED timings"
  in_root "$IN/venv-litert/bin/rl2edge" bench latency "$IN/artifacts/cartpole-all/int8" --calls 500 --out "$IN/bench" \
    >"$WORK/bench.log" 2>&1 || { cat "$WORK/bench.log"; fail "bench latency"; return 0; }
  cp "$HOST_IN/bench/latency_artifact.md" "$HOST_IN/bench/latency_artifact.json" "$WORK/"
  cat "$WORK/latency_artifact.md"
}

# ------------------------------------------------------------------------------------------------ 7
free_port() { "$MAIN_PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_log() {  # wait_log FILE PATTERN SECONDS
  local i
  for ((i = 0; i < $3 * 2; i++)); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.5; done
  return 1
}
wait_port() {
  local i
  for ((i = 0; i < 60; i++)); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.5; done
  return 1
}
start_sim() {  # the simulated PLC on the host (it needs gymnasium: the workstation venv)
  "$MAIN_BIN/rl2edge" plc-sim --env CartPole-v1 --endpoint "opc.tcp://127.0.0.1:$PORT" --mode realtime \
    --period-ms 20 "${SIM_SEC[@]}" >>"$WORK/sim-$TAG.log" 2>&1 &
  SIM_PID=$!
  wait_port "$PORT" || { fail "loop $TAG: plc-sim does not listen on $PORT"; return 1; }
}

# serve in the root, plc-sim on the host, loopback between them (a chroot shares the host's network).
# The PLC is killed (-9: no goodbye on the wire) after 10 s of cycles and restarted 3 s later; serve must
# notice, reconnect, keep cycling, and exit 0 on SIGTERM with a summary that shows all of it.
closed_loop() {
  TAG=$1
  local sec=$2 serve_rc=0 summary=$IN/serve-$TAG.json
  step "7. closed loop through a PLC restart (security: $TAG)"
  PORT=$(free_port)
  SIM_SEC=() SERVE_SEC=()
  if [[ $sec == sign_and_encrypt ]]; then
    local pki=$HOST_IN/pki
    "$MAIN_BIN/rl2edge" certs --out "$pki" --name plc --host 127.0.0.1 >/dev/null
    "$MAIN_BIN/rl2edge" certs --out "$pki" --name serve --host 127.0.0.1 >/dev/null
    chmod 600 "$pki"/*.key.pem   # serve refuses a key open to group or others
    SIM_SEC=(--security sign_and_encrypt --cert "$pki/plc.der" --key "$pki/plc.key.pem" --trust "$pki/serve.der")
    SERVE_SEC=(--security sign_and_encrypt --cert "$IN/pki/serve.der" --key "$IN/pki/serve.key.pem"
               --server-cert "$IN/pki/plc.der")
  fi
  start_sim || return 0
  "${IN_ROOT[@]}" "$IN/venv-litert/bin/rl2edge" serve "$IN/artifacts/cartpole-all/int8" \
    --endpoint "opc.tcp://127.0.0.1:$PORT" --period-ms 20 --timeout-ms 500 --summary "$summary" \
    "${SERVE_SEC[@]}" >"$WORK/serve-$TAG.log" 2>&1 &
  local serve_pid=$!
  # Python start-up under qemu takes seconds: count the 10 s from the connection, not from the launch.
  wait_log "$WORK/serve-$TAG.log" "connected to" 120 || { fail "loop $TAG: serve never connected"; tail "$WORK/serve-$TAG.log"; }
  sleep 10
  echo "killing plc-sim (pid $SIM_PID, -9)"
  kill -9 "$SIM_PID"; wait "$SIM_PID" 2>/dev/null || true
  sleep 3
  echo "restarting plc-sim"
  start_sim || true
  wait_log "$WORK/serve-$TAG.log" "reconnected to" 60 || fail "loop $TAG: serve did not reconnect within 60 s"
  sleep 10
  kill -TERM "$serve_pid"
  wait "$serve_pid" || serve_rc=$?
  kill -TERM "$SIM_PID" 2>/dev/null || true; wait "$SIM_PID" 2>/dev/null || true
  grep -E "connected to|connection to .* lost|reconnected|cycles" "$WORK/serve-$TAG.log" | sed 's/^/  serve: /' | head -12
  if [[ ! -f $ROOT$summary ]]; then
    fail "loop $TAG: no summary (serve exit $serve_rc)"; tail -20 "$WORK/serve-$TAG.log"; return 0
  fi
  "$MAIN_PY" - "$ROOT$summary" "$serve_rc" "$TAG" "$WORK/loop-$TAG.json" <<'EOF' || fail "loop $TAG"
import json, sys
s, rc, tag = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3]
r = {"security": s["security"], "exit_code": rc, "cycles": s["cycles"], "connection_losses": s["connection_losses"],
     "reconnects": s["reconnects"], "deadline_misses": s["deadline_misses"], "wall_time_s": round(s["wall_time_s"], 1),
     "latency_ms": s["latency_ms"]}
r["pass"] = rc == 0 and r["cycles"] > 0 and r["connection_losses"] >= 1 and r["reconnects"] >= 1
json.dump(r, open(sys.argv[4], "w"), indent=1)
lat = s["latency_ms"]
print(f"  exit {rc}, cycles {r['cycles']}, connection losses {r['connection_losses']}, reconnects {r['reconnects']}, "
      f"deadline misses {r['deadline_misses']}, latency p50 {lat['p50']:.1f} ms p99 {lat['p99']:.1f} ms (emulated): "
      + ("pass" if r["pass"] else "FAIL"))
sys.exit(0 if r["pass"] else 1)
EOF
}

# ------------------------------------------------------------------------------------------------ 8
write_summary() {
  end_step
  printf '\n== 8. summary  [%s]\n' "$(date +%H:%M:%S)"
  local total=$(( $(date +%s) - T_START ))
  "$MAIN_PY" - "$WORK" "$RESULTS" "$total" "$FAILED" <<'EOF'
import json, sys, datetime
from pathlib import Path
work, results, total, failed = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
def tsv(name):
    p = work / name
    return dict(l.split("\t", 1) for l in p.read_text().splitlines() if "\t" in l) if p.exists() else {}
def load(name):
    p = work / name
    return json.loads(p.read_text()) if p.exists() else None
facts, timings = tsv("facts.tsv"), {k: int(v) for k, v in tsv("timings.tsv").items()}
data = {
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "total_s": total, "passed": not failed, "facts": facts, "step_seconds": timings,
    "imports": {v: load(f"imports-{v}.json") for v in ("venv-litert", "venv-tflite")},
    "compare": load("compare.json"), "bench_latency": load("latency_artifact.json"),
    "closed_loop": [x for x in (load("loop-none.json"), load("loop-sign_and_encrypt.json")) if x],
    "failures": (work / "failures.txt").read_text().splitlines() if (work / "failures.txt").exists() else [],
}
f = facts.get
def mm(s):
    if not (s and s.isdigit()):
        return s or "-"
    return f"{int(s)} s" if int(s) < 60 else f"{int(s) // 60} min {int(s) % 60} s"
md = [f"# aarch64 check under qemu (`scripts/check_arm64.sh`)", "",
      f"{data['date']}: Debian bookworm arm64 root, Python {f('root_python', '?')} under {f('qemu', 'qemu')}, CPU model "
      f"{f('qemu_cpu', '?')}, on an x86-64 host. Total {mm(str(total))}; {'all checks passed' if not failed else 'SOME CHECKS FAILED'}.", "",
      "| what | figure |", "|---|---|",
      "| arm64 root | " + (f"cached (built {f('root_built_on', '?')})" if f("root_build") == "cached" else
                           f"built in {mm(f('root_build'))} (debootstrap download + unpack {f('root_stage1')} s, "
                           f"second stage under qemu {f('root_stage2')} s)") + " |",
      f"| `pip install rl2edge[edge]` (ai-edge-litert) into a fresh venv, from PyPI, no pip cache | {mm(f('install_s_venv-litert'))}, venv {f('venv_mb_venv-litert', '-')} MB |",
      f"| `pip install rl2edge[edge-tflite]` (tflite-runtime) | {mm(f('install_s_venv-tflite'))}, venv {f('venv_mb_venv-tflite', '-')} MB |",
      f"| offline: wheelhouse + `pip install --no-index` ({f('offline_how', '-')}) | {mm(f('offline_install_s'))}, venv {f('offline_venv_mb', '-')} MB |"]
if f("offline_lock_error"):
    md.append(f"| offline: the hashed lock on 3.11 | failed: {f('offline_lock_error').replace('|', '/')} |")
if f("offline_vs_lock"):
    md.append(f"| offline: installed versions | {f('offline_vs_lock')} |")
for v, imp in data["imports"].items():
    if imp:
        md.append(f"| imports ({v}) | runtime, plc_bridge.loop, plc_bridge.client on {imp['machine']}; engines {', '.join(imp['engines'])}; "
                  f"torch/tensorflow/gymnasium/onnxruntime loaded: {imp['loaded'] or 'none'}, installed: {imp['installed'] or 'none'} |")
md += ["", "## x86 vs aarch64 on the same observations", "",
       "Discrete: identical action wherever the source's top-two margin >= 1e-4 (near ties may flip). "
       "Box: max |diff| <= 1e-4 x action range (fp32, fp16, dynamic), <= 2% of the range (int8). The x86 reference "
       "runs ai-edge-litert (the workstation's interpreter), so the venv-tflite rows compare tflite-runtime 2.14 on "
       "aarch64 with ai-edge-litert 2.1 on x86: interpreter and CPU both differ.", "",
       "| artifact | mode | venv | samples | identical | near ties | differ outside ties / max abs diff | tolerance | result |", "|---|---|---|---|---|---|---|---|---|"]
for r in data["compare"] or []:
    diff = r.get("error") or (f"{r['max_abs_diff']:.2e}" if "max_abs_diff" in r else str(r["differ_outside_ties"]))
    md.append(f"| {r['artifact']} | {r['mode']} | {r['venv']} | {r['samples']} | {r['agree']} | {r.get('near_ties', '-')} | {diff} | {r['tolerance']} | {'pass' if r['pass'] else 'FAIL'} |")
if (work / "latency_artifact.md").exists():
    md += ["", "## `rl2edge bench latency` in the root: EMULATED", "",
           "qemu-user translates every arm64 instruction on the x86 host: these figures say nothing about a "
           "Cortex-A78AE; measure on the Orin.", "", (work / "latency_artifact.md").read_text().strip()]
md += ["", "## Closed loop: plc-sim (host, x86) <-> serve (root, aarch64) over loopback, PLC killed (-9) and restarted", "",
       "| security | serve exit | cycles | connection losses | reconnects | deadline misses | p50 ms | p99 ms | result |", "|---|---|---|---|---|---|---|---|---|"]
for r in data["closed_loop"]:
    lat = r["latency_ms"]
    md.append(f"| {r['security']} | {r['exit_code']} | {r['cycles']} | {r['connection_losses']} | {r['reconnects']} | "
              f"{r['deadline_misses']} | {lat['p50']:.1f} | {lat['p99']:.1f} | {'pass' if r['pass'] else 'FAIL'} |")
md += ["", "Latencies in the loop are emulated too (serve runs under qemu).", "", "## Step times", "",
       "| step | seconds |", "|---|---|"] + [f"| {k} | {v} |" for k, v in timings.items()]
if data["failures"]:
    md += ["", "## Failures", ""] + [f"- {x}" for x in data["failures"]]
results.mkdir(parents=True, exist_ok=True)
(results / "arm64_check.json").write_text(json.dumps(data, indent=1) + "\n")
(results / "arm64_check.md").write_text("\n".join(md) + "\n")
print("\n".join(md))
EOF
  echo
  echo "written: $RESULTS/arm64_check.md, $RESULTS/arm64_check.json"
}

# ------------------------------------------------------------------------------------------------ main
mkdir -p "$(dirname "$CACHE")"
exec 9>"$CACHE.lock"   # one check at a time: they share the root
flock -n 9 || { echo "another check_arm64.sh holds $CACHE.lock" >&2; exit 2; }

ensure_qemu
build_root
if [[ $PREPARE == 1 ]]; then end_step; echo "prepared (no emulation run); run without --prepare for the check"; exit 0; fi
mount_root
build_wheel
install_venv venv-litert edge
install_venv venv-tflite edge-tflite
offline_install
check_imports venv-litert
check_imports venv-tflite
make_reference
predict_in_root venv-litert
predict_in_root venv-tflite
compare venv-litert venv-tflite || fail "x86 vs aarch64 actions differ beyond tolerance"
bench_latency
closed_loop none none
[[ ${RL2EDGE_ARM64_SECURE:-1} == 1 ]] && closed_loop sign_and_encrypt sign_and_encrypt
write_summary
echo "total: $(( $(date +%s) - T_START )) s"
[[ $FAILED == 0 ]] || { echo "check_arm64.sh: some checks FAILED (see above)" >&2; exit 1; }
