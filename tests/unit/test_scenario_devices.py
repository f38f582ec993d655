"""The scenarios on a device (issue 29, item 4), tested on the CPU: the
placement code with the device as a parameter, the judge's tolerances by
the records' device, ``rpc-harness run --device`` and its refusal, and the
device in tokens. CUDA's probes are faked where a test needs a machine with
CUDA; no test here runs anything on a GPU (tests/gpu does, on a CUDA
machine)."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from rpc_harness.apps import cli
from rpc_harness.errors import Unsupported
from rpc_harness.gradcheck import close
from rpc_harness.repro import Repro, decode
from rpc_harness.scenarios import _device

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# Devices this machine can compute on; a CUDA machine adds its first GPU.
DEVICES = ["cpu"] + (["cuda:0"] if torch.cuda.is_available() else [])


@pytest.fixture(autouse=True)
def numerics_put_back(monkeypatch):
    """What ``_device.prepare`` sets for a CUDA device is process-wide: a
    test that runs a model on cuda:0 here (a CUDA machine) must not leave
    this xdist worker deterministic and without TF32 for the tests after it."""
    name = "CUBLAS_WORKSPACE_CONFIG"
    if name in os.environ:
        monkeypatch.setenv(name, os.environ[name])  # recorded: teardown puts it back
    else:  # recorded as absent (delenv of an absent variable records nothing): teardown removes it
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    cudnn = torch.backends.cudnn
    saved = {"_deterministic": cudnn.deterministic, "_benchmark": cudnn.benchmark, "_allow_tf32": cudnn.allow_tf32}
    matmul_tf32 = torch.backends.cuda.matmul.allow_tf32
    determinism = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    set_determinism = torch.use_deterministic_algorithms  # the real one: a test may fake it until after this
    yield
    # set_flags: assignment may be frozen in this process (torch's test utilities, imported by another test module)
    cudnn.set_flags(**saved)
    torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
    set_determinism(determinism[0], warn_only=determinism[1])


class FakeContext:
    """What ``_device.here`` reads of a rank's context."""

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)


def in_rank_on(monkeypatch, device: str) -> None:
    monkeypatch.setattr("rpc_harness.current_context", lambda: FakeContext(device))


def test_here_is_the_cpu_outside_a_world_and_the_contexts_device_in_a_rank(monkeypatch):
    assert _device.here() == torch.device("cpu"), "the test process is in no world"
    in_rank_on(monkeypatch, "cuda:1")
    assert _device.here() == torch.device("cuda:1")


# -- tolerances ----------------------------------------------------------------------------


def test_a_cpu_run_keeps_its_configs_tolerances_and_a_cuda_run_gets_the_gpu_bounds():
    assert _device.tolerances(1e-5, 1e-6, "cpu") == {"rtol": 1e-5, "atol": 1e-6, "norm": False}
    assert _device.tolerances(0.0, 0.0, "cpu") == {"rtol": 0.0, "atol": 0.0, "norm": False}
    assert _device.tolerances(1e-5, 1e-6, "cuda:1") == {"rtol": _device.GPU_RTOL, "atol": _device.GPU_ATOL,
                                                         "norm": True}
    wider = _device.tolerances(5e-2, 1e-3, "cuda:0")
    assert wider == {"rtol": 5e-2, "atol": 1e-3, "norm": True}, "a wider config tolerance is kept"


def test_the_rl_judge_widens_its_tolerances_only_for_a_run_on_cuda():
    from rpc_harness.scenarios.rl.agent import Episode, Records
    from rpc_harness.scenarios.rl.config import Config
    from rpc_harness.scenarios.rl.judge import compare

    grads = {"w": torch.ones(3)}
    near = {"w": torch.ones(3) * (1 + 3e-5)}  # a GPU's reordering error, not a bug's

    def records(g, device):
        episode = Episode(1, ("observer1",), {"observer1": 1.0}, 1.0, 0.05, 0.0, g)
        return Records([episode], {}, 475.0, device=device)

    config = Config()
    assert compare(records(near, "cpu"), records(grads, "cpu"), config, 0).mismatches, "CPU: exact"
    on_gpu = compare(records(near, "cuda:0"), records(grads, "cpu"), config, 0)
    assert not on_gpu.mismatches and on_gpu.details["tolerance"]["device"] == "cuda:0"
    far = {"w": torch.ones(3) * 1.1}  # 10% of the tensor: a bug's size (a stale gradient moves it 18% and more)
    assert compare(records(far, "cuda:0"), records(grads, "cpu"), config, 0).mismatches, "a bug still fails"


