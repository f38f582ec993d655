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
