"""A race for the bench and the docs (``rpc-harness bench --only schedules``):
a lost update in a served handler: a bank adds deposits to a balance it
reads, asks an auditor for the fee (an RPC), and writes back. Two clients
deposit once each; when both handlers read before either writes, one
deposit is lost and the bank's check at the end fails.

The second client does ``work`` milliseconds of local work before it
deposits, so free-running worlds rarely overlap the two handlers (the
window is the auditor's round trip); under a controlled schedule the order
of steps, not the clock, decides. The program never imports the harness.
"""

import time

import torch.distributed.rpc as rpc

AMOUNT, FEE = 10, 1
balance = {"value": 0}


def fee(amount):
    return FEE


def deposit(amount):
    seen = balance["value"]  # read
    charge = rpc.rpc_sync("auditor", fee, args=(amount,))
    balance["value"] = seen + amount - charge  # write: another deposit in between is lost


def run_worker(rank, world_size, work=0.02):
    names = ["bank", "auditor"] + [f"client{k}" for k in range(1, world_size - 1)]
    rpc.init_rpc(names[rank], rank=rank, world_size=world_size)
    if names[rank].startswith("client"):
        if rank > 2:
            deadline = time.perf_counter() + work  # busy: the operating system decides the rest
            while time.perf_counter() < deadline:
                pass
        rpc.rpc_sync("bank", deposit, args=(AMOUNT,))
    rpc.shutdown()
    if rank == 0:
        expected = (world_size - 2) * (AMOUNT - FEE)
        assert balance["value"] == expected, f"lost update: balance {balance['value']}, expected {expected}"
        return balance["value"]
    return None


# -- a pipeline whose last stage trusts arrival order ---------------------------------------
#
# The driver sends micro-batches 0, 1, 2 to the first stage with rpc_async,
# as a pipeline's driver does; each first-stage handler forwards its
# micro-batch to the last stage. The last stage appends what arrives,
# assuming the order it was sent in: the handlers run on a thread pool, so
# when a later micro-batch's handler forwards first, the pipeline's output
# is out of order. The driver works ``work`` seconds between sends, so
# free-running worlds rarely reorder them (the handlers are far apart); under
# a controlled schedule the order of steps decides.

_arrived: list[int] = []


def stage2_forward(microbatch):
    _arrived.append(microbatch)  # the bug: arrival order taken for send order
    return microbatch


def stage1_forward(microbatch):
    return rpc.rpc_sync("stage2", stage2_forward, args=(microbatch,))


def arrived():
    return list(_arrived)


def pipeline_worker(rank, world_size=3, microbatches=3, work=0.02):
    names = ["driver", "stage1", "stage2"]
    rpc.init_rpc(names[rank], rank=rank, world_size=world_size)
    order = None
    if rank == 0:
        futures = []
        for microbatch in range(microbatches):
            if microbatch:
                deadline = time.perf_counter() + work
                while time.perf_counter() < deadline:
                    pass
            futures.append(rpc.rpc_async("stage1", stage1_forward, args=(microbatch,)))
        for future in futures:
            future.wait()
        order = rpc.rpc_sync("stage2", arrived)
    rpc.shutdown()
    if rank == 0:
        assert order == list(range(microbatches)), f"pipeline out of order: the last stage got {order}"
    return order


# -- messages to one rank -------------------------------------------------------------------
#
# Every sender sends one message to the collector, whose handlers append it
# to a log; the collector returns the log once everyone has left. Every
# order of the messages is a possible outcome, and only their order at the
# collector matters: the textbook case for partial-order reduction (no race
# here fails; ``rpc_harness.explore(strategy="dpor")`` reaches every order).

_log: list[int] = []


def note(sender):
    _log.append(sender)


def collector_worker(rank, world_size):
    rpc.init_rpc("collector" if rank == 0 else f"sender{rank}", rank=rank, world_size=world_size)
    if rank:
        rpc.rpc_sync("collector", note, args=(rank,))
    rpc.shutdown()
    return list(_log) if rank == 0 else None


# -- the lost update as an entry of run(...), for reused worlds ---------------------------------
#
# The same race, written as an entry the harness runs in every rank after
# joining its world (``run_world``, ``rpc_world_module.run``), so that it can
# run again and again in one live world: the bank asks each client to deposit
# (each client's handler calls the bank's ``deposit``) and checks the balance
# once every deposit has been answered. It starts from a balance of its own
# each time, and leaves nothing behind for the next entry.

BANK_NAMES = ("bank", "auditor", "client1", "client2")


def ask_to_deposit(amount):
    rpc.rpc_sync("bank", deposit, args=(amount,))


def bank_entry(ctx):
    """Every rank's entry (names ``BANK_NAMES``, or more clients): the bank
    drives, the others serve."""
    if ctx.name != "bank":
        return None
    balance["value"] = 0  # nothing else touches it until the bank asks for deposits
    clients = [name for name in ctx.names if name.startswith("client")]
    futures = [rpc.rpc_async(client, ask_to_deposit, args=(AMOUNT,)) for client in clients]
    for future in futures:
        future.wait()
    expected = len(clients) * (AMOUNT - FEE)
    assert balance["value"] == expected, f"lost update: balance {balance['value']}, expected {expected}"
    return balance["value"]


# -- messages to one rank, as an entry of run(...) ------------------------------------------------
#
# The collector asks every sender for its message (each sender's handler
# sends it to the collector's ``note``) and returns the log, in whatever
# order the messages came; it clears the log for the next entry.

COLLECTOR_NAMES = ("collector", "sender1", "sender2", "sender3")


def send_note(sender):
    rpc.rpc_sync("collector", note, args=(sender,))


def collector_entry(ctx):
    """Every rank's entry (names ``COLLECTOR_NAMES``, or more senders): the collector drives."""
    if ctx.name != "collector":
        return None
    _log.clear()
    futures = [rpc.rpc_async(name, send_note, args=(rank,)) for rank, name in enumerate(ctx.names) if rank]
    for future in futures:
        future.wait()
    order = list(_log)
    _log.clear()
    return order


# A verdict that rests on a timeout: ``impatient`` asks ``server`` for a
# reply it takes ``sleep`` seconds to make, and waits the world's RPC
# timeout for it (``rpc_timeout``, 30 s in the bench). Free-running, torch
# marks the call with its timeout error once that time has passed; under a
# controlled schedule both the sleep and the timeout run on the schedule's
# clock, so the same verdict comes at once.
IMPATIENT_NAMES = ("server", "impatient")


def slow_reply(seconds):
    time.sleep(seconds)
    return "answered"


def impatient_worker(rank, world_size, sleep=60.0):
    rpc.init_rpc(IMPATIENT_NAMES[rank], rank=rank, world_size=world_size)
    outcome = None
    if rank == 1:
        try:
            outcome = rpc.rpc_sync("server", slow_reply, args=(sleep,))
        except RuntimeError as error:
            outcome = f"{type(error).__name__}: {error}"
    rpc.shutdown()
    return outcome
