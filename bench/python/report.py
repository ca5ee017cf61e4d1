"""Pairs each workload's RESULT lines from apiary and hivemind and prints both and the
ratio; where the same workload ran through apiary's C++ API too (<name>.cpp), prints the
Python figure beside the C++ one and their ratio (the Python module's overhead). The
collaborative Optimizer's figures (bench_optimizer.py) get a table of their own."""
import glob
import json
import os
import statistics
import sys

LOWER_IS_BETTER = ("_ms", "_s", "bytes", "mse")


def records(path):
    out = []
    for line in open(path, errors="replace"):
        if line.startswith("RESULT "):
            out.append(json.loads(line[len("RESULT "):]))
    return out


def key_of(r):
    return tuple((k, r[k]) for k in ("bench", "codec", "workload", "peers", "mib") if k in r)


def main(folder):
    names = sorted({os.path.basename(p).rsplit(".", 1)[0] for p in glob.glob(os.path.join(folder, "*.apiary"))} |
                   {os.path.basename(p).rsplit(".", 1)[0] for p in glob.glob(os.path.join(folder, "*.hivemind"))})
    print(f"{'workload':34} {'figure':16} {'apiary':>12} {'hivemind':>12} {'hivemind/apiary':>16}")
    for name in names:
        ours = {key_of(r): r for r in records(os.path.join(folder, name + ".apiary")) if r.get("bench") != "optimizer"
                } if os.path.exists(os.path.join(folder, name + ".apiary")) else {}
        theirs = {key_of(r): r for r in records(os.path.join(folder, name + ".hivemind"))
                  if r.get("bench") != "optimizer"} if os.path.exists(os.path.join(folder, name + ".hivemind")) else {}
        for key in sorted(set(ours) | set(theirs), key=str):
            a, h = ours.get(key, {}), theirs.get(key, {})
            label = name + ("" if "codec" not in dict(key) else f" {dict(key)['codec']}")
            fields = [k for k in list(a) + [k for k in h if k not in a] if k not in dict(key) and k != "bench"]
            for f in fields:
                va, vh = a.get(f), h.get(f)
                if isinstance(va, str) or isinstance(vh, str):
                    print(f"{label:34} {f:16} {str(va)[:12]:>12} {str(vh)[:12]:>12}")
                    continue
                ratio = ""
                if isinstance(va, (int, float)) and isinstance(vh, (int, float)) and va:
                    ratio = f"{vh / va:.2f}x"
                fa = "-" if va is None else f"{va:.4g}"
                fh = "-" if vh is None else f"{vh:.4g}"
                print(f"{label:34} {f:16} {fa:>12} {fh:>12} {ratio:>16}")


# The optimizer table's rows: (RESULT family, field, label); {target} is the accuracy timed.
OPTIMIZER_ROWS = [
    ("epochs", "epochs", "epochs reached"),
    ("epochs", "epoch_median_s", "seconds per epoch, median"),
    ("epochs", "epoch_max_s", "seconds per epoch, max"),
    ("epochs", "step_median_s", "seconds per step() call, median"),
    ("epochs", "step_max_s", "seconds per step() call, max"),
    ("epochs", "startup_max_s", "seconds to start a peer, slowest"),
    ("epochs", "success", "peers that finished cleanly"),
    ("traffic", "bytes_per_epoch", "bytes per epoch, all peers"),
    ("traffic", "bytes_total", "bytes in all"),
    ("accuracy", "time_to_target_s", "seconds to accuracy {target}"),
    ("accuracy", "epoch_at_target", "epoch at accuracy {target}"),
    ("accuracy", "final_accuracy", "final held-out accuracy"),
]


