"""A one-rank trial that prints its own parameters in its metrics line, as many scripts do:
``--lr X --bs B`` -> ``{"lr": X, "bs": 4*B, "score": 1.0}`` (``bs``: the global batch, four
times the one it was given).  ``--fail-lr X``: exit 3, printing nothing, when lr is X."""
import argparse
import json
import sys

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, required=True)
p.add_argument("--bs", type=int, required=True)
p.add_argument("--fail-lr", type=float)
a = p.parse_args()
if a.lr == a.fail_lr:
    sys.exit(3)
print(json.dumps({"lr": a.lr, "bs": 4 * a.bs, "score": 1.0}))
