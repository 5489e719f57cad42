"""bnsym.nngp on a real 2-worker Dask LocalCluster: the same prior bit for bit with no cluster, 2 workers, after a
worker is killed while tasks are pending, and with 1 worker (the last test retires the other: tests run in order);
the BN-NTK (bnsym.nngp.ntk), which runs on the same tasks, with 2 workers."""

import os
import signal

import numpy as np
import pytest
import torch
from conftest import HANG_SECONDS
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import SchedulerPlugin
from sklearn.base import clone
from sklearn.datasets import load_digits

from bnsym.core.cluster import untrimmed_workers
from bnsym.nngp import BatchNormNNGPClassifier, bn_nngp_priors
from bnsym.nngp.estimators import BatchNormNTKRegressor
from bnsym.nngp.ntk import bn_ntk

DEPTHS, B, CHUNK = [1, 2], 8, 2  # 96 digits: 12 batches, 6 chunks, 21 tiles of pairs


@pytest.fixture(scope="module")
def digits():
    data = load_digits()
    x = data.data[:136]
    x = (x - x.mean(0)) / np.where(x.std(0) > 0, x.std(0), 1.0)
    return x[:96], data.target[:96], x[96:]


@pytest.fixture(scope="module")
def reference(digits):
    """No cluster, torch on 2 threads (so the pool runs two tasks at once)."""
    X, _, X_test = digits
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        return (bn_nngp_priors("relu", X, DEPTHS, B, chunk_batches=CHUNK),
                bn_nngp_priors("relu", X, DEPTHS, B, X_test=X_test, test_covariance=True, chunk_batches=CHUNK))
    finally:
        torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def cluster():
    """Two single-threaded worker processes, bnsym imported in each before any test times out on it."""
    with untrimmed_workers(), LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=":0") as local, Client(local) as client:
        client.run(lambda: __import__("bnsym.nngp"))
        yield local, client


def _assert_same(priors, reference):
    for depth in DEPTHS:
        for field in ("train", "cross", "test_diagonal", "test"):
            expected = getattr(reference[depth], field)
            assert (expected is None) == (getattr(priors[depth], field) is None)
            if expected is not None:
                assert np.array_equal(getattr(priors[depth], field), expected), (depth, field)


def test_same_bits_with_two_workers(digits, reference, cluster):
    X, y, X_test = digits
    _, client = cluster
    _assert_same(bn_nngp_priors("relu", X, DEPTHS, B, chunk_batches=CHUNK, client=client), reference[0])
    _assert_same(bn_nngp_priors("relu", X, DEPTHS, B, X_test=X_test, test_covariance=True, chunk_batches=CHUNK,
                                client=client), reference[1])
    here = BatchNormNNGPClassifier(depth=1, batch_size=B, random_state=0).fit(X, y)  # the estimator forwards its client
    there = BatchNormNNGPClassifier(depth=1, batch_size=B, client=client, random_state=0).fit(X, y)
    assert np.array_equal(here.predict_proba(X_test), there.predict_proba(X_test))
    assert here.log_marginal_likelihood() == there.log_marginal_likelihood()
    assert clone(there).client is client  # a Client cannot be deep-copied: clones share it


def test_ntk_same_bits_with_two_workers(digits, cluster):
    """bn_ntk and the NTK estimator: no cluster (torch on 2 threads) and 2 workers give the same bits."""
    X, y, X_test = digits
    _, client = cluster
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        here = bn_ntk("relu", X, 2, B, X_test=X_test, chunk_batches=CHUNK)
        fitted = BatchNormNTKRegressor(depth=1, batch_size=B, random_state=0).fit(X, y.astype(float))
    finally:
        torch.set_num_threads(previous)
    there = bn_ntk("relu", X, 2, B, X_test=X_test, chunk_batches=CHUNK, client=client)
    assert np.array_equal(here.cross, there.cross) and np.array_equal(here.test_diagonal, there.test_diagonal)
    remote = BatchNormNTKRegressor(depth=1, batch_size=B, client=client, random_state=0).fit(X, y.astype(float))
    assert np.array_equal(fitted.predict(X_test), remote.predict(X_test))
    assert clone(remote).client is client


class KillOnce(SchedulerPlugin):
    """Kills (SIGKILL) the process of a worker that is running tasks, once, when the third task has finished."""

    def __init__(self, scheduler):
        self.scheduler, self.finished, self.killed, self.pending_then = scheduler, 0, None, 0

    def transition(self, key, start, finish, *args, **kwargs):
        if finish != "memory" or self.killed is not None:
            return
        self.finished += 1
        busy = [worker for worker in self.scheduler.workers.values() if worker.processing]
        if self.finished >= 3 and busy:
            self.pending_then = sum(task.state != "memory" for task in self.scheduler.tasks.values())
            self.killed = busy[0].address
            os.kill(busy[0].pid, signal.SIGKILL)


def test_a_killed_worker_is_replaced_and_the_result_is_the_same(digits, reference, cluster):
    X, _, _ = digits
    local, client = cluster
    plugin = KillOnce(local.scheduler)
    local.scheduler.add_plugin(plugin, name="kill-once")
    priors = bn_nngp_priors("relu", X, DEPTHS, B, chunk_batches=CHUNK, client=client)
    local.scheduler.remove_plugin(name="kill-once")
    assert plugin.killed is not None and plugin.pending_then > 0  # killed while tasks were left
    assert plugin.killed not in local.scheduler.workers  # that worker is gone (its nanny starts another)
    _assert_same(priors, reference[0])


def test_same_bits_with_one_worker(digits, reference, cluster):
    X, _, X_test = digits
    local, client = cluster
    client.wait_for_workers(2, timeout=HANG_SECONDS)
    client.retire_workers([sorted(local.scheduler.workers)[0]], close_workers=True)
    assert len(local.scheduler.workers) == 1
    _assert_same(bn_nngp_priors("relu", X, DEPTHS, B, X_test=X_test, test_covariance=True, chunk_batches=CHUNK,
                                client=client), reference[1])
