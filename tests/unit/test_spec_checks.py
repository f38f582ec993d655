"""The checks a world's spec runs before any process starts
(rpc_harness.spec), each called alone: what each accepts and what it
refuses, with the whole message a user reads."""

from __future__ import annotations

import re

import pytest

from rpc_harness.errors import FaultPlanError, WorldSpecError
from rpc_harness.faults import FaultPlan
from rpc_harness.options import MAX_WORLD_SIZE, WorldOptions
from rpc_harness.spec import (
    check_call_points,
    check_layers,
    check_waits_can_end,
    check_world_size,
    resolve_names,
)


def refused(error: type[Exception], message: str):
    return pytest.raises(error, match=f"^{re.escape(message)}$")


# -- call points -------------------------------------------------------------


def test_a_call_point_must_import_and_name_a_callable():
    check_call_points(FaultPlan.parse("kill:w0@call:json:dumps,kill:w0@a.b"), where="here")
    with refused(
        FaultPlanError,
        "here: kill:w0@call:json:loads_all#1: no such attribute: "
        "module 'json' has no attribute 'loads_all'",
    ):
        check_call_points(FaultPlan.parse("kill:w0@call:json:loads_all"), where="here")


# -- the layers a world brings up --------------------------------------------


def options(**values) -> WorldOptions:
    return WorldOptions.from_values(values, where="test")


def test_a_world_without_rpc_needs_a_group_unless_its_program_brings_up_its_own():
    with refused(
        WorldSpecError,
        "here: rpc=False without a process_group leaves the entry no way to reach its "
        "peers; give process_group='gloo' (or 'nccl'), or keep rpc=True",
    ):
        check_layers(options(rpc=False), spawned=False, where="here")
    check_layers(options(rpc=False), spawned=True, where="here")  # a spawned program inits its own
    check_layers(options(rpc=False, process_group="gloo"), spawned=False, where="here")


def test_faults_on_rpcs_are_named_in_a_world_without_rpc_and_others_pass():
    on_rpcs = "kill:w0@rpc.call:f#1,kill:w0@rpc.serve:g#2,msgfail:w0@RREF_USER_DELETE=2"
    with refused(
        WorldSpecError,
        "here: faults kill:w0@rpc.call:f#1, kill:w0@rpc.serve:g#2, "
        "msgfail:w0@RREF_USER_DELETE=2 act on RPCs, but rpc=False: the world has no RPC agent",
    ):
        check_layers(
            options(rpc=False, process_group="gloo", faults=on_rpcs + ",kill:w0@trainer.step"),
            spawned=False,
            where="here",
        )
    check_layers(
        options(rpc=False, process_group="gloo", faults="kill:w0@trainer.step"),
        spawned=False,
        where="x",
    )
    check_layers(
        options(faults=on_rpcs), spawned=False, where="here"
    )  # with rpc, they are what it is for


# -- waits that cannot end ---------------------------------------------------


def test_a_wait_as_long_as_the_bringup_and_deadline_together_is_refused_unless_optional():
    def check(plan: str) -> None:
        check_waits_can_end(FaultPlan.parse(plan), bringup=20.0, deadline=40.0, where="here")

    check("delay:w0@a.b=59.5s")  # under 20 + 40 s: it can end
    check("delay:w0@a.b=1s")
    check("delay:w0@a.b?=600s")  # optional: it need not fire at all
    check("kill:w0@a.b#600")  # a kill waits for nothing
    with refused(
        FaultPlanError,
        "here: delay:w0@a.b#1+=60s waits 60 s (a number without a unit is seconds: did "
        "you mean 60ms?); it is not optional, so it must fire, and the world cannot end "
        "before its deadline (a bring-up budget of 20 s, then a deadline of 40 s)",
    ):
        check("delay:w0@a.b=60")
    with pytest.raises(FaultPlanError, match="^here: msgdelay:w0@PYTHON_CALL=90s waits 90 s "):
        check("msgdelay:w0@PYTHON_CALL=90s")


# -- world sizes ---------------------------------------------------------------


def test_a_world_size_is_a_whole_number_from_one_to_the_largest():
    assert check_world_size(1, where="here") == 1
    assert check_world_size(MAX_WORLD_SIZE, where="here") == MAX_WORLD_SIZE
    for bad in (True, "3", 2.0):
        with refused(
            WorldSpecError,
            f"here: invalid world_size {bad!r}; use a whole number in 1..{MAX_WORLD_SIZE}",
        ):
            check_world_size(bad, where="here")
    with refused(WorldSpecError, f"here: invalid world_size 0; use 1..{MAX_WORLD_SIZE}"):
        check_world_size(0, where="here")
    with refused(
        WorldSpecError,
        f"here: invalid world_size {MAX_WORLD_SIZE + 1}; use at most {MAX_WORLD_SIZE}",
    ):
        check_world_size(MAX_WORLD_SIZE + 1, where="here")
    with refused(WorldSpecError, "here: invalid nprocs 1; the scenario needs >= 2 ranks"):
        check_world_size(
            1, where="here", what="nprocs", minimum=2, needs="the scenario needs >= 2 ranks"
        )


# -- worker names ------------------------------------------------------------


def test_names_come_from_a_template_or_a_list_and_each_refusal_says_why():
    assert resolve_names(2, None, where="here") == ("worker0", "worker1")
    assert resolve_names(2, "node{rank}", where="here") == ("node0", "node1")
    assert resolve_names(None, ["a", "b:c"], where="here") == ("a", "b:c")
    with refused(WorldSpecError, f"here: invalid world_size 0; use 1..{MAX_WORLD_SIZE}"):
        resolve_names(0, None, where="here")
    with refused(WorldSpecError, "here: give world_size (or a list of names)"):
        resolve_names(None, "node{rank}", where="here")
    with refused(WorldSpecError, "here: names template 'node' must contain '{rank}'"):
        resolve_names(2, "node", where="here")
    with refused(WorldSpecError, "here: 1 names given for world_size=2: ['a']"):
        resolve_names(2, ["a"], where="here")
    with refused(WorldSpecError, "here: names is empty"):
        resolve_names(None, [], where="here")
    for bad in (3, "a b", ""):
        with refused(
            WorldSpecError, f"here: invalid worker name {bad!r}; use 1-128 letters, digits, _ - :"
        ):
            resolve_names(None, ["a", bad], where="here")
    with refused(WorldSpecError, "here: duplicate worker names ['a', 'b']"):
        resolve_names(None, ["b", "a", "c", "a", "b"], where="here")
