"""Rank entries for the harness's own tests (importable by name in ranks)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import threading
import time

import torch
import torch.distributed.rpc as rpc

import rpc_harness
from rpc_harness._rank.boot import rank_file

# Where this module was imported: in the forkserver (which preloads it, as
# the ini's rpc_preload asks), or in a rank that had to import it itself.
IMPORTED_IN = os.getpid()


def add(a, b):
    return a + b


def identity(ctx):
    """Who am I, and what do my seeded RNGs say?"""
    return {
        "rank": ctx.rank,
        "name": ctx.name,
        "names": ctx.names,
        "world_size": ctx.world_size,
        "seed": ctx.seed,
        "world_seed": ctx.world_seed,
        "rand": torch.rand(3).tolist(),
        "same_everywhere": ctx.derive_seed("shared"),
        "current_is_ctx": rpc_harness.current_context() is ctx,
        "pid": os.getpid(),
    }


def ring(ctx):
    """Every rank calls its right neighbour over RPC."""
    peer = ctx.names[(ctx.rank + 1) % ctx.world_size]
    return rpc.rpc_sync(peer, add, args=(torch.full((2,), float(ctx.rank)), 1)).tolist()


def say_hello(ctx):
    print(f"hello from {ctx.name}", flush=True)
    return ctx.rank


def rank1_sigkills_itself(ctx):
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return ctx.rank


def rank2_raises(ctx):
    if ctx.rank == 2:
        raise ValueError(f"boom from {ctx.name}")
    time.sleep(30)  # the others would wait forever: the harness must not


def hang_at_step(ctx):
    rpc_harness.failpoint("test.step")
    return ctx.rank


def step_three_times(ctx):
    for _ in range(3):
        rpc_harness.failpoint("test.step")
    return ctx.hits()


def returns_unpicklable(ctx):
    return lambda: None


def listening_addresses(ctx):
    """Local addresses of this process's listening TCP sockets."""
    inodes = _socket_inodes()
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as file:
            next(file)
            for line in file:
                parts = line.split()
                local, state, inode = parts[1], parts[3], parts[9]
                if state == "0A" and inode in inodes:  # 0A: LISTEN
                    found.append(local.split(":")[0])
    return found


def sleep_forever(ctx, pid_dir):
    with open(os.path.join(pid_dir, f"{ctx.rank}.pid"), "w") as file:
        file.write(str(os.getpid()))
    time.sleep(600)


def report_progress(rank):
    """Report from an RPC handler thread, not from the entry."""
    rpc_harness.progress(1, 1, "calls", handled_by=float(rank))
    return rank


def progress_main_and_handler(ctx):
    """Rank 0 reports 5 items from its entry and asks rank 1 to report from
    a handler; rank 1's entry reports nothing itself."""
    if ctx.rank == 0:
        for i in range(5):
            rpc_harness.progress(i + 1, 5, "items", loss=1.0 / (i + 1))
        rpc.rpc_sync(ctx.names[1], report_progress, args=(1,))
    return ctx.rank


def progress_in_a_tight_loop(ctx):
    for i in range(20_000):
        ctx.progress(i + 1, 20_000, "iterations")
    return ctx.rank


def progress_beyond_total(ctx):
    ctx.progress(5, 3, "items")


def progress_then_hang(ctx):
    ctx.progress(3, 10, "items")
    if ctx.rank == 1:
        time.sleep(600)
    return ctx.rank


def boom():
    raise KeyError("no such key")


def issue_rpcs(ctx):
    """Rank 0 issues one RPC of each API, and one that fails remotely."""
    if ctx.rank == 0:
        peer = ctx.names[1]
        rpc.rpc_sync(peer, add, args=(1, 2))
        rpc.rpc_async(peer, add, args=(3, 4)).wait()
        rpc.remote(peer, add, args=(5, 6)).to_here()
        try:
            rpc.rpc_sync(peer, boom)
        except Exception:  # noqa: BLE001 - the failure is what the trace must show
            pass
    return ctx.rank