def test_the_ps_and_rnn_judges_read_the_device_from_the_records():
    from rpc_harness.scenarios.parameter_server.baseline import BaselineRun, BaselineStep
    from rpc_harness.scenarios.parameter_server.config import Config as PsConfig
    from rpc_harness.scenarios.parameter_server.judge import Records as PsRecords
    from rpc_harness.scenarios.parameter_server.judge import compare as ps_compare
    from rpc_harness.scenarios.rnn.config import Config as RnnConfig
    from rpc_harness.scenarios.rnn.judge import compare as rnn_compare

    base = {"w": torch.ones(3)}
    near = {"w": torch.ones(3) * (1 + 3e-5)}
    expected = BaselineRun([BaselineStep(0, "trainer1", 0, 0, base, 1.0)], dict(base), 1.0)

    def ps(device):
        log = {"steps": [{"index": 0, "trainer": "trainer1", "batch": 0, "version": 0, "loss": 1.0, "grads": near}],
               "dropped": [], "dead": [], "final": near, "device": device}
        return ps_compare(PsRecords(log, {}), expected, PsConfig(), 0)

    assert ps("cpu").mismatches and not ps("cuda:0").mismatches

    def rnn(device):
        step = {"epoch": 0, "loss": torch.tensor(1.0), "grads": {"ps/w": near["w"]}, "params": {"ps/w": near["w"]}}
        want = {"epoch": 0, "loss": torch.tensor(1.0), "grads": {"ps/w": base["w"]}, "params": {"ps/w": base["w"]}}
        got = {"trainer": {"trainer": "trainer", "steps": [step], "device": device}}
        return rnn_compare(got, {"trainer": {"trainer": "trainer", "steps": [want]}}, RnnConfig(), 0)

    assert rnn("cpu").mismatches and not rnn("cuda:0").mismatches


# -- placement, with the device as a parameter -------------------------------------------------


def test_to_cpu_copies_every_tensor_of_a_record_and_keeps_the_rest():
    value = {"a": [torch.ones(1), (torch.zeros(2), "x")], "b": 3}
    moved = _device.to_cpu(value)
    assert moved["b"] == 3 and moved["a"][1][1] == "x"
    assert all(t.device.type == "cpu" for t in (moved["a"][0], moved["a"][1][0]))


def test_prepare_for_cuda_turns_tf32_off_and_deterministic_algorithms_on():
    # Flags and an environment variable only: no CUDA call, so a CPU torch can be asked.
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.set_flags(_allow_tf32=True, _benchmark=True)  # assignment may be frozen here (see below)
    _device.prepare("cuda:0")
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_prepare_for_cuda_works_where_torchs_test_utilities_froze_the_cudnn_flags(monkeypatch):
    # What torch.backends.disable_global_flags() does, undone after the test:
    # torch.testing._internal.common_utils calls it at import (a test module
    # using torch's RPC examples), and ranks forked after it inherit it.
    flag = "__allow_nonbracketed_mutation_flag"
    where = torch.backends.disable_global_flags.__globals__  # torch.backends' own namespace
    monkeypatch.setitem(where, flag, where[flag])  # recorded: put back after the test
    torch.backends.disable_global_flags()
    assert torch.backends.flags_frozen()
    with pytest.raises(RuntimeError, match="disable_global_flags"):
        torch.backends.cudnn.deterministic = True  # precondition: assignment is refused
    _device.prepare("cuda:0")
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert not torch.backends.cudnn.allow_tf32


def test_prepare_changes_nothing_for_the_cpu(monkeypatch):
    monkeypatch.setattr(torch, "use_deterministic_algorithms", lambda *a, **k: pytest.fail("touched on the CPU"))
    _device.prepare("cpu")
    _device.prepare(torch.device("cpu"))


@pytest.mark.parametrize("device", DEVICES)
def test_the_rl_policy_trains_on_the_agents_device_and_records_on_the_cpu(device):
    from rpc_harness.scenarios.rl.baseline import baseline
    from rpc_harness.scenarios.rl.config import Config

    config = Config(episodes=2, max_steps=8)
    placed = baseline(config, 3, 5, device=device)
    reference = baseline(config, 3, 5)
    assert placed.device == device
    for got, want in zip(placed.episodes, reference.episodes, strict=True):
        for name, grad in got.grads.items():
            assert grad.device.type == "cpu"
            assert close(grad, want.grads[name], **_device.tolerances(0.0, 0.0, device)), name


@pytest.mark.parametrize("device", DEVICES)
def test_the_rnn_servers_modules_go_to_their_owners_device(monkeypatch, device):
    from rpc_harness.scenarios.rnn.model import Decoder, EmbeddingTable

    in_rank_on(monkeypatch, device)
    table, decoder = EmbeddingTable(20, 4, 0.2, 1), Decoder(20, 6, 0.2, 2)
    assert table.device == torch.device(device) == decoder.device
    assert {p.device for m in (table, decoder) for p in m.parameters()} == {torch.device(device)}
    out = table(torch.tensor([[1, 2], [3, 4]]))  # ids arrive on the CPU
    assert out.device == torch.device(device)
    assert decoder(torch.ones(2, 2, 6)).device == torch.device(device)
    explicit = EmbeddingTable(20, 4, 0.2, 1, device="cpu")
    assert next(explicit.parameters()).device.type == "cpu", "an explicit device wins over the rank's"


