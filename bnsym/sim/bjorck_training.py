"""Bjorck et al.'s digit ResNet with parts of batch norm switched off, and its training: the names of
:mod:`bnsym.sim.digit_resnet` (the network) and :mod:`bnsym.train.bjorck` (its training on the one loop) that
chapter 12c and the tests import from here."""

from ..train.bjorck import BATCH, DIVERGED_LOSS, MOMENTUM, WEIGHT_DECAY, Training, accuracies, decay, train_networks
from .digit_resnet import EPS, PARTS, Norm, forward, init_params, normalise

__all__ = ["BATCH", "DIVERGED_LOSS", "EPS", "MOMENTUM", "PARTS", "WEIGHT_DECAY", "Norm", "Training", "accuracies",
           "decay", "forward", "init_params", "normalise", "train_networks"]
