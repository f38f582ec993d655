"""Issue 28: what outside trials found the reports did not say. One test per
defect, each with a program of the shape that exposed it (tests/programs/,
none of which imports the harness). Every test here fails before its fix,
for the reason its name gives."""

from __future__ import annotations

import pytest
from programs import dropped_future

from rpc_harness import WorldTimeout

# -- 3: an error lost in a future nobody waited for -------------------------------------


def test_3_a_hang_after_an_injected_error_names_that_error_in_its_headline(rpc_world):
    fault = "raise:worker1@rpc.serve:store#1=disk full"
    with pytest.raises(WorldTimeout) as caught:
        rpc_world.spawn(dropped_future.run_worker, args=(2,), nprocs=2, faults=fault, deadline=3)
    headline = str(caught.value).splitlines()[0]
    assert headline.startswith("rpc world hung"), headline
    assert f"last injected error: {fault} in rank 1 (worker1) on hit 1" in headline, headline
    assert "disk full" in headline, headline