def pid_then_progress_then_sleep(ctx, pid_dir):
    with open(os.path.join(pid_dir, f"{ctx.rank}.pid"), "w") as file:
        file.write(str(os.getpid()))
    ctx.progress(1, 2, "items")
    time.sleep(600)


def _refuse_to_load():
    raise ImportError("this class only exists in the ranks")


class OnlyInRanks:
    def __reduce__(self):
        return (_refuse_to_load, ())


def returns_what_only_ranks_can_load(ctx):
    return OnlyInRanks() if ctx.rank == 1 else ctx.rank


def thread_count(ctx):
    return torch.get_num_threads()


def _listening(table: str, inodes: set[str]) -> list[str]:
    found = []
    with open(table) as file:
        next(file)
        for line in file:
            parts = line.split()
            if parts[3] == "0A" and parts[9] in inodes:  # 0A: LISTEN
                found.append(parts[1])
    return found


def _socket_inodes() -> set[str]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def endpoints_then_wait(ctx, folder):
    """Write this rank's listening TCP ports, abstract unix sockets, network
    namespace and pinning environment to ``folder``, then wait (30 s at most)
    until the test has tried them and says so."""
    import json

    inodes = _socket_inodes()
    ports = [int(local.split(":")[1], 16) for local in _listening("/proc/net/tcp", inodes)]
    abstract = []
    with open("/proc/net/unix") as file:
        next(file)
        for line in file:
            parts = line.split()
            if len(parts) >= 8 and parts[6] in inodes and parts[7].startswith("@"):
                abstract.append(parts[7][1:])
    record = {"ports": ports, "abstract": abstract, "netns": os.readlink("/proc/self/ns/net"),
              "env": {k: os.environ.get(k) for k in ("TP_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "MASTER_ADDR")}}
    # Written whole or not at all: the test reads rank*.json as soon as it
    # exists, so the name appears only once the record is complete.
    path = os.path.join(folder, f"rank{ctx.rank}.json")
    with open(path + ".partial", "w") as file:
        json.dump(record, file)
    os.replace(path + ".partial", path)
    until = time.monotonic() + 30
    while not os.path.exists(os.path.join(folder, "tried")) and time.monotonic() < until:
        time.sleep(0.02)
    return record


# -- positive controls of the fault kinds (tests/world/test_fault_controls.py) ----------


def timed_steps(ctx, steps):
    """How long each of ``steps`` calls of failpoint ``test.step`` took (seconds)."""
    took = []
    for _ in range(steps):
        started = time.monotonic()
        rpc_harness.failpoint("test.step")
        took.append(time.monotonic() - started)
    return took


def logged_steps(ctx, steps):
    """An event before and after each call of failpoint ``test.step``,
    counted by the entry itself: the event log survives a SIGKILL, so a
    fault that ends the rank shows in which call it struck."""
    for step in range(1, steps + 1):
        ctx.event("step.before", step=step)
        rpc_harness.failpoint("test.step")
        ctx.event("step.after", step=step)
    return steps


def steps_catching_faults(ctx, steps):
    """The calls (1-based, counted here) of failpoint ``test.step`` that raised."""
    raised = []
    for step in range(1, steps + 1):
        try:
            rpc_harness.failpoint("test.step")
        except rpc_harness.InjectedFault:
            raised.append(step)
    return raised


def _inside(frame, function):
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


def steps_watching_for_hangs(ctx, steps):
    """Each call of failpoint ``test.step`` in a thread of its own; return
    the calls (1-based, counted here) whose thread was seen blocked in the
    harness's hang, left hanging there, while the others returned. No timing
    decides it: the thread either returns or is seen in the hang's frame."""
    import sys
    import threading

    hung = []
    for step in range(1, steps + 1):
        thread = threading.Thread(target=rpc_harness.failpoint, args=("test.step",), daemon=True)
        thread.start()
        while thread.is_alive():
            if _inside(sys._current_frames().get(thread.ident), "hang_at_failpoint"):
                hung.append(step)
                break
            time.sleep(0.005)
    return hung


def timed_calls(ctx, calls):
    """Rank 0 makes ``calls`` rpc_sync calls (PYTHON_CALL) to rank 1, timing
    each round trip, then one ``remote`` (PYTHON_REMOTE_CALL) fetched with
    ``to_here`` (PYTHON_RREF_FETCH_CALL)."""
    if ctx.rank != 0:
        return None
    took = []
    for i in range(calls):
        started = time.monotonic()
        rpc.rpc_sync(ctx.names[1], add, args=(i, 1))
        took.append(time.monotonic() - started)
    rpc.remote(ctx.names[1], add, args=(1, 1)).to_here()
    return took


def autograd_contexts_then_return(ctx, count):
    """Rank 0 runs ``count`` dist_autograd contexts with one call to rank 1
    each and returns at once: each context's end sends rank 1 a
    CLEANUP_AUTOGRAD_CONTEXT_REQ, a message torch retries and nobody waits for."""
    import torch.distributed.autograd as dist_autograd

    if ctx.rank == 0:
        for _ in range(count):
            with dist_autograd.context():
                rpc.rpc_sync(ctx.names[1], add, args=(torch.ones(1, requires_grad=True), 1))
    return ctx.rank


def drops_remote_values(ctx, count):
    """Rank 0 makes ``count`` values on rank 1 with ``remote`` and drops its
    RRefs: one RREF_USER_DELETE message to rank 1 each, a message torch retries."""
    if ctx.rank != 0:
        return None
    values = []
    for i in range(count):
        rref = rpc.remote(ctx.names[1], add, args=(i, 1))
        values.append(rref.to_here())
        del rref
    return values


def loopback_pinning(ctx):
    """What pins this rank's transports to loopback: the variables TensorPipe
    and Gloo read, and where its listening TCP sockets are bound."""
    env = {k: os.environ.get(k) for k in ("TP_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "MASTER_ADDR")}
    return {"env": env, "listening": listening_addresses(ctx)}


def _dies_here():
    rpc_harness.failpoint("peer.die")


def cleanup_retried_after_its_peer_died(ctx, tries=2):
    """Rank 0 shares a dist_autograd context with rank 1, has rank 1 reach
    failpoint ``peer.die`` (where the plan kills it), then leaves the
    context: its CLEANUP_AUTOGRAD_CONTEXT_REQ to the dead rank 1 is a message
    torch retries, and every retry fails for real. Returns once rank 0's own
    log shows torch's try ``tries`` of it failing (30 s at most), with the
    tries torch logged as failed."""
    import torch.distributed.autograd as dist_autograd

    if ctx.rank != 0:
        return None
    log = os.path.join(ctx.workdir, f"rank{ctx.rank}.log")
    with dist_autograd.context():
        rpc.rpc_sync(ctx.names[1], add, args=(torch.ones(2, requires_grad=True), 1))
        try:
            rpc.rpc_sync(ctx.names[1], _dies_here)
        except Exception:  # noqa: BLE001 - its connection closed: rank 1 is dead
            pass

    def logged():
        with open(log) as file:
            return [int(line.rsplit("Send try ", 1)[1].split()[0]) for line in file if "Send try " in line]

    until = time.monotonic() + 30
    while tries not in logged() and time.monotonic() < until:
        time.sleep(0.05)
    return logged()


# -- when a call: failpoint strikes (tests/world/test_guarantees.py) -------------------------


def record_line(path, text):
    """A call whose effect a test can see: one line appended to ``path``."""
    with open(path, "a") as file:
        file.write(text + "\n")


class LineRecorder:
    """The same effect behind a callable object: a ``call:`` failpoint on
    it replaces the attribute (there is no ``__code__`` to swap)."""

    def __call__(self, path, text):
        with open(path, "a") as file:
            file.write(text + "\n")


line_recorder = LineRecorder()


def records_lines(ctx, path, calls, target="record_line"):
    """Rank 0 calls ``target`` (a name in this module) ``calls`` times with
    the lines 1.., going on after an InjectedFault; returns the calls that
    raised one."""
    if ctx.rank != 0:
        return None
    raised = []
    for i in range(1, calls + 1):
        try:
            globals()[target](path, str(i))
        except rpc_harness.InjectedFault:
            raised.append(i)
    return raised


def serves_lines(ctx, path, calls):
    """Rank 0 asks rank 1 to run ``record_line`` ``calls`` times with the
    lines 1.., going on after a failed call; returns the calls that failed."""
    if ctx.rank != 0:
        return None
    failed = []
    for i in range(1, calls + 1):
        try:
            rpc.rpc_sync(ctx.names[1], record_line, args=(path, str(i)))
        except Exception:  # noqa: BLE001 - the peer's InjectedFault, as torch re-raises it
            failed.append(i)
    return failed


# -- setup that makes a world slow to come up ------------------------------------------

SLOW_START = 5.0  # seconds every rank's setup takes before it joins


def slow_start():
    time.sleep(SLOW_START)


def returns_at_once(ctx):
    return ctx.rank


# -- preloading --------------------------------------------------------------------------


def where_imported(ctx, modules):
    """For each module: whether this rank inherited it from the forkserver
    (imported there, before the rank was forked) or imported it itself."""
    import sys

    return {name: {"imported_in": getattr(sys.modules.get(name), "IMPORTED_IN", None), "forkserver": os.getppid(),
                   "rank": os.getpid()} for name in modules}


def listen_backlogs(ctx):
    """(backlog, somaxconn) of every listening TCP socket in this rank's
    network namespace, as the kernel reports them (``ss``'s Send-Q)."""
    import subprocess

    with open("/proc/sys/net/core/somaxconn") as file:
        somaxconn = int(file.read())
    lines = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True, check=True).stdout.splitlines()
    return [(int(line.split()[2]), somaxconn) for line in lines]


class SlowToReport(Exception):
    """An error that takes a while to pickle, and leaves a mark when its
    rank has begun reporting it (the harness pickles it in the report)."""

    def __reduce__(self):
        folder, rank = self.args
        open(os.path.join(folder, f"reporting{rank}"), "w").close()
        time.sleep(1.0)
        return (SlowToReport, self.args)


def everyone_fails_rank0_last(ctx, folder):
    # Ranks 1.. are reporting their own failure when rank 0's stops the world.
    if ctx.rank > 0:
        raise SlowToReport(folder, ctx.rank)
    while len([n for n in os.listdir(folder) if n.startswith("reporting")]) < ctx.world_size - 1:
        time.sleep(0.01)
    raise ValueError("rank 0 fails last")


def _churn():
    """A thread pool's life: threads that start and end, over and over."""
    while True:
        thread = threading.Thread(target=sum, args=(range(100),))
        thread.start()
        thread.join()


def survivors_churn_threads_when_rank0_fails(ctx, threads):
    """Every rank but 0 keeps threads coming and going; rank 0 then fails,
    and the harness asks the others for their stacks."""
    if ctx.rank != 0:
        for _ in range(threads):
            threading.Thread(target=_churn, daemon=True).start()
        time.sleep(120)
    time.sleep(0.5)  # the others' threads are churning by now
    raise RuntimeError("rank 0 fails while its peers' threads churn")


def holds_the_gil_in_c(ctx):
    """Rank 1 sleeps in C without releasing the GIL (PyDLL keeps it): no
    thread of it can run Python to answer a request for its stacks."""
    if ctx.rank == 1:
        ctypes.PyDLL(ctypes.util.find_library("c")).sleep(60)
    return ctx.rank


def aborts_when_asked_for_stacks(ctx):
    """Rank 1 aborts itself 25 ms after the harness asks for its stacks, as
    torch aborts a rank whose peer died while the world is being stopped;
    rank 0 fails, which starts that."""
    if ctx.rank == 1:
        stacks = rank_file(ctx.workdir, 1, "stacks")
        while os.path.getsize(stacks) == 0:
            time.sleep(0.001)
        # Past the supervisor's polling (every 20 ms), inside its 50 ms grace.
        time.sleep(0.025)
        os.abort()
    time.sleep(0.3)
    raise RuntimeError("rank 0 fails")


def record_channel_requests(rank, world_size, folder):
    """A spawned program in which no rank names a device (as
    programs.cuda_rpc's worker1 names none); each
    rank's request for TensorPipe channels is recorded by a stand-in for the
    harness's channel decision, which a program never sees otherwise."""
    import rpc_harness._devices as decision

    asked = {}

    def record(device_maps=None, devices=None, *, cuda=None, world=False):
        asked["world"] = world
        return ["basic"]

    decision.channels = record
    options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8)
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size, rpc_backend_options=options)
    rpc.shutdown()
    return asked


def device_of(ctx):
    return str(ctx.device)


def _add_one_here(x):
    """Served on the peer: the tensor must have arrived on the peer's own
    device (along the world's device maps when that is a GPU)."""
    here = rpc_harness.current_context().device
    assert x.device == torch.device(here), f"arrived on {x.device}, not on this rank's {here}"
    return x + 1


def ring_on_device(ctx, kill_rank=None, nvml=False):
    """Each rank rpc_syncs a tensor on its device to the next rank, which
    adds one on its own device; what comes back is on the sender's device.
    The same entry runs on the CPU (tests/world) and on CUDA (tests/gpu).
    ``kill_rank`` SIGKILLs itself after its call (the nothing-left check);
    ``nvml`` adds whether NVML lists this rank's pid as holding GPU memory
    (that check is not vacuous)."""
    x = torch.full((4,), float(ctx.rank), device=ctx.device)
    peer = ctx.names[(ctx.rank + 1) % ctx.world_size]
    y = rpc.rpc_sync(peer, _add_one_here, args=(x,))
    if ctx.rank == kill_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    out = {"device": str(y.device), "value": y.cpu().tolist()}
    if nvml:
        from rpc_harness._parent import nvml as _nvml

        out["listed_by_nvml"] = os.getpid() in (_nvml.gpu_processes() or {})
    return out


class Counter:
    """What the proxies' calls reach: counts them, under a lock (they come
    from many threads at once)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls = 0

    def inc(self):
        with self.lock:
            self.calls += 1
        return self.calls


def new_counter():
    """An RRef the serving rank owns: the caller did not make it by
    ``remote(to, Counter)``, so it learns its type only from torch."""
    return rpc.RRef(Counter())


def proxies_first_called_from_threads(ctx, rounds, threads):
    """Rank 0, in each round, takes a fresh RRef from rank 1 and calls it
    through its proxy from ``threads`` threads released together: every
    call is a proxy's first, each racing the others' fetch of the type.
    Even rounds call through ``rpc_sync()``, odd ones through ``rpc_async()``."""
    if ctx.rank != 0:
        return None
    peer = ctx.names[1]
    for round_ in range(rounds):
        rref = rpc.rpc_sync(peer, new_counter)
        barrier = threading.Barrier(threads)

        def call(rref=rref, barrier=barrier, sync=round_ % 2 == 0):
            barrier.wait()
            if sync:
                rref.rpc_sync().inc()
            else:
                rref.rpc_async().inc().wait()

        workers = [threading.Thread(target=call) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    return rounds * threads


def math_kernels_warm(ctx):
    from rpc_harness import rank_setup

    return rank_setup.math_kernels_warm()
