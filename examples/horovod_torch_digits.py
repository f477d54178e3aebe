#!/usr/bin/env python
"""Horovod's PyTorch MNIST example, unchanged in its Horovod parts, on scikit-learn's digits.

It is written the way Horovod's docs teach (``import horovod.torch as hvd``, ``hvd.init()``,
DistributedSampler, learning rate scaled by ``hvd.size()``, ``broadcast_parameters`` and
``broadcast_optimizer_state`` from rank 0, ``hvd.DistributedOptimizer`` with
``named_parameters`` and compression, metrics averaged with ``hvd.allreduce``).  The data is the
8x8 digits set that ships inside scikit-learn (offline), the network is sized for 8x8 images
(no dropout: the set is small), and each rank seeds its random weights differently on purpose:
the broadcast must make them identical.  Run it with::

    ddlrun --horovod -n 2 python examples/horovod_torch_digits.py
    ddlrun --horovod -n 2 python examples/horovod_torch_digits.py --fp16-allreduce
    wml submit --horovod --nodes 2 examples/horovod_torch_digits.py

At the end every rank compares its weights with every other rank's (exit status 1 if they
differ) and rank 0 reports the test accuracy (exit status 3 below ``--target``).
"""
import argparse
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed

import horovod.torch as hvd

# Training settings
parser = argparse.ArgumentParser(description='PyTorch digits example (Horovod)')
parser.add_argument('--batch-size', type=int, default=32, metavar='N',
                    help='input batch size for training (default: 32)')
parser.add_argument('--test-batch-size', type=int, default=1000, metavar='N',
                    help='input batch size for testing (default: 1000)')
parser.add_argument('--epochs', type=int, default=10, metavar='N',
                    help='number of epochs to train (default: 10)')
parser.add_argument('--lr', type=float, default=0.05, metavar='LR',
                    help='learning rate (default: 0.05)')
parser.add_argument('--momentum', type=float, default=0.9, metavar='M',
                    help='SGD momentum (default: 0.9)')
parser.add_argument('--seed', type=int, default=42, metavar='S',
                    help='random seed; rank r uses seed + r (default: 42)')
parser.add_argument('--log-interval', type=int, default=20, metavar='N',
                    help='how many batches to wait before logging training status')
parser.add_argument('--fp16-allreduce', action='store_true', default=False,
                    help='use fp16 compression during allreduce')
parser.add_argument('--gradient-predivide-factor', type=float, default=1.0,
                    help='apply gradient predivide factor in optimizer (default: 1.0)')
parser.add_argument('--target', type=float, default=0.9,
                    help='test accuracy to reach (exit status 3 below it; 0 disables)')
parser.add_argument('--json', default=None, help='rank 0 writes the results here as JSON')


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(80, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = x.view(-1, 80)
        x = F.relu(self.fc1(x))
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def digits_datasets():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = torch.tensor(digits.images[:, None, :, :] / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0)
    return (torch.utils.data.TensorDataset(x_train, y_train),
            torch.utils.data.TensorDataset(x_test, y_test))


def train(args):
    def train_epoch(epoch):
        model.train()
        # Horovod: set epoch to sampler for shuffling.
        train_sampler.set_epoch(epoch)
        for batch_idx, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
            if batch_idx % args.log_interval == 0 and hvd.rank() == 0:
                # Horovod: use train_sampler to determine the number of examples in
                # this worker's partition.
                print('Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                    epoch, batch_idx * len(data), len(train_sampler),
                    100. * batch_idx / len(train_loader), loss.item()), flush=True)

    def metric_average(val, name):
        tensor = torch.tensor(val)
        avg_tensor = hvd.allreduce(tensor, name=name)
        return avg_tensor.item()

    def test():
        model.eval()
        test_loss = 0.
        test_accuracy = 0.
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                # sum up batch loss
                test_loss += F.nll_loss(output, target, reduction='sum').item()
                # get the index of the max log-probability
                pred = output.data.max(1, keepdim=True)[1]
                test_accuracy += pred.eq(target.data.view_as(pred)).cpu().float().sum().item()

        # Horovod: use test_sampler to determine the number of examples in
        # this worker's partition.
        test_loss /= len(test_sampler)
        test_accuracy /= len(test_sampler)

        # Horovod: average metric values across workers.
        test_loss = metric_average(test_loss, 'avg_loss')
        test_accuracy = metric_average(test_accuracy, 'avg_accuracy')

        # Horovod: print output only on first rank.
        if hvd.rank() == 0:
            print('Test set: Average loss: {:.4f}, Accuracy: {:.2f}%'.format(
                test_loss, 100. * test_accuracy), flush=True)
        return test_loss, test_accuracy

    # Horovod: initialize library.
    hvd.init()
    # Each rank starts from different random weights on purpose: the broadcast below fixes that.
    torch.manual_seed(args.seed + hvd.rank())

    # Horovod: limit # of CPU threads to be used per worker.
    torch.set_num_threads(1)

    train_dataset, test_dataset = digits_datasets()

    # Horovod: use DistributedSampler to partition the training data.
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank(), seed=args.seed)
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, sampler=train_sampler)

    # Horovod: use DistributedSampler to partition the test data.
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_dataset, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=args.test_batch_size,
                                              sampler=test_sampler)

    model = Net()

    # Horovod: scale learning rate by the number of workers.
    lr_scaler = hvd.size()
    optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler,
                          momentum=args.momentum)

    # Horovod: broadcast parameters & optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    # Horovod: (optional) compression algorithm.
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

    # Horovod: wrap optimizer with DistributedOptimizer.
    optimizer = hvd.DistributedOptimizer(optimizer,
                                         named_parameters=model.named_parameters(),
                                         compression=compression,
                                         op=hvd.Average,
                                         gradient_predivide_factor=args.gradient_predivide_factor)

    test_loss, test_accuracy = None, None
    for epoch in range(1, args.epochs + 1):
        train_epoch(epoch)
        test_loss, test_accuracy = test()

    # Not part of Horovod's example: prove that every rank ends with the same weights.
    flat = torch.cat([p.detach().reshape(-1) for p in model.state_dict().values()
                      if p.is_floating_point()]).to(torch.float64)
    everyone = hvd.allgather(flat.unsqueeze(0), name='final_weights')
    max_divergence = float((everyone - everyone[0]).abs().max())
    identical = max_divergence == 0.0
    if hvd.rank() == 0:
        if identical:
            print('all {} rank(s) hold identical weights'.format(hvd.size()), flush=True)
        else:
            print('ERROR: weights differ across ranks (max difference {:g})'.format(max_divergence), flush=True)
        if args.json:
            with open(args.json, 'w') as fh:
                json.dump({'ranks': hvd.size(), 'test_accuracy': test_accuracy, 'test_loss': test_loss,
                           'identical': identical, 'max_divergence': max_divergence,
                           'fp16_allreduce': args.fp16_allreduce,
                           'weights_digest': float(np.abs(flat.numpy()).sum())}, fh, indent=1)
    if not identical:
        return 1
    if args.target and test_accuracy < args.target:
        if hvd.rank() == 0:
            print('ERROR: test accuracy {:.4f} is below the target {}'.format(test_accuracy, args.target), flush=True)
        return 3
    return 0


if __name__ == '__main__':
    raise SystemExit(train(parser.parse_args()))
