"""Setup code a test wants run in every rank before the program: it swaps
``programs.needs_setup.load_dataset`` for a fake that needs no network
(what a test would otherwise do with ``monkeypatch`` in its own process,
which forkserver-forked ranks never see)."""

import os

from programs import needs_setup

FAKE = list(range(10))
ran_in = []  # the pids this setup ran in


def fake_load_dataset():
    return FAKE


def use_fake_dataset():
    needs_setup.load_dataset = fake_load_dataset
    ran_in.append(os.getpid())