def optimizer_table(folder):
    """The collaborative Optimizer (optimizer_s<SEED>.apiary / .hivemind, one run per seed;
    optimizer.<impl> counts as seed 0): each figure's median over the seeds, apiary beside
    hivemind with the ratio, then the time to the target accuracy of each seed. A seed
    that never reached the target counts as the slowest. A figure one side lacks shows '-'."""
    runs = {"apiary": {}, "hivemind": {}}  # impl -> seed -> workload -> record
    for impl in runs:
        for path in sorted(glob.glob(os.path.join(folder, f"optimizer*.{impl}"))):
            name = os.path.basename(path).rsplit(".", 1)[0]
            seed = int(name[len("optimizer_s"):]) if name.startswith("optimizer_s") else 0
            runs[impl][seed] = {r.get("workload"): r for r in records(path) if r.get("bench") == "optimizer"}
    if not any(runs.values()):
        return
    first = [by_workload for impl in runs for by_workload in runs[impl].values()]
    shape = next((r["epochs"] for r in first if "epochs" in r), {})
    target = next((r["accuracy"].get("target") for r in first if "accuracy" in r), "?")
    seeds = sorted(set(runs["apiary"]) | set(runs["hivemind"]))
    print()
    print(f"optimizer: {shape.get('peers', '?')} peers ({shape.get('clients', '?')} in client mode), "
          f"target_batch_size {shape.get('target_batch_size', '?')}, up to {shape.get('max_epochs', '?')} epochs"
          f"{', delayed updates' if shape.get('delayed_updates') else ''}; median over seeds "
          f"{', '.join(map(str, seeds))}")
    print(f"{'figure':34} {'apiary':>12} {'hivemind':>12} {'hivemind/apiary':>16}")
    for impl in runs:
        if not runs[impl]:
            print(f"{'(no result: ' + impl + ')':34}")
        for seed, by_workload in sorted(runs[impl].items()):
            for family, record in sorted(by_workload.items(), key=lambda item: str(item[0])):
                for note in ("error", "bytes_note"):
                    if note in record:
                        print(f"{impl + ' seed ' + str(seed) + ' ' + family + ' ' + note:34} {record[note]}")

    def median_of(impl, family, field):
        values = [by_workload.get(family, {}).get(field) for by_workload in runs[impl].values()]
        if field in ("time_to_target_s", "epoch_at_target"):  # not reached: the slowest
            values = [float("inf") if v is None and family in by_workload else v
                      for v, by_workload in zip(values, runs[impl].values())]
        numbers = sorted(v for v in values if isinstance(v, (int, float)))
        if not numbers:
            return next((v for v in values if isinstance(v, str)), None)
        return statistics.median(numbers)

    def row(label, va, vh):
        if isinstance(va, str) or isinstance(vh, str):
            print(f"{label:34} {str(va)[:12]:>12} {str(vh)[:12]:>12}")
            return
        finite = [isinstance(v, (int, float)) and v != float("inf") for v in (va, vh)]
        ratio = f"{vh / va:.2f}x" if all(finite) and va else ""
        fa = "-" if not finite[0] else f"{va:.4g}"
        fh = "-" if not finite[1] else f"{vh:.4g}"
        print(f"{label:34} {fa:>12} {fh:>12} {ratio:>16}")

    for family, field, label in OPTIMIZER_ROWS:
        row(label.format(target=target), median_of("apiary", family, field), median_of("hivemind", family, field))
    if len(seeds) > 1:
        for seed in seeds:
            va, vh = (runs[impl].get(seed, {}).get("accuracy", {}).get("time_to_target_s") for impl in runs)
            row(f"seconds to accuracy {target}, seed {seed}", va, vh)


def python_overhead(folder):
    rows = []
    for path in sorted(glob.glob(os.path.join(folder, "*.cpp"))):
        name = os.path.basename(path).rsplit(".", 1)[0]
        native = {key_of(r): r for r in records(path)}
        python = {key_of(r): r for r in records(os.path.join(folder, name + ".apiary"))} if os.path.exists(
            os.path.join(folder, name + ".apiary")) else {}
        for key in sorted(set(native) | set(python), key=str):
            c, p = native.get(key, {}), python.get(key, {})
            for f in [k for k in list(p) + [k for k in c if k not in p] if k not in dict(key) and k != "bench"]:
                vc, vp = c.get(f), p.get(f)
                ratio = f"{vp / vc:.2f}x" if isinstance(vc, (int, float)) and isinstance(vp, (int, float)) and vc else ""
                fc = "-" if vc is None else f"{vc:.4g}"
                fp = "-" if vp is None else f"{vp:.4g}"
                rows.append(f"{name:34} {f:24} {fp:>12} {fc:>12} {ratio:>12}")
    if rows:
        print()
        print(f"{'workload':34} {'figure':24} {'apiary py':>12} {'apiary C++':>12} {'py/C++':>12}")
        print("\n".join(rows))


if __name__ == "__main__":
    main(sys.argv[1])
    optimizer_table(sys.argv[1])
    python_overhead(sys.argv[1])
