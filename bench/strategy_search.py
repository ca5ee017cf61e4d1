#!/usr/bin/python3
"""Predicted against measured: `apiary strategy search` ranks the candidates of every
builder by simulated step time on this machine's cost profile; each candidate is then run
for real (`apiary launch ... -- apiary ps`, its replicas and PS devices as processes on
127.0.0.1) and timed. Prints both per candidate, their ratio, and how far the measured step
time of the predicted best is from the measured best.

The measured step time is the wall time between the chief's consecutive step lines (the
first interval left out), which is what the simulated chief's step time covers: pull,
gradient, push, and the chief's full loss in between; the median of --repeats runs, run in
rounds (every candidate once a round) so that a change of the machine over the sitting
moves every candidate alike, their spread printed beside. Beside
it, the processor time every process of the job used per step over the same steps (from
/proc), against the simulated machines' processor time per step. The jobs' connections are
encrypted, as apiary's are by default, and the search charges the profile's encryption cost
per byte (--insecure: plaintext for both). The profile is calibrated at the model's size
(`apiary sim calibrate --features F`): per value, a model far past the caches costs more.

    bench/strategy_search.py [--apiary build/bin/apiary] [--features 1000000] [--sparse] [--insecure] ...
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time


def graph_item(features, sparse):
    w_grad = "gradients/logreg/w_grad/indices:0;gradients/logreg/w_grad/values:0;gradients/logreg/w_grad/shape:0" \
        if sparse else "gradients/logreg/w_grad:0"
    return {"variables": [{"name": "logreg/w:0", "shape": [features], "dtype": "float32", "sparse": sparse},
                          {"name": "logreg/b:0", "shape": [1], "dtype": "float32"}],
            "grad_target_pairs": {w_grad: "logreg/w:0", "gradients/logreg/b_grad:0": "logreg/b:0"}}


def run(cmd, **kw):
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}")
    return done.stdout


TICK = os.sysconf("SC_CLK_TCK")


def median(values):
    """The middle value (the upper one of an even count), as each candidate's figure."""
    return sorted(values)[len(values) // 2]


def tree_cpu(root, roles=None):
    """Processor time (s) that `root` and every process under it have used so far (their
    user and system time in /proc; children they already reaped included). With `roles` (a
    dict), each of those processes that has a RANK in its environment (the job's roles: 0
    the chief, then the other replicas, then the PS devices) also adds its own time there."""
    parent, cpu, own = {}, {}, {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(pid)] = int(fields[1])
        # utime, stime, cutime, cstime
        cpu[int(pid)] = sum(int(x) for x in fields[11:15]) / TICK
        own[int(pid)] = sum(int(x) for x in fields[11:13]) / TICK
    total = 0.0
    for pid, seconds in cpu.items():
        p = pid
        while p in parent and p != root:
            p = parent[p]
        if p == root:
            total += seconds
            if roles is not None and pid != root:
                try:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        rank = [e[5:].decode() for e in f.read().split(b"\0") if e.startswith(b"RANK=")]
                except OSError:
                    rank = []
                if rank:
                    roles[int(rank[0])] = roles.get(int(rank[0]), 0.0) + own[pid]
    return total


def measure(cmd, timeout, per_process=False):
    """The mean wall time (ms) between the chief's step lines, the first interval left
    out, the processor time (ms) all the job's processes used per step over the same
    steps, what went wrong (or ""), and with `per_process` each role's processor time (ms)
    per step over those steps, by RANK."""
    stamps, cpu, roles = [], [], []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        lines.append(line)
        if re.search(r"\bstep \d+ replica 0 version", line):
            stamps.append(time.monotonic())
            roles.append({} if per_process else None)
            cpu.append(tree_cpu(proc.pid, roles[-1]))
        if time.monotonic() > deadline:
            proc.kill()
            break
    rc = proc.wait()
    if rc != 0 or len(stamps) < 3:
        # What went wrong: the error lines (a replica's, the launcher's), not its final values.
        errors = [l for l in lines if re.search(r"apiary ps:|launch:|error|failed", l) and " final " not in l]
        return None, None, "".join(errors[-20:] or lines[-20:]), {}
    gaps = [b - a for a, b in zip(stamps[1:], stamps[2:])]
    steps = len(cpu) - 2
    cpu_ms = 1000.0 * (cpu[-1] - cpu[1]) / steps
    by_role = {r: 1000.0 * (t - roles[1].get(r, 0.0)) / steps for r, t in roles[-1].items()} if per_process else {}
    return 1000.0 * sum(gaps) / len(gaps), cpu_ms, "", by_role


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--apiary", default="build/bin/apiary")
    p.add_argument("--features", type=int, default=1_000_000, help="w's length (4 MB at the default)")
    p.add_argument("--sparse", action="store_true", help="w's gradient sparse: the rows a batch touches")
    p.add_argument("--density", type=float, default=1.0,
                   help="a sample's values other than zero, of the features (below 1: sparse data, whose batches "
                        "touch a few of w's rows, a wide model's embedding; with --sparse only those rows travel)")
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=60,
                   help="steps of each measured job (a job's step time wanders by about a tenth over a few "
                        "steps on a shared machine: 60 steps average it out)")
    p.add_argument("--sim-steps", type=int, default=8, help="steps of each simulated job")
    p.add_argument("--repeats", type=int, default=3, help="measured runs per candidate (their median counts)")
    p.add_argument("--per-process", action="store_true",
                   help="print each role's processor time a step (by RANK: 0 the chief, then the replicas, then the PS "
                        "devices), the median of the runs")
    p.add_argument("--budget", type=int, default=0)
    p.add_argument("--profile", help="a cost profile (default: apiary sim calibrate --features F, here and now)")
    p.add_argument("--insecure", action="store_true",
                   help="plaintext connections: the jobs run --insecure and the search charges no encryption")
    p.add_argument("--port", type=int, default=20000,
                   help="first port of the jobs (64 more per run; stay below the ephemeral ports, 32768 on)")
    a = p.parse_args()
    os.environ.setdefault("UCX_NET_DEVICES", "lo")
    os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")
    work = tempfile.mkdtemp(prefix="strategy_search_")
    graph, spec = os.path.join(work, "graph.json"), os.path.join(work, "resource_spec.yml")
    with open(graph, "w") as f:
        json.dump(graph_item(a.features, a.sparse), f)
    with open(spec, "w") as f:
        f.write("nodes:\n  - address: 127.0.0.1\n    cpus: [%s]\n" % ", ".join(str(i) for i in range(a.replicas)))
    profile = a.profile
    if profile is None:
        profile = os.path.join(work, "profile.json")
        calibrated = run([a.apiary, "sim", "calibrate", "--features", str(a.features), "--density", str(a.density),
                          "--out", profile])
        shown = ("gradient and loss", "sparse gradient and loss", "step work", "transport")
        print("".join(line + "\n" for line in calibrated.splitlines() if line.startswith(shown)), end="")
    model = ["--features", str(a.features), "--samples", str(a.samples), "--batch", str(a.batch),
             "--density", str(a.density)]
    os.makedirs(os.path.join(work, "candidates"))
    out = run([a.apiary, "strategy", "search", "--graph", graph, "--resource-spec", spec, "--profile", profile,
               "--steps", str(a.sim_steps), "--budget", str(a.budget), "--samples", str(a.samples), "--batch",
               str(a.batch), "--density", str(a.density), "--out-dir", os.path.join(work, "candidates")] +
              (["--insecure"] if a.insecure else []))
    print(out, end="")
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s*(\d+)\s{2}(.+?)\s+(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)$", line)
        if m:
            rows.append((int(m.group(1)), m.group(2).strip(), float(m.group(3)), float(m.group(6))))
    sparse = ["--sparse", "logreg/w:0"] if a.sparse else []
    print(f"\n{a.features} features{' (sparse gradient)' if a.sparse else ''}"
          f"{f', density {a.density:g}' if a.density < 1 else ''}, {a.replicas} replicas, batch {a.batch}, "
          f"{a.steps} measured steps per candidate, median of {a.repeats} runs")
    # Rounds: every candidate runs once a round, in rank order, so that what moves the
    # machine over the sitting moves every candidate alike; each candidate's median counts.
    runs = {rank: [] for rank, _, _, _ in rows}  # (ms, CPU ms, CPU ms by RANK) per run
    failed = {}
    for round_ in range(a.repeats):
        for rank, label, _, _ in rows:
            if rank in failed:
                continue
            strategy = os.path.join(work, "candidates", f"{rank}.pb")
            # A port another connection holds (an ephemeral one) fails the run at start:
            # it runs again on the next ports, up to three times.
            for attempt in range(3):
                cmd = [a.apiary, "launch", "--strategy", strategy, "--resource-spec", spec, "--ps-processes",
                       "--port", str(a.port), "--", a.apiary, "ps", "--strategy", strategy, "--resource-spec", spec,
                       "--steps", str(a.steps)] + model + sparse + (["--insecure"] if a.insecure else [])
                ms, cpu_ms, tail, by_role = measure(cmd, timeout=600, per_process=a.per_process)
                a.port += 64
                if ms is not None or "port in use" not in tail:
                    break
                print(f"  round {round_ + 1}: {label}: a port was in use, again on {a.port}", flush=True)
            if ms is None:
                failed[rank] = tail
                continue
            runs[rank].append((ms, cpu_ms, by_role))
            print(f"  round {round_ + 1}: {label:<36} {ms:>10.2f} ms, CPU {cpu_ms:.2f} ms a step", flush=True)
    print(f"{'rank':>4}  {'candidate':<36} {'predicted ms':>13} {'measured ms':>12} {'pred/meas':>10} "
          f"{'CPU ms: predicted':>18} {'measured':>9} {'pred/meas':>10} {'runs ms':>20}")
    measured = {}
    for rank, label, predicted, predicted_cpu in rows:
        if rank in failed:
            print(f"{rank:>4}  {label:<36} {predicted:>13.2f} {'failed':>12}\n{failed[rank]}")
            continue
        times = [run_[0] for run_ in runs[rank]]
        ms, cpu = median(times), median([run_[1] for run_ in runs[rank]])
        measured[rank] = ms
        spread = f"{min(times):.0f}-{max(times):.0f}"
        print(f"{rank:>4}  {label:<36} {predicted:>13.2f} {ms:>12.2f} {predicted / ms:>10.2f} "
              f"{predicted_cpu:>18.2f} {cpu:>9.2f} {predicted_cpu / cpu:>10.2f} {spread:>20}", flush=True)
        if a.per_process:
            seen = sorted({r for _, _, by_role in runs[rank] for r in by_role})
            print("      processor ms a step by RANK: " + ", ".join(
                f"{r}: {median([by_role.get(r, 0.0) for _, _, by_role in runs[rank]]):.1f}" for r in seen))
    if not measured:
        sys.exit("no candidate ran")
    ratios = {rank: predicted / measured[rank] for rank, _, predicted, _ in rows if rank in measured}
    close = sum(1 for r in ratios.values() if 0.8 <= r <= 1.2)
    print(f"\n{close} of {len(ratios)} candidates predicted within 20% of their measured step time "
          f"(predicted / measured {min(ratios.values()):.2f}-{max(ratios.values()):.2f})")
    best_rank = min(measured, key=measured.get)
    best_label = next(label for rank, label, _, _ in rows if rank == best_rank)
    if 1 in measured:
        gap = measured[1] / measured[best_rank] - 1.0
        print(f"predicted best: {rows[0][1]}, measured {measured[1]:.2f} ms; measured best: {best_label}, "
              f"{measured[best_rank]:.2f} ms; the predicted best is {100 * gap:.1f}% slower than the measured best "
              f"({'within' if gap <= 0.10 else 'NOT within'} 10%)")
    print(f"files: {work}")


if __name__ == "__main__":
    main()
