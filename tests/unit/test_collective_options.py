"""The world options process_group and rpc (issue 39): their text forms, and
what is refused before any process starts (CUDA's probes faked as in
test_devices.py)."""

from __future__ import annotations

import pytest
import torch

import rpc_harness
from rpc_harness import options as O
from rpc_harness.errors import Unsupported
from rpc_harness.repro import Repro, decode


def _no_launch(*args, **kwargs):
    raise AssertionError("a process was started for a world that should have been refused")


@pytest.fixture
def refused_here(monkeypatch):
    monkeypatch.setattr("rpc_harness._parent.launcher.launch", _no_launch)


def test_an_unknown_backend_is_refused_naming_the_choices(refused_here):
    with pytest.raises(rpc_harness.WorldSpecError,
                       match=r"^run_world\(\): invalid process_group 'mpi'; use one of: 'gloo' .*'nccl'"):
        rpc_harness.run_world("programs.echo:echo", world_size=2, process_group="mpi")


def test_nccl_is_refused_without_cuda(refused_here, monkeypatch):
    monkeypatch.setattr("rpc_harness._cuda_fork.cuda_available", lambda: False)
    with pytest.raises(Unsupported, match=r"^run_world\(\): process_group='nccl' needs one GPU a rank, but CUDA is "
                                          r"not available here .*; use process_group='gloo', or run it on a machine "
                                          r"with a GPU for each rank$"):
        rpc_harness.run_world("programs.echo:echo", world_size=4, process_group="nccl")
    # (Not "with 1 GPUs": the option is checked before the world has a size; outside-user trial.)


def test_nccl_is_refused_where_the_gpus_are_fewer_than_the_ranks(refused_here, monkeypatch):
    monkeypatch.setattr("rpc_harness._cuda_fork.cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(Unsupported, match=r"needs one GPU a rank: 3 ranks, but 2 GPU\(s\)"):
        rpc_harness.run_world("programs.echo:echo", world_size=3, process_group="nccl")
    with pytest.raises(Unsupported, match=r"needs one GPU a rank: 2 ranks, but devices='cuda:1'"):
        rpc_harness.spawn("programs.echo:run_worker", args=(2,), nprocs=2, process_group="nccl", devices="cuda:1")
    launched = []
    monkeypatch.setattr("rpc_harness._parent.launcher.launch", lambda spec, **_: launched.append(spec) or _Stop.throw())
    with pytest.raises(_Stop):  # as many GPUs as ranks: it goes ahead
        rpc_harness.run_world("programs.echo:echo", world_size=2, process_group="nccl", rpc=False)
    assert launched[0].options.placed_devices == ("cuda",), "one GPU a rank, cuda:rank"


class _Stop(Exception):
    @classmethod
    def throw(cls):
        raise cls


def test_a_run_world_with_neither_rpc_nor_a_group_is_refused(refused_here):
    with pytest.raises(rpc_harness.WorldSpecError, match=r"rpc=False without a process_group leaves the entry no "
                                                         "way to reach its peers"):
        rpc_harness.run_world("programs.echo:echo", world_size=2, rpc=False)


@pytest.mark.parametrize("fault", ["kill:worker1@rpc.call:echo#1", "msgfail:worker1@RREF_USER_DELETE=2"])
def test_faults_on_rpcs_are_refused_in_a_world_without_rpc(refused_here, fault):
    with pytest.raises(rpc_harness.WorldSpecError, match=r"act on RPCs, but rpc=False: the world has no RPC agent"):
        rpc_harness.run_world("programs.echo:echo", world_size=2, process_group="gloo", rpc=False, faults=fault)


def test_the_text_forms_of_the_pytest_flags_and_ini_keys():
    assert O.DECLARED["process_group"].flag == "--rpc-process-group"
    assert O.DECLARED["rpc"].ini == "rpc_agent"
    for text, value in (("no", False), ("False", False), ("0", False), ("yes", True), ("on", True)):
        assert O.DECLARED["rpc"].read(text, "--rpc-agent") is value
    with pytest.raises(rpc_harness.WorldSpecError, match=r"^--rpc-agent: rpc must be True or False \(yes or no in a flag "
                                                         r"or an ini key\), got 'maybe'"):
        O.DECLARED["rpc"].read("maybe", "--rpc-agent")
    assert O.DECLARED["process_group"].read("gloo", "--rpc-process-group") == "gloo"


def test_a_collective_world_replays_from_its_token():
    repro = Repro(world_size=4, seed=3, entry="m:f", options={"process_group": "gloo", "rpc": False})
    assert decode(repro.token()).options["process_group"] == "gloo"
    assert decode(repro.token()).options["rpc"] is False
    assert "rpc" not in Repro(world_size=2, seed=3, entry="m:f", options={"rpc": True}).options, "the default"
