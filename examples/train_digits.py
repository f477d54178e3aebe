#!/usr/bin/env python
"""Data-parallel training of a small CNN on scikit-learn's digits (torch, CPU).

Runs as it is on one process, or on N ranks under any MPI launcher::

    python examples/train_digits.py
    mpiexec -n 2 python examples/train_digits.py
    ddlrun -n 2 python examples/train_digits.py
    wml submit --nodes 2 examples/train_digits.py

The changes from a single-process script are the usual four, marked ``# DDL:`` below:
shard the data by rank, scale the learning rate by the number of ranks, start every rank from
rank 0's weights, and average the gradients every step.  Rank 0 logs; at the end every rank
checks that all ranks hold identical parameters (exit status 1 if they do not), and rank 0
prints one JSON line of metrics (``{"loss": ..., "acc": ..., "test_acc": ..., "seconds": ...}``),
which a sweep's trial records (``wml sweep show RUN --sort loss``, ``wml report RUN``).

The digits data (1,797 8x8 images) ships inside scikit-learn: nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Dict, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import BatchSampler, DataLoader, TensorDataset

import ddl_runtime
import ddl_runtime.torch as ddl  # DDL: the runtime's PyTorch integration


class DigitsNet(nn.Module):
    """Two 3x3 convolutions, one 2x2 pool, two dense layers (~38k parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def digits_arrays() -> Tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits: (1797, 8, 8) images with values 0..16, and their labels.

    Read straight from the CSV that ships inside scikit-learn (what ``load_digits`` reads),
    which saves every rank the ~2 s import of ``sklearn.datasets``.
    """
    import gzip
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    for base in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(base, "datasets", "data", "digits.csv.gz")
        if os.path.exists(path):
            with gzip.open(path, "rt") as fh:
                data = np.loadtxt(fh, delimiter=",")
            return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits  # a layout we do not know: the public API

    digits = load_digits()
    return digits.images, digits.target


def load_data(test_fraction: float = 0.2, split_seed: int = 0) -> Tuple[torch.Tensor, ...]:
    """(x_train, y_train, x_test, y_test): the same split on every rank."""
    images, labels = digits_arrays()
    x = torch.tensor(images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(labels, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(split_seed))
    n_test = int(round(len(y) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer,
               xb: torch.Tensor, yb: torch.Tensor) -> Tuple[float, int]:
    """One step: forward, backward (gradient reductions start here), averaged update."""
    optimizer.zero_grad()
    out = model(xb)
    loss = F.cross_entropy(out, yb)
    loss.backward()
    optimizer.step()
    return float(loss.detach()), int((out.argmax(1) == yb).sum())


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Accuracy on the whole set, each rank scoring its shard; counts are summed over ranks."""
    idx = torch.from_numpy(ddl_runtime.shard(np.arange(len(y))))  # = np.array_split(.., size)[rank]
    model.eval()
    with torch.no_grad():
        correct = int((model(x[idx]).argmax(1) == y[idx]).sum()) if len(idx) else 0
    model.train()
    counts = np.array([correct, len(idx)], dtype=np.float64)
    if ddl.size() > 1:
        counts = np.asarray(ddl_runtime.allreduce(counts, op="sum"))
    return float(counts[0] / counts[1])


class EpochBar:
    """Rank 0's progress: a rich bar on a terminal, one plain line per epoch otherwise."""

    def __init__(self, epochs: int, steps: int, enabled: bool) -> None:
        self.epochs, self.steps, self.enabled = epochs, steps, enabled
        self.rich = None
        if enabled and sys.stdout.isatty():
            try:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

                self.rich = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TextColumn("{task.fields[info]}"))
            except ImportError:  # pragma: no cover - rich is a wml dependency
                self.rich = None
        self.task = None

    def __enter__(self) -> "EpochBar":
        if self.rich is not None:
            self.rich.__enter__()
            self.task = self.rich.add_task("training", total=self.epochs * self.steps, info="")
        return self

    def __exit__(self, *exc) -> None:
        if self.rich is not None:
            self.rich.__exit__(*exc)

    def advance(self) -> None:
        if self.rich is not None:
            self.rich.advance(self.task)

    def epoch_done(self, epoch: int, text: str) -> None:
        if not self.enabled:
            return
        if self.rich is not None:
            self.rich.update(self.task, info=text, description=f"epoch {epoch}/{self.epochs}")
            self.rich.console.print(f"epoch {epoch:>3}/{self.epochs}  {text}")
        else:
            width = 20
            done = round(width * epoch / self.epochs)
            print(f"epoch {epoch:>3}/{self.epochs} [{'#' * done}{'.' * (width - done)}] {text}", flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size (default 32)")
    p.add_argument("--lr", type=float, default=0.02, help="single-rank learning rate; scaled by the number of ranks")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    p.add_argument("--target", type=float, default=0.95,
                   help="test accuracy to reach (exit status 3 below it; 0 disables)")
    p.add_argument("--checkpoint", default=None, help="rank 0 saves the final model here")
    p.add_argument("--json", default=None, help="rank 0 writes the results here as JSON")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    ddl.init()
    rank, size = ddl.rank(), ddl.size()

    x_train, y_train, x_test, y_test = load_data()
    # DDL: each rank trains on its own share of the (reshuffled each epoch) training set.
    sampler = ddl.ShardSampler(len(y_train), shuffle=True, seed=args.seed)
    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=None,
                        sampler=BatchSampler(sampler, args.batch_size, drop_last=False))

    # Every rank starts from different random weights on purpose; the broadcast fixes that.
    torch.manual_seed(args.seed + 1000 * rank)
    model = DigitsNet()
    # DDL: scale the learning rate by the number of ranks (the global batch is size x larger).
    optimizer = torch.optim.SGD(model.parameters(), lr=ddl.scale_lr(args.lr), momentum=args.momentum)
    # DDL: average gradients across ranks; reductions overlap the backward pass.
    optimizer = ddl.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    # DDL: start every rank from rank 0's weights (and optimizer state).
    ddl.broadcast_parameters(model.state_dict(), root_rank=0)
    ddl.broadcast_optimizer_state(optimizer, root_rank=0)

    n_params = sum(p.numel() for p in model.parameters())
    ddl.log(f"digits CNN: {n_params} parameters, {size} rank(s) x batch {args.batch_size}, "
            f"{len(y_train)} train / {len(y_test)} test images, lr {optimizer.param_groups[0]['lr']:g}, "
            f"{args.threads} thread(s) per rank")

    history = []
    start = time.perf_counter()
    with EpochBar(args.epochs, len(loader), enabled=ddl.is_root()) as bar:
        for epoch in range(1, args.epochs + 1):
            sampler.set_epoch(epoch)
            t0 = time.perf_counter()
            loss_sum, correct, seen = 0.0, 0, 0
            for xb, yb in loader:
                loss, ok = train_step(model, optimizer, xb, yb)
                loss_sum += loss * len(yb)
                correct += ok
                seen += len(yb)
                bar.advance()
            dt = time.perf_counter() - t0
            train_loss = ddl.metric_average(loss_sum / seen)
            train_acc = ddl.metric_average(correct / seen)
            test_acc = evaluate(model, x_test, y_test)
            rate = seen * size / dt
            history.append({"epoch": epoch, "loss": train_loss, "accuracy": train_acc,
                            "test_accuracy": test_acc, "seconds": dt, "samples_per_s": rate})
            bar.epoch_done(epoch, f"loss {train_loss:.4f}  acc {train_acc:.4f}  "
                                  f"test acc {test_acc:.4f}  {rate:,.0f} samples/s")
    elapsed = time.perf_counter() - start

    # Every rank holds the same model, or something is badly wrong: check it, do not assume it.
    divergence = ddl.parameters_max_divergence(model)
    identical = divergence == 0.0
    final_acc = history[-1]["test_accuracy"] if history else 0.0
    if args.checkpoint:
        ddl.save_checkpoint({"model": model.state_dict(), "epochs": args.epochs}, args.checkpoint)
    if identical:
        ddl.log(f"all {size} rank(s) hold identical parameters ({n_params} values compared)")
    else:
        ddl.log(f"ERROR: parameters differ across ranks (max difference {divergence:g})")
    ddl.log(f"final test accuracy {final_acc:.4f} after {args.epochs} epochs in {elapsed:.1f} s")
    if ddl.is_root() and history:
        # one JSON line of metrics: a sweep's trial result (wml sweep show --sort loss, wml report's plot)
        last = history[-1]
        print(json.dumps({"loss": round(last["loss"], 6), "acc": round(last["accuracy"], 6),
                          "test_acc": round(final_acc, 6), "seconds": round(elapsed, 3)}), flush=True)
    if args.json and ddl.is_root():
        with open(args.json, "w") as fh:
            json.dump({"ranks": size, "test_accuracy": final_acc, "identical": identical,
                       "max_divergence": divergence, "epochs": history, "seconds": elapsed,
                       "batch_size": args.batch_size, "lr": optimizer.param_groups[0]["lr"]}, fh, indent=1)
    if not identical:
        return 1
    if args.target and final_acc < args.target:
        ddl.log(f"ERROR: test accuracy {final_acc:.4f} is below the target {args.target}")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
