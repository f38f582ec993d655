"""Asserts that fail in a rank read as pytest reads them in the test process:
the compared values, the intermediate expressions, the diffs of lists and
dicts (rpc_harness._rank.asserts), for ``run`` and ``spawn``, with and without xdist.

Each inner session also fails the same assert in a plain test, and the
rank's explanation must be the one pytest printed there, line for line."""

from __future__ import annotations

import pytest

# As in test_plugin: torch and harness imported before any in-process session.
import torch  # noqa: F401

import rpc_harness  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ENTRIES = """
import torch.distributed.rpc as rpc

def total(xs):
    return sum(xs)

def lists(ctx):
    got = [1, 2, 3]
    if ctx.rank == 1:
        assert got == [1, 2, 4]

def dicts(ctx):
    if ctx.rank == 1:
        assert {"a": 1, "b": 2} == {"a": 1, "b": 3}

def sums(ctx):
    got = [1, 2, 3]
    if ctx.rank == 1:
        assert total(got) == 7, f"rank {ctx.rank} summed {got}"

def program(rank, world_size, check):
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size)
    if rank == 1:
        globals()[check](None)
    rpc.shutdown()

def spawned_lists(ctx):
    got = [1, 2, 3]
    assert got == [1, 2, 4]

def spawned_dicts(ctx):
    assert {"a": 1, "b": 2} == {"a": 1, "b": 3}

def test_here_lists():
    got = [1, 2, 3]
    assert got == [1, 2, 4]

def test_here_dicts():
    assert {"a": 1, "b": 2} == {"a": 1, "b": 3}

def test_here_sums():
    got = [1, 2, 3]
    assert total(got) == 7, f"rank 1 summed {got}"
"""

RUN_TESTS = """
def test_run_lists(rpc_world):
    rpc_world.run(lists, world_size=2)

def test_run_dicts(rpc_world):
    rpc_world.run(dicts, world_size=2)

def test_run_sums(rpc_world):
    rpc_world.run(sums, world_size=2)
"""

SPAWN_TESTS = """
def test_spawn_lists(rpc_world):
    rpc_world.spawn(program, args=(2, "spawned_lists"), nprocs=2)

def test_spawn_dicts(rpc_world):
    rpc_world.spawn(program, args=(2, "spawned_dicts"), nprocs=2)
"""

LISTS = "assert [1, 2, 3] == [1, 2, 4]"
DICTS = "assert {'a': 1, 'b': 2} == {'a': 1, 'b': 3}"
SUMS = "assert 6 == 7"


def run(pytester, *args, fresh=False):
    if fresh:
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=300)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)


def explanations(lines, first):
    """Every explanation pytest printed whose ``E`` line ends with ``first``
    (not a rank's line in the report, which goes on): ``first`` and the
    continuation lines under it (pytest indents them two more columns)."""
    found = []
    for index, line in enumerate(lines):
        if line.startswith("E ") and line.rstrip().endswith(first):
            block = [line[line.index(first):]]
            for more in lines[index + 1:]:
                if not more.startswith("E         ") and not more.startswith("E        +"):
                    break
                block.append(more[len("E       "):].rstrip())
            found.append(block)
    return found


def check_like_the_test_process(lines, first, in_ranks):
    """pytest printed ``first``'s explanation once for the plain test (its
    own ``E`` lines) and ``in_ranks`` times in rank tracebacks; all alike."""
    __tracebackhide__ = True
    blocks = explanations(lines, first)
    assert len(blocks) == 1 + in_ranks, f"{first!r} explained {len(blocks)} times, not {1 + in_ranks}:\n" + "\n".join(lines)
    here, *ranks = blocks
    assert len(here) > 1, f"pytest explained {first!r} in one line: {here}"
    for block in ranks:
        assert block == here


