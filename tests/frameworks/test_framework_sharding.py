"""shard_indices: equal shares, a partition of the data, and global batches that match one process."""
import pytest

from ddl_runtime.torch import shard_indices


@pytest.mark.parametrize("n,size", [(10, 2), (11, 2), (7, 3), (1437, 2), (5, 8)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_equal_lengths_and_every_sample_used(n, size, shuffle):
    shards = [shard_indices(n, shuffle=shuffle, seed=3, rank_=r, size_=size) for r in range(size)]
    assert len({len(s) for s in shards}) == 1
    assert len(shards[0]) == -(-n // size)
    assert set().union(*map(set, shards)) == set(range(n))


def test_drop_last_partitions_without_repeats():
    shards = [shard_indices(11, drop_last=True, rank_=r, size_=2) for r in range(2)]
    flat = shards[0] + shards[1]
    assert len(flat) == 10 and len(set(flat)) == 10


def test_global_batches_equal_one_process_batches():
    n, size, b = 64, 2, 4
    one = shard_indices(n, shuffle=True, seed=1, epoch=5, rank_=0, size_=1)
    shards = [shard_indices(n, shuffle=True, seed=1, epoch=5, rank_=r, size_=size) for r in range(size)]
    for k in range(n // (b * size)):
        together = sorted(i for s in shards for i in s[k * b:(k + 1) * b])
        assert together == sorted(one[k * b * size:(k + 1) * b * size])


def test_epochs_reshuffle_the_same_way_on_every_rank():
    a = shard_indices(100, shuffle=True, seed=0, epoch=1, rank_=0, size_=1)
    b = shard_indices(100, shuffle=True, seed=0, epoch=2, rank_=0, size_=1)
    assert a != b and sorted(a) == sorted(b)
