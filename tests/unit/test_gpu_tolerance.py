"""How a GPU run's gradients are held to the CPU baseline, tested on the CPU.

A GPU may break a near-tie of a ReLU or a max-pool the other way: one
element moves by 1% and more, the tensor does not. An H100 run of the
parameter server failed elementwise bounds so, and passed the next run.
The same happens on the CPU between float64 and float32, another rounding
of the same sums: that is the GPU's stand-in here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rpc_harness.gradcheck import close, compare
from rpc_harness.scenarios import _device
from rpc_harness.scenarios.parameter_server.baseline import baseline, default_order
from rpc_harness.scenarios.parameter_server.config import Config
from rpc_harness.scenarios.parameter_server.data import trainer_batches
from rpc_harness.scenarios.parameter_server.model import build_net, dropout_seed

ON_CUDA = _device.tolerances(0.0, 0.0, "cuda:0")
# The bounds a GPU run was held to before, element by element (they flaked on an H100).
ELEMENTWISE = {"rtol": 1e-4, "atol": 1e-5, "norm": False}
CONFIG = Config()


def test_on_cuda_a_tensor_is_compared_as_a_whole():
    torch.manual_seed(0)
    expected = torch.randn(64, 16) * 1e-2
    tie = expected.clone()
    tie[3, 4] += 0.05 * expected.abs().max()  # one term of a sum moved: far past elementwise bounds
    assert not close(tie, expected, **ELEMENTWISE)
    assert close(tie, expected, **ON_CUDA)
    assert not close(expected * 1.1, expected, **ON_CUDA), "10% of the whole tensor is no rounding"
    nan = expected.clone()
    nan[0, 0] = float("nan")
    assert not close(nan, expected, **ON_CUDA) and not close(expected, nan, **ON_CUDA)
    assert close(torch.zeros(3), torch.zeros(3), **ON_CUDA)
    assert not close(torch.zeros(3), torch.zeros(4), **ON_CUDA), "shapes differ"
    assert close(torch.full((4,), 1e-5), torch.zeros(4), **ON_CUDA), "atol per element, for a zero baseline"
    assert not close(torch.full((4,), 3e-5), torch.zeros(4), **ON_CUDA)


def test_a_mismatch_of_a_tensor_compared_as_a_whole_gives_its_relative_norm_and_the_bound():
    expected = {"w": torch.ones(4)}
    _, [mismatch] = compare({"w": torch.ones(4) * 1.5}, expected, scenario="ps", step=7, rank="trainer1", seed=3,
                            **ON_CUDA)
    assert mismatch.rel_norm == 0.5
    text = str(mismatch)
    assert "differs from the baseline as a whole: relative norm diff 0.5, max abs diff 0.5" in text
    assert f"||a - e|| <= rtol*||e|| + atol*sqrt(n), rtol={_device.GPU_RTOL:g}, atol={_device.GPU_ATOL:g}" in text
    _, [elementwise] = compare({"w": torch.ones(4) * 1.5}, expected, scenario="ps", step=7, rank="trainer1", seed=3)
    assert elementwise.rel_norm is None and "as a whole" not in str(elementwise)


def _float64_steps(seed: int):
    """The parameter server's baseline steps recomputed in float64 at the
    float32 baseline's own parameter versions (its recorded updates replayed,
    as the judge replays a run's): each step's (float64 gradients cast to
    float32, float32 gradients)."""
    reference = baseline(CONFIG, 3, seed)
    model = build_net(CONFIG, seed).double()
    params = dict(model.named_parameters())
    shards: dict = {}
    for step, (trainer, batch) in zip(reference.steps, default_order(CONFIG, 3), strict=True):
        if trainer not in shards:
            shards[trainer] = trainer_batches(CONFIG, seed, trainer)
        data, target = shards[trainer][batch]
        model.zero_grad(set_to_none=True)
        F.nll_loss(model(data.double(), dropout_seed(seed, trainer, batch)), target).backward()
        yield {n: p.grad.float() for n, p in params.items()}, step.grads
        with torch.no_grad():
            for n, p in params.items():
                p.add_(step.grads[n].double(), alpha=-CONFIG.lr)


def test_gradients_of_another_rounding_pass_the_gpu_check_where_ties_broke_elementwise_bounds():
    # Seeds 0, 6 and 9 each have a step whose tie broke the other way in
    # float64 on the machine this was written on (20 of 70 seeds had one);
    # the test goes on to the next seed until it has seen such a step.
    ties = 0
    for seed in (0, 6, 9, 21, 23, 28):
        for got, want in _float64_steps(seed):
            for name in want:
                assert close(got[name], want[name], **ON_CUDA), (seed, name)
                ties += not close(got[name], want[name], **ELEMENTWISE)
        if ties:
            break
    assert ties, "no step of these seeds broke a tie: the check above proved nothing"


def test_a_gradient_one_parameter_version_stale_fails_the_gpu_check_at_every_step():
    # The smallest real bug measured: step k's batch taken at version k - 1.
    seed = 4
    reference = baseline(CONFIG, 3, seed)
    order = default_order(CONFIG, 3)
    model = build_net(CONFIG, seed)
    params = dict(model.named_parameters())
    shards: dict = {}
    for k in range(1, len(order)):
        trainer, batch = order[k]
        if trainer not in shards:
            shards[trainer] = trainer_batches(CONFIG, seed, trainer)
        data, target = shards[trainer][batch]
        model.zero_grad(set_to_none=True)
        F.nll_loss(model(data, dropout_seed(seed, trainer, batch)), target).backward()
        stale = {n: p.grad for n, p in params.items()}
        _, mismatches = compare(stale, reference.steps[k].grads, scenario="ps", step=k, rank=trainer, seed=seed,
                                **ON_CUDA)
        assert mismatches, f"step {k}: a stale gradient passed"
        with torch.no_grad():  # now at version k, one short of step k + 1
            for n, p in params.items():
                p.add_(reference.steps[k - 1].grads[n], alpha=-CONFIG.lr)
