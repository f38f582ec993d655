"""``ddp`` and ``fsdp`` on CUDA (issue 40, item 7), tested on the CPU: the
refusal where there is no CUDA, the world a CUDA run asks for (gloo, every
rank on the one GPU there is), and the judges holding records made on a
GPU to the GPU tolerances (``rpc_harness/scenarios/_device.py``). CUDA's
probes are faked; nothing here runs on a GPU (tests/gpu does, on a CUDA
machine)."""

from __future__ import annotations

import copy

import pytest
import torch

from rpc_harness import run_scenario
from rpc_harness._devices import rank_device
from rpc_harness.apps import cli
from rpc_harness.errors import Unsupported, WorldSpecError
from rpc_harness.gradcheck import close
from rpc_harness.scenarios import _collective, _device, ddp, fsdp

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

COLLECTIVE = ["ddp", "fsdp"]
ON_CUDA = _device.tolerances(0.0, 0.0, "cuda:0")


# -- refused before any process, or given the world it asks for --------------------------------


def test_a_cpu_only_scenario_refuses_a_device_rather_than_run_on_the_cpu_under_its_name(monkeypatch, capsys):
    # ddp_rpc places nothing on a device: run with devices='cuda', its report
    # would say a GPU run that never was.
    monkeypatch.setattr("rpc_harness._cuda_fork.cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr("rpc_harness._parent.launcher.run_world", lambda *a, **k: pytest.fail("a world started"))
    with pytest.raises(WorldSpecError, match=r"^ddp_rpc: devices: the ddp_rpc scenario trains on the CPU only"):
        run_scenario("ddp_rpc", seed=4, devices="cuda")
    monkeypatch.setattr(cli, "run_job", lambda *a, **k: pytest.fail("a world started"))
    assert cli.main(["run", "ddp_rpc", "--device", "cuda"]) == 2
    assert "--device: the ddp_rpc scenario trains on the CPU only" in capsys.readouterr().err
    # Every scenario under --device: the CPU-only one is left out, and says so.
    planned = []
    monkeypatch.setattr(cli, "run_job", lambda job, **k: planned.append(job.scenario.name) or pytest.skip("planned"))
    with pytest.raises(pytest.skip.Exception):
        cli.main(["run", "--device", "cuda", "--no-fault-checks"])
    assert "ddp_rpc: left out under --device (it trains on the CPU only)" in capsys.readouterr().out
    assert planned and "ddp_rpc" not in planned


@pytest.mark.parametrize("name", COLLECTIVE)
def test_run_device_cuda_is_refused_with_exit_2_in_one_line_before_any_world(monkeypatch, capsys, name):
    monkeypatch.setattr("rpc_harness._cuda_fork.cuda_available", lambda: False)
    monkeypatch.setattr(cli, "run_job", lambda *a, **k: pytest.fail("a world started"))
    assert cli.main(["run", name, "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--device: devices='cuda' asks for CUDA, but CUDA is not available here" in err


@pytest.mark.parametrize("name", COLLECTIVE)
def test_a_cuda_run_is_a_gloo_world_with_every_rank_on_the_one_gpu(monkeypatch, name):
    seen = {}

    def fake_run_world(entry, **options):
        seen.update(options)
        raise RuntimeError("stop before any process")

    monkeypatch.setattr("rpc_harness._parent.launcher.run_world", fake_run_world)
    monkeypatch.setattr("rpc_harness._cuda_fork.cuda_available", lambda: False)
    with pytest.raises(Unsupported, match=rf"^{name}: devices='cuda' asks for CUDA, but CUDA is not available"):
        run_scenario(name, world_size=3, seed=4, devices="cuda")
    assert not seen, "refused before run_world"
    monkeypatch.setattr("rpc_harness._cuda_fork.cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(RuntimeError, match="stop before any process"):
        run_scenario(name, world_size=3, seed=4, devices="cuda")
    # gloo, not NCCL (which needs a GPU a rank): three ranks share cuda:0.
    assert seen["devices"] == ("cuda",) and seen["process_group"] == "gloo" and seen["rpc"] is False
    assert [rank_device(seen["devices"], rank, 1) for rank in range(3)] == ["cuda:0"] * 3
    assert "devices='cuda'" in seen["repro"]


# -- the comparison a GPU run gets ------------------------------------------------------------


def test_on_cuda_a_tensor_is_held_as_a_whole_and_a_step_by_its_change():
    torch.manual_seed(0)
    start = {"w": torch.randn(16, 8)}
    update = {"w": 0.01 * torch.randn(16, 8)}  # an AdamW step of lr 1e-2: about lr an element
    expected = {"w": start["w"] - update["w"]}
    bounds = {"w": torch.full((16, 8), 1e-7, dtype=torch.float64)}
    tie = {"w": expected["w"].clone()}
    tie["w"][3, 4] += 1e-4  # a ReLU's near-tie broken the other way: one element, far past rounding
    args = {"scenario": "s", "step": 1, "rank": "worker0", "seed": 0, "what": "parameter"}
    assert _collective.compare_run(tie, expected, bounds, device="cpu", **args)[2], "the CPU: element by element"
    _, ratio, bad = _collective.compare_run(tie, expected, bounds, device="cuda:0", start=start, **args)
    assert bad == [] and 0 < ratio < 1
    # An update twice as large (an optimizer's learning rate doubled) is within 3e-2 of the
    # parameter as a whole, and all of the update's size: the change is what is compared.
    doubled = {"w": start["w"] - 2 * update["w"]}
    assert close(doubled["w"], expected["w"], **ON_CUDA), "precondition: a whole-tensor bound would pass it"
    _, ratio, [mismatch] = _collective.compare_run(doubled, expected, bounds, device="cuda:0", start=start, **args)
    assert (mismatch.param, mismatch.what, mismatch.rel_norm) == ("w", "parameter update", pytest.approx(1.0))
    assert ratio > 10
    assert _collective.compare_run(doubled, expected, bounds, device="cuda:0", **args)[2] == []


ARGS = {"scenario": "s", "step": 3, "rank": "worker2", "seed": 7}


def test_on_cuda_the_ratio_is_a_tensors_norm_difference_over_its_bound_and_the_configs_tolerances_widen_it():
    expected = {"w": torch.tensor([3.0, 4.0]), "empty": torch.zeros(0), "bent": torch.zeros(2)}
    actual = {"w": torch.tensor([3.0, 4.3]), "empty": torch.zeros(0), "bent": torch.zeros(3), "new": torch.ones(1)}
    bounds = {}  # the derived bound is the CPU's: not read on CUDA
    diff, ratio, bad = _collective.compare_run(actual, expected, bounds, device="cuda:0", what="gradient", **ARGS)
    # ||a - e|| = 0.3 of ||e|| = 5, against GPU_RTOL * 5 + GPU_ATOL * sqrt(2); the tensors not
    # compared have no ratio (and an infinite difference).
    assert diff == float("inf")
    assert ratio == pytest.approx(0.3 / (_device.GPU_RTOL * 5 + _device.GPU_ATOL * 2**0.5), rel=1e-5)
    assert [m.param for m in bad] == ["bent", "new (missing in the baseline)", "w"]  # (gradcheck names a misshapen tensor plainly)
    m = bad[-1]
    assert (m.scenario, m.step, m.rank, m.seed, m.what) == ("s", 3, "worker2", 7, "gradient")
    assert (m.rtol, m.atol, m.rel_norm) == (_device.GPU_RTOL, _device.GPU_ATOL, pytest.approx(0.06, rel=1e-5))
    # The config's tolerances where wider than the GPU's: rtol 0.1 of 5 allows 0.5.
    diff, ratio, bad = _collective.compare_run({"w": actual["w"]}, {"w": expected["w"]}, bounds, device="cuda:0",
                                               what="gradient", rtol=0.1, atol=1e-3, **ARGS)
    assert bad == [] and ratio == pytest.approx(0.3 / (0.1 * 5 + 1e-3 * 2**0.5), rel=1e-5)
    assert diff == pytest.approx(0.3, rel=1e-5)


def test_on_cuda_a_steps_change_is_each_tensor_less_its_start_or_all_of_it_where_it_has_none():
    start = {"a": torch.tensor([1.0]), "c": torch.tensor([1.0])}  # no "b" yet (AdamW state at its first step)
    expected = {"a": torch.tensor([3.0]), "b": torch.tensor([5.0]), "c": torch.tensor([1.0, 2.0])}
    actual = {"a": torch.tensor([3.5]), "b": torch.tensor([5.5]), "c": torch.tensor([1.5, 2.0])}
    _, _, bad = _collective.compare_run(actual, expected, {}, device="cuda:0", start=start, what="AdamW state",
                                        **ARGS)
    # a: 2.5 against 2; b: 5.5 against 5, whole; c: another shape than its start, whole too.
    assert [(m.param, m.what) for m in bad] == [(name, "AdamW state update") for name in ("a", "b", "c")]
    assert [m.rel_norm for m in bad] == pytest.approx([0.25, 0.1, 0.5 / 5**0.5], rel=1e-5)


def perfect_ddp_run(config, world_size, seed, device):
    """What a faultless world on ``device`` would return: every rank the baseline's own steps."""
    init = {name: p.detach().clone() for name, p in ddp.build_model(config, seed).named_parameters()}
    before = [init]
    for _ in range(config.steps):
        out = ddp.baseline(config, world_size, seed, before)
        before.append(out["steps"][-1]["params"])
    steps = [{"grads": s["grads"], "params": s["params"], "loss": s["loss"]} for s in out["steps"]]
    return {f"worker{r}": {"rank": r, "seed": seed, "device": device, "init": copy.deepcopy(init),
                           "steps": copy.deepcopy(steps)} for r in range(world_size)}


def judge_ddp(records, config, seed):
    expected = ddp.SCENARIO.baseline(config, len(records), seed, records)
    return ddp.SCENARIO.compare(records, expected, config, seed)


def test_the_ddp_judge_holds_a_gpu_run_to_the_gpu_tolerances_and_still_sees_a_wrong_update():
    config = ddp.Config(steps=2)
    for device in ("cpu", "cuda:0"):
        result = judge_ddp(perfect_ddp_run(config, 2, 1, device), config, 1)
        assert result.mismatches == [] and result.checked == result.expected == 2 * 2 * 4
        assert result.details["tolerance"]["device"] == device
    assert judge_ddp(perfect_ddp_run(config, 2, 1, "cuda:0"), config, 1).details["tolerance"]["norm"] is True
    tie = perfect_ddp_run(config, 2, 1, "cuda:0")
    tie["worker1"]["steps"][1]["grads"]["net1.weight"][0, 0] += 1e-4  # one element, a near-tie's size
    assert judge_ddp(tie, config, 1).mismatches == []
    tie["worker1"]["device"] = tie["worker0"]["device"] = "cpu"
    assert [m.param for m in judge_ddp(tie, config, 1).mismatches] == ["net1.weight"], "the CPU's bound sees it"
    # The last rank's step twice as long (the planted bug rank_lr), on the GPU.
    doubled = perfect_ddp_run(config, 2, 1, "cuda:0")
    first = doubled["worker0"]
    for step in range(config.steps):
        start = first["init"] if step == 0 else first["steps"][step - 1]["params"]
        after = doubled["worker1"]["steps"][step]["params"]
        for name in after:
            after[name] = start[name] + 2 * (after[name] - start[name])
    mismatches = judge_ddp(doubled, config, 1).mismatches
    assert (mismatches[0].step, mismatches[0].rank, mismatches[0].what) == (0, "worker1", "parameter update")


def test_the_ddp_judge_on_cuda_reports_the_first_ranks_gpu_its_tolerances_and_a_gradient_as_itself():
    config = ddp.Config(steps=2, rtol=0.5, atol=1e-6)  # rtol wider than the GPU's own, atol narrower
    records = perfect_ddp_run(config, 2, 1, "cuda:0")
    records["worker1"]["device"] = "cuda:1"  # each rank its own GPU: the first rank's is the run's
    result = judge_ddp(records, config, 1)
    assert result.mismatches == []
    assert result.details["tolerance"] == {
        "rtol": 0.5, "atol": _device.GPU_ATOL, "norm": True, "device": "cuda:0",
        "bound": "GPU: each tensor, and each step's parameter update, as a whole (rpc_harness/scenarios/_device.py)"}
    # A gradient is compared as itself (a step's change is for what a step updates).
    records = perfect_ddp_run(ddp.Config(steps=2), 2, 1, "cuda:0")
    records["worker1"]["steps"][1]["grads"]["net1.weight"].mul_(2)
    mismatches = judge_ddp(records, ddp.Config(steps=2), 1).mismatches
    assert [(m.step, m.rank, m.param, m.what) for m in mismatches] == [(1, "worker1", "net1.weight", "gradient")]
    assert mismatches[0].rel_norm == pytest.approx(1.0)


def global_gradients(config, seed, params, step):
    """The gradients of one step's global batch (one rank) at ``params``."""
    model = fsdp.build_model(config, seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(params[name])
    x, y = fsdp.global_batch(config, seed, 1, step)
    fsdp.loss_fn(model(x), y).backward()
    return {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def perfect_fsdp_run(config, seed, device):
    """A faultless one-rank FSDP run on ``device``: the baseline's steps,
    AdamW fed the gradients of the global batch (as the ranks reduce them)."""
    init = {name: p.detach().clone() for name, p in fsdp.build_model(config, seed).named_parameters()}
    before, steps, params, state = [], [], init, {}
    for step in range(config.steps):
        start = {"params": params, "state": state, "grads": global_gradients(config, seed, params, step)}
        out = fsdp.baseline(config, 1, seed, [*before, start])["steps"][-1]
        before.append(start)
        params, state = out["params"], out["state"]
        steps.append({"grads": start["grads"], "params": params, "state": state, "loss": out["loss"]})
    return {"worker0": {"rank": 0, "seed": seed, "device": device, "init": init, "steps": copy.deepcopy(steps)}}


def judge_fsdp(records, config, seed):
    expected = fsdp.SCENARIO.baseline(config, len(records), seed, records)
    return fsdp.SCENARIO.compare(records, expected, config, seed)


def test_the_fsdp_judge_holds_a_gpu_run_to_the_gpu_tolerances_and_still_sees_a_wrong_adamw_step():
    config = fsdp.Config(steps=2, layers=1)
    gpu = perfect_fsdp_run(config, 3, "cuda:0")
    result = judge_fsdp(gpu, config, 3)
    assert result.mismatches == [] and result.checked == result.expected
    assert result.details["tolerance"]["device"] == "cuda:0" and result.details["tolerance"]["norm"] is True
    assert result.details["others_checked"] == result.details["others_expected"] > 0
    # AdamW stepping twice as far: a few thousandths of each parameter, all of its update.
    steps = gpu["worker0"]["steps"]
    for index, step in enumerate(steps):
        start = gpu["worker0"]["init"] if index == 0 else steps[index - 1]["params"]
        for name in step["params"]:
            step["params"][name] = start[name] + 2 * (step["params"][name] - start[name])
    first = judge_fsdp(gpu, config, 3).mismatches[0]
    assert (first.step, first.what) == (0, "parameter update")


def test_the_fsdp_judge_on_cuda_reports_its_tolerances_and_compares_a_gradient_as_itself():
    config = fsdp.Config(steps=2, layers=1, rtol=0.5, atol=1e-6)  # rtol wider than the GPU's own, atol narrower
    gpu = perfect_fsdp_run(config, 3, "cuda:0")
    result = judge_fsdp(gpu, config, 3)
    assert result.mismatches == []
    assert result.details["tolerance"] == {
        "rtol": 0.5, "atol": _device.GPU_ATOL, "norm": True, "device": "cuda:0",
        "bound": "GPU: each tensor, and each step's change of the parameters and AdamW state, as a whole "
                 "(rpc_harness/scenarios/_device.py)"}
    config = fsdp.Config(steps=2, layers=1)
    gpu = perfect_fsdp_run(config, 3, "cuda:0")
    gpu["worker0"]["steps"][1]["grads"]["head.weight"].mul_(2)
    # (The baseline steps AdamW with the run's gradients: its state and parameters after differ too.)
    mismatches = [m for m in judge_fsdp(gpu, config, 3).mismatches if m.what.startswith("gradient")]
    assert [(m.step, m.rank, m.param, m.what) for m in mismatches] == [(1, "all ranks", "head.weight", "gradient")]
    assert mismatches[0].rel_norm == pytest.approx(1.0)


def test_the_fsdp_judge_on_cuda_holds_mixed_precisions_gradients_as_wholes_too():
    config = fsdp.Config(steps=2, layers=1, mixed_precision=True)
    gpu = perfect_fsdp_run(config, 3, "cuda:0")
    gpu["worker0"]["steps"][1]["grads"]["head.weight"].mul_(1.05)  # within mixed precision's 10 %
    result = judge_fsdp(gpu, config, 3)
    assert [m.what for m in result.mismatches if m.what.startswith("gradient")] == []
    assert result.details["tolerance"]["gradients"] == "as a whole, rtol=0.1 (mixed precision)"
