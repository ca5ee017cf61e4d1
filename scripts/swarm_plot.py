"""Draws a swarm run (scripts/swarm.sh) from its JSON-lines log: held-out accuracy and
training loss (on its own shard) of every peer at each epoch, joins and deaths marked at
the swarm's epoch when they happened.
Usage: swarm_plot.py LOG.jsonl OUT.png"""
import json
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    records = []
    with open(sys.argv[1]) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut short by a killed peer
    if not records:
        print(f"no records in {sys.argv[1]}", file=sys.stderr)
        return 1
    start = min(r["time"] for r in records)  # times are kept relative, for ordering
    epochs = defaultdict(list)
    events = []
    for r in records:
        t = r["time"] - start
        if "event" in r:
            events.append((t, r["event"], r["rank"]))
        elif "loss" in r:
            epochs[r["rank"]].append((t, r["epoch"], r["loss"], r["accuracy"]))
    swarm = sorted((t, e) for rank, points in epochs.items() if rank != "solo" for t, e, _, _ in points)

    def epoch_at(t: float) -> float:
        """The swarm's epoch at time t (the largest any peer had reached)."""
        reached = [e for when, e in swarm if when <= t]
        return max(reached) if reached else 0

    fig, (ax_acc, ax_loss) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    colors = plt.get_cmap("tab20").colors
    for index, (rank, points) in enumerate(sorted(epochs.items(), key=lambda kv: (kv[0] == "solo", kv[0]))):
        points.sort(key=lambda p: p[1])
        xs = [p[1] for p in points]
        style = dict(linestyle="--", color="black") if rank == "solo" else dict(color=colors[index % len(colors)])
        ax_acc.plot(xs, [p[3] for p in points], marker=".", label=rank, **style)
        ax_loss.plot(xs, [p[2] for p in points], marker=".", label=rank, **style)
    for when, kind, rank in events:
        t = epoch_at(when) + (0.5 if kind == "death" else 0.0)
        color = "tab:green" if kind == "join" else "tab:red"
        for ax in (ax_acc, ax_loss):
            ax.axvline(t, color=color, alpha=0.35, linewidth=1)
        ax_acc.annotate(f"{kind} {rank}", (t, 0.02), rotation=90, fontsize=7, color=color, va="bottom")
    ax_acc.set_ylabel("held-out accuracy")
    ax_acc.set_ylim(0, 1)
    ax_loss.set_ylabel("training loss")
    ax_loss.set_yscale("log")
    ax_loss.set_xlabel("epoch (green: a peer joined, red: a peer was killed)")
    ax_acc.legend(fontsize=7, ncol=4, loc="lower right")
    ax_acc.set_title("apiary.Optimizer swarm on digits")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"picture: {sys.argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