def test_a_failing_assert_in_a_run_entry_reads_as_in_the_test_process(pytester):
    pytester.makepyfile(ENTRIES + RUN_TESTS)
    result = run(pytester)
    result.assert_outcomes(failed=6)
    lines = result.stdout.lines
    check_like_the_test_process(lines, LISTS, 1)
    check_like_the_test_process(lines, DICTS, 1)
    check_like_the_test_process(lines, SUMS, 1)
    out = result.stdout.str()
    assert "At index 2 diff: 3 != 4" in out
    assert "{'b': 2} != {'b': 3}" in out
    assert "+  where 6 = total([1, 2, 3])" in out
    # The rank's line in the report: the values compared, also after the
    # author's message.
    assert f"rank 1 (worker1): raised AssertionError: {LISTS} (in its entry)" in out
    assert f"rank 1 (worker1): raised AssertionError: {DICTS} (in its entry)" in out
    assert f"rank 1 (worker1): raised AssertionError: rank 1 summed [1, 2, 3] ({SUMS}) (in its entry)" in out


def test_a_failing_assert_in_a_spawned_program_reads_as_in_the_test_process(pytester):
    pytester.makepyfile(ENTRIES + SPAWN_TESTS)
    result = run(pytester)
    result.assert_outcomes(failed=5)
    lines = result.stdout.lines
    check_like_the_test_process(lines, LISTS, 1)
    check_like_the_test_process(lines, DICTS, 1)
    assert f"rank 1 (worker1): raised AssertionError: {LISTS} (in its entry)" in result.stdout.str()


# One of the suite's slowest (pytest --durations): an xdist session in a process of its own, its
# eight worlds failing on purpose: asserts must read alike in xdist workers' ranks. One worker
# (-n 1): a second would import torch and start a forkserver again, to run the same code.
@pytest.mark.long
def test_under_xdist_asserts_in_ranks_read_as_in_the_test_process(pytester):
    pytester.makepyfile(ENTRIES + RUN_TESTS + SPAWN_TESTS)
    result = run(pytester, "-p", "xdist", "-n", "1", fresh=True)
    result.assert_outcomes(failed=8)
    lines = result.stdout.lines
    check_like_the_test_process(lines, LISTS, 2)  # run and spawn
    check_like_the_test_process(lines, DICTS, 2)
    check_like_the_test_process(lines, SUMS, 1)


CONFTEST = """
import pytest

pytest.register_assert_rewrite("checks_registered")

def conftest_entry(ctx):
    got = [1, 2, 3]
    assert got == [1, 2, 4]
"""

CHECKS = """
def entry(ctx):
    got = [1, 2, 3]
    assert got == [1, 2, 4], "{name} says no"
"""


def test_conftests_and_registered_modules_are_rewritten_and_other_modules_keep_their_message(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(checks_registered=CHECKS.format(name="registered"),
                        checks_plain=CHECKS.format(name="plain"))
    pytester.makepyfile(test_sources="""
import checks_plain, checks_registered
from conftest import conftest_entry

def test_conftest(rpc_world):
    rpc_world.run(conftest_entry, world_size=1)

def test_registered(rpc_world):
    rpc_world.run(checks_registered.entry, world_size=1)

def test_plain(rpc_world):
    rpc_world.run(checks_plain.entry, world_size=1)
""")
    result = run(pytester)
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    assert f"rank 0 (worker0): raised AssertionError: {LISTS} (in its entry)" in out
    assert f"rank 0 (worker0): raised AssertionError: registered says no ({LISTS}) (in its entry)" in out
    # Counted in the failure sections only: on CI (env CI or BUILD_NUMBER)
    # pytest prints each summary line whole, which repeats every diff.
    failures = out.split("short test summary info")[0]
    assert failures.count("At index 2 diff: 3 != 4") == 2, out
    # A module pytest does not rewrite: the message alone, as before.
    assert "rank 0 (worker0): raised AssertionError: plain says no (in its entry)" in out
    lines = result.stdout.lines
    plain = lines.index("E       AssertionError: plain says no")
    assert not lines[plain + 1].startswith("E       assert"), lines[plain:plain + 3]
