#!/usr/bin/env bash
# real-kvm-ci.sh: prove tsc-rendezvous on real (SVM) KVM semantics on a machine
# without VMX/SVM, by booting a Debian kernel with kvm_amd under QEMU TCG
# (run-in-qemu.sh beside this file) and running, inside:
#   1. `tsc-rendezvous check --json`: checks 1-5 must PASS;
#   2. `tsc-rendezvous run --json`: every variant's writes_honoured must be true,
#      with no disagreement between the readback methods;
#   3. the real-VM integration tests (tests/kvm_run.rs), whose assertions for
#      honouring hosts (offset delta == TSC_ADJUST delta, skew from the offsets)
#      only run on such a host.
# The JSON comes back over the serial console. Exits non-zero on any failure or
# timeout. Takes a few minutes (emulation is slow); every boot is bounded.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
boot_timeout="${TSC_QEMU_BOOT_TIMEOUT:-420}"
target="x86_64-unknown-linux-gnu"
target_dir="$root/target/static"
work="$(mktemp -d "${TMPDIR:-/tmp}/tsc-real-kvm.XXXXXX")"

log() { printf 'real-kvm-ci: %s\n' "$*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

log "building statically linked binaries (target dir $target_dir)"
export RUSTFLAGS="-C target-feature=+crt-static"
cargo build --release --locked --target "$target" --target-dir "$target_dir" --bin tsc-rendezvous
bin="$target_dir/$target/release/tsc-rendezvous"
test_bin="$(cargo test --release --locked --target "$target" --target-dir "$target_dir" \
    --test kvm_run --no-run --message-format=json 2>/dev/null \
    | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "kvm_run":
        print(m["executable"])
')"
unset RUSTFLAGS
[ -x "$bin" ] || fail "no static tsc-rendezvous at $bin"
if [ -z "$test_bin" ] || [ ! -x "$test_bin" ]; then
    fail "no static kvm_run test binary"
fi

boot() { # name, then the program and its arguments
    local name=$1
    shift
    log "booting for: $name"
    local rc=0
    bash "$here/run-in-qemu.sh" --timeout "$boot_timeout" --workdir "$work/$name" -- "$@" \
        >"$work/$name.console" 2>&1 || rc=$?
    if [ ! -f "$work/$name/prog-output.txt" ]; then
        tail -n 40 "$work/$name.console" >&2 || true
        fail "$name: no program output (run-in-qemu.sh exited $rc)"
    fi
    return "$rc"
}

# 1. check
rc=0
boot check "$bin" check --json --rounds 50 --warp-iterations 5000 || rc=$?
python3 - "$work/check/prog-output.txt" "$rc" <<'PY' || fail "check: real-KVM expectations not met (output in $work/check)"
import json, sys
text = open(sys.argv[1]).read()
start = text.find("{")
doc, _ = json.JSONDecoder().raw_decode(text[start:])
env = doc["environment"]
print(f"check inside QEMU: kernel {env['kernel_release']}, flavour {env['kvm_flavor']}, exit {sys.argv[2]}")
bad = []
for c in doc["checks"]:
    print(f"  {c['verdict']} {c['number']}. {c['id']}: {c['reason']}")
    if c["number"] <= 5 and c["verdict"] != "PASS":
        bad.append(c["id"])
if env["kvm_flavor"] not in ("svm", "vmx"):
    sys.exit(f"not a real KVM: {env['kvm_flavor']}")
if bad:
    sys.exit(f"checks not passing on real KVM: {bad}")
if sys.argv[2] != "0":
    sys.exit(f"check exited {sys.argv[2]}")
PY

# 2. run
rc=0
boot run "$bin" run --json --vcpus 2 --rounds 20 || rc=$?
[ "$rc" -eq 0 ] || fail "run exited $rc (output in $work/run)"
python3 - "$work/run/prog-output.txt" <<'PY' || fail "run: real-KVM expectations not met (output in $work/run)"
import json, sys
text = open(sys.argv[1]).read()
doc, _ = json.JSONDecoder().raw_decode(text[text.find("{"):])
for run in doc["runs"]:
    rounds = run["rounds"]
    dis = sum(len(r["disagreements"]) for r in rounds)
    honoured = run["writes_honoured"]
    exact = all(v["offset_delta"] == v["tsc_adjust_delta"] for r in rounds for v in r["vcpus"])
    print(f"run inside QEMU: {run['variant']}: {len(rounds)} rounds, writes_honoured={honoured}, "
          f"median skew {run['summary']['skew_cycles']['median']:.0f} cycles, disagreements {dis}")
    if honoured is not True or dis or not exact:
        sys.exit(f"{run['variant']}: honoured={honoured}, disagreements={dis}, exact={exact}")
PY

# 3. the integration tests' real-KVM assertions (the library-level ones; the
# binary-spawning tests need the host's build tree).
rc=0
boot tests "$test_bin" --test-threads 1 every_variant host_facts || rc=$?
grep -E "^test |test result" "$work/tests/prog-output.txt" >&2 || true
[ "$rc" -eq 0 ] || fail "kvm_run tests failed inside QEMU (exit $rc; output in $work/tests)"
grep -q "test result: ok. 2 passed" "$work/tests/prog-output.txt" || fail "kvm_run tests did not run both tests"

log "all real-KVM expectations met (logs in $work)"