def test_the_rnn_dropout_draws_the_masks_it_drew_before_devices():
    from rpc_harness.scenarios.rnn.model import _dropout, _generator

    x = torch.randn(3, 4, 5)
    before = x * torch.empty_like(x).bernoulli_(0.8, generator=_generator(7)) / 0.8
    assert torch.equal(_dropout(x, 0.2, _generator(7), True), before)


@pytest.mark.parametrize("nlayers", [1, 2, 3])
def test_the_layered_lstm_equals_nn_lstm_with_its_dropout_masks(nlayers):
    # What a CUDA trainer runs (layered=True), on the CPU: the same numbers as
    # nn.LSTM, inter-layer dropout masks included, from the same seed.
    from rpc_harness.scenarios.rnn.config import Config
    from rpc_harness.scenarios.rnn.model import init_hidden, make_lstm, run_lstm

    config = dataclasses.replace(Config(), nlayers=nlayers, dropout=0.3)
    rnn = make_lstm(config, 11)
    emb = torch.randn(config.bptt, config.batch_size, config.ninp)
    hidden = init_hidden(config, "cpu")
    want_out, (want_h, want_c) = run_lstm(rnn, emb, hidden, 99, layered=False)
    got_out, (got_h, got_c) = run_lstm(rnn, emb, hidden, 99, layered=True)
    torch.testing.assert_close(got_out, want_out, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(got_h, want_h, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(got_c, want_c, rtol=1e-6, atol=1e-7)
    other_out, _ = run_lstm(rnn, emb, hidden, 100, layered=True)
    assert nlayers == 1 or not torch.allclose(other_out, want_out), "another seed, other masks"


@pytest.mark.parametrize("device", DEVICES)
def test_the_parameter_servers_model_is_on_the_servers_device_and_answers_on_the_cpu(monkeypatch, device):
    from rpc_harness.scenarios.parameter_server.config import Config
    from rpc_harness.scenarios.parameter_server.server import ParameterServer

    in_rank_on(monkeypatch, device)
    server = ParameterServer(Config(), 3, ("trainer1",))
    assert {p.device for p in server.model.parameters()} == {torch.device(device)}
    out = server.forward(torch.zeros(2, 1, 28, 28))  # an evaluation: no dist-autograd context
    assert out.device.type == "cpu", "what crosses RPC goes back to the CPU, as the tutorial does"
    report = server.report()
    assert report["device"] == device
    assert all(t.device.type == "cpu" for t in report["final"].values())



def test_the_parameter_server_gives_up_its_tensors_to_a_cuda_aware_owner_rref():
    """With devices, TensorPipe's agent finds the CUDA tensors of every value
    an RPC sets (the RRef of ``rpc.remote(get_parameter_server)`` among them)
    by pickling it with ``torch._jit_internal._extract_tensors``, which skips
    plain locks but not an RLock: a ``threading.Condition()`` on the server
    failed every PS world on an H200 ("Cannot extract tensors from value:
    cannot pickle '_thread.RLock' object"). On the CPU nothing extracts, so
    this asks the extractor directly."""
    from rpc_harness.scenarios.parameter_server.config import Config
    from rpc_harness.scenarios.parameter_server.server import ParameterServer

    server = ParameterServer(Config(), 3, ("trainer1",))
    found = torch._jit_internal._extract_tensors(server)
    assert {id(p) for p in server.model.parameters()} <= {id(t) for t in found}


# -- the command line and tokens ---------------------------------------------------------------


def test_run_device_cuda_is_refused_with_exit_2_in_one_line_before_any_world(monkeypatch, capsys):
    monkeypatch.setattr("rpc_harness._cuda_fork.cuda_available", lambda: False)
    monkeypatch.setattr(cli, "run_job", lambda *a, **k: pytest.fail("a world started"))
    assert cli.main(["run", "rl", "--device", "cuda"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and "--device: devices='cuda' asks for CUDA, but CUDA is not available here" in err
    assert "running" not in captured.out


def test_run_device_cuda_with_fuzz_is_refused_where_cuda_is(monkeypatch, capsys):
    monkeypatch.setattr("rpc_harness._cuda_fork.cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(cli, "run_job", lambda *a, **k: pytest.fail("a world started"))
    assert cli.main(["run", "rl", "--device", "cuda", "--fuzz", "0.01"]) == 2
    assert "takes no device maps" in capsys.readouterr().err


def test_run_device_cuda_reaches_every_world_and_its_token(monkeypatch):
    monkeypatch.setattr("rpc_harness._cuda_fork.cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    seen = []

    def fake_run_scenario(sc, config, **options):
        seen.append(options["devices"])
        raise RuntimeError("stop at the first world")

    monkeypatch.setattr("rpc_harness.scenario.run_scenario", fake_run_scenario)
    with pytest.raises(RuntimeError, match="stop at the first world"):
        cli.main(["run", "rl", "--device", "cuda", "--seed", "4"])
    assert seen == [("cuda",)]
    args = cli._parser().parse_args(["run", "rl", "--device", "cuda", "--seed", "4"])
    job = cli.plan_jobs(args, 4)[0]
    again = decode(job.repro.token())
    assert again.options["devices"] == ("cuda",)
    assert "devices='cuda'" in cli.scenario_call(job.repro)


def test_run_device_cpu_runs_as_before_and_its_token_names_no_device():
    args = cli._parser().parse_args(["run", "rl", "--device", "cpu", "--seed", "4"])
    assert args.device == ()
    plain = cli._parser().parse_args(["run", "rl", "--seed", "4"])
    ours, theirs = cli.plan_jobs(args, 4), cli.plan_jobs(plain, 4)
    assert [j.repro.token() for j in ours] == [j.repro.token() for j in theirs]
    assert "devices" not in ours[0].repro.options


def test_a_cuda_token_replays_on_the_gpu_and_is_refused_here_before_any_world(monkeypatch, capsys):
    monkeypatch.setattr("rpc_harness._cuda_fork.cuda_available", lambda: False)
    monkeypatch.setattr(cli, "run_job", lambda *a, **k: pytest.fail("a world started"))
    repro = Repro(world_size=3, seed=2, scenario="rl", names=("agent", "observer1", "observer2"),
                  options={"devices": ("cuda",)})
    assert decode(repro.token()).options["devices"] == ("cuda",)
    assert cli.main(["replay", repro.token()]) == 2
    err = capsys.readouterr().err
    assert "repro token field 'dev': devices='cuda' asks for CUDA, but CUDA is not available here" in err
    assert "--device" not in err, "no --device was given: the token asked"


# torch's meta device stands in for a GPU here: parameters move to it as to
# cuda:N, so a model left on the CPU shows (it cannot compute a CPU copy back).
PLACEMENT = ["cpu", "meta"] + (["cuda:0"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", PLACEMENT)
def test_each_scenarios_model_goes_to_its_ranks_device(monkeypatch, device):
    from rpc_harness.scenarios.parameter_server.config import Config as PsConfig
    from rpc_harness.scenarios.parameter_server.server import ParameterServer
    from rpc_harness.scenarios.rl.agent import Agent
    from rpc_harness.scenarios.rl.config import Config as RlConfig
    from rpc_harness.scenarios.rnn.model import Decoder, EmbeddingTable

    in_rank_on(monkeypatch, device)
    agent = Agent(RlConfig(), 3, {1: "observer1"}, device=_device.here())
    server = ParameterServer(PsConfig(), 3, ("trainer1",))
    table, decoder = EmbeddingTable(20, 4, 0.2, 1), Decoder(20, 6, 0.2, 2)
    for what, module in (("rl policy", agent.policy), ("ps model", server.model), ("rnn embedding", table),
                         ("rnn decoder", decoder)):
        assert {p.device for p in module.parameters()} == {torch.device(device)}, what
    assert table(torch.tensor([[1, 2]])).device == torch.device(device)
    assert decoder(torch.ones(1, 2, 6)).device == torch.device(device)


def test_run_scenario_gives_the_world_its_devices_and_puts_them_in_the_replay_lines(monkeypatch):
    from rpc_harness.scenario import run_scenario

    seen = {}

    def fake_run_world(entry, **options):
        seen.update(options)
        raise RuntimeError("stop before any process")

    monkeypatch.setattr("rpc_harness._parent.launcher.run_world", fake_run_world)
    monkeypatch.setattr("rpc_harness._cuda_fork.cuda_available", lambda: False)
    with pytest.raises(Unsupported, match=r"^rl: devices='cuda' asks for CUDA, but CUDA is not available"):
        run_scenario("rl", seed=4, devices="cuda")
    assert not seen, "refused before run_world, naming the scenario"
    monkeypatch.setattr("rpc_harness._cuda_fork.cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(RuntimeError, match="stop before any process"):
        run_scenario("rl", seed=4, devices="cuda")
    assert seen["devices"] == ("cuda",)
    token = seen["repro"].split()[2]
    assert decode(token).options["devices"] == ("cuda",)
    assert "devices='cuda'" in seen["repro"]
    seen.clear()
    with pytest.raises(RuntimeError):
        run_scenario("rl", seed=4, devices="cpu")
    assert seen.get("devices") is None and "devices" not in seen["repro"], "a CPU world's lines stay as they were"
