"""What the Python benchmarks share: the implementation under test, imported by name, and
the training data of the collaborative ones."""
import argparse
import importlib
import json
import sys


def implementation(argv=None):
    """Parses --impl (apiary or hivemind) and the benchmark's own flags; returns (module, args)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=["apiary", "hivemind"], required=True)
    return parser


def load(name: str):
    return importlib.import_module(name)


def emit(record: dict) -> None:
    """One result line (JSON) for run.sh to pair with the other implementation's."""
    print("RESULT " + json.dumps(record), flush=True)
    sys.stdout.flush()


def percentile(values, q):
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q / 100.0 * (len(ordered) - 1)))))
    return ordered[index]


def digits(shard: int, shards: int, stratify: bool = False):
    """scikit-learn's digits scaled to [0, 1]: training shard `shard` of `shards` (all of it
    with shards=1), and the held-out quarter (split with seed 0, by class when `stratify`)."""
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.long)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0,
                                                        stratify=y if stratify else None)
    rows = torch.arange(shard, len(x_train), shards)
    return x_train[rows], y_train[rows], x_test, y_test
