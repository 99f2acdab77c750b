#!/bin/bash
# How sensitive the fidelity check (benchmarks/peers/fidelity.py) is on a model: PyTorch runs it
# once more on the same inputs, then PyTorch and blu start from the weights moved by one ulp each
# (random sign); every run is compared with PyTorch's first. A blu-vs-PyTorch difference no larger
# than PyTorch's own against its ulp-moved run is the check's noise, not a bug of blu's.
#
#   A="--config llama-1b --block 2048 --batch 2" L=120 bash scripts/fidelity_sensitivity.sh
#
# A: the driver's model flags (default LLaMA-1B, 2 x 2048); L: each process's limit in s;
# W: the work folder (weights, batches, logs; default /tmp/wfid); OUT: where the JSON records and
# the comparison go (default /tmp/out). On the GPU machine run it as
# BENCH_CMD="bash scripts/fidelity_sensitivity.sh" scripts/gpu_check.sh bench (the wheels, the
# carried kernel cache and .data set up there). On a CPU with PyTorch, e.g. A="--config llama-125m
# --block 256 --batch 2 --vocab 8192 --fidelity-steps 20".
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
W=${W:-/tmp/wfid}; A=${A:---config llama-1b --block 2048 --batch 2}; L=${L:-150}
timeout 230 python3 benchmarks/gpt2_124m.py $A --modes bf16 --systems torch --no-throughput --fidelity --timeout $L --json $OUT/s0.json --workdir $W 2>&1 | tail -6
WF=$(ls $W/weights-*.npz | head -1)
python3 - "$WF" <<'PY'
import sys, numpy as np, time
t = time.time(); src = sys.argv[1]; rng = np.random.default_rng(1)
with np.load(src) as z:
    out = {}
    for k in z.files:
        w = z[k]
        if w.dtype.kind == "f":
            up = rng.random(w.shape, dtype=np.float32) < 0.5
            w = np.where(up, np.nextafter(w, np.inf), np.nextafter(w, -np.inf)).astype(w.dtype)
        out[k] = w
np.savez(src.replace(".npz", "-ulp.npz"), **out)
print(f"perturbed {len(out)} arrays in {time.time() - t:.0f} s")
PY
WP=${WF%.npz}-ulp.npz
for check in fp32 bf16; do
  cmd=$(head -1 $W/logs/fidelity-torch-$check.log | sed 's/^\$ //')
  echo "== torch $check, ulp-moved weights"
  timeout $L ${cmd/--weights=$WF/--weights=$WP} --out=$OUT/torch-$check-ulp.json 2>&1 | tail -2
  echo "== blu $check, ulp-moved weights"
  bcmd=$(echo "$cmd" | sed -e 's#torch_gpt2.py#blu_gpt2.py#' -e 's# --vocab=.*##')
  cfg=$(echo "$A" | sed -n 's/.*--config \([^ ]*\).*/\1/p'); voc=$(echo "$cmd" | sed -n 's/.*--vocab=\([0-9]*\).*/\1/p')
  timeout $L ${bcmd/--weights=$WF/--weights=$WP} --out=$OUT/blu-$check-ulp.json --config=$cfg --vocab=$voc 2>&1 | tail -2
done
cp $W/fidelity/*.json $OUT/ 2>/dev/null
python3 - $OUT <<'PY'
import sys, json, glob, os
d = sys.argv[1]; R = {os.path.basename(f)[:-5]: json.load(open(f)) for f in glob.glob(d + "/*.json") if "losses" in open(f).read()}
for check in ("fp32", "bf16"):
    base = R.get(f"torch-{check}")
    for k, r in sorted(R.items()):
        if not k.endswith(check) and not k.endswith(check + "-ulp") or base is None or k == f"torch-{check}":
            continue
        rel = [abs(a - b) / abs(b) for a, b in zip(r["losses"], base["losses"])]
        g = r.get("grad_norms", [None])[0], base.get("grad_norms", [None])[0]
        print(f"{k} vs torch-{check}: worst loss rel {max(rel):.2e} at step {rel.index(max(rel)) + 1}; first losses {[round(x, 6) for x in r['losses'][:3]]}; grad norm 1 {g}")
PY
