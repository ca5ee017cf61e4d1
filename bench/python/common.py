"""What the Python benchmarks share: the implementation under test, imported by name."""
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
