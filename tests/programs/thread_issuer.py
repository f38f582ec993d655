"""Workers that do things where no task of a schedule is. ``how``:

- ``"thread"``: issue an RPC from a thread of their own (as prefetchers and
  background reporters do);
- ``"callback"``: wait on a peer inside a ``then`` callback, which torch's
  docs advise against but programs do (``"callback-remote"``: on the
  RRef of a ``remote()`` made there);
- ``"loader"``: feed a ``queue.Queue`` from a thread of their own (a data
  loader) that the main thread consumes;
- ``"start"``: start a thread that makes no RPC and touches nothing shared
  (a watchdog), then call a peer;
- ``"events"``: serve a call that waits for an Event a thread of their own
  sets late, after setting another one;
- ``"poll"``: serve calls that try a semaphore without waiting
  (``acquire(timeout=0)``, as ``ThreadPoolExecutor.submit`` does) under a
  lock.

The program never imports the harness."""

import queue
import threading
import time

import torch.distributed.rpc as rpc


def add(a, b):
    return a + b


_first, _second = threading.Event(), threading.Event()
_lock, _slots = threading.Lock(), threading.Semaphore(0)


def wait_for_second():
    woken = _second.wait()
    return woken, _second.is_set()


def poll(x):
    with _lock:
        got = _slots.acquire(timeout=0)
    return x, got


def _set_late():
    time.sleep(0.2)
    _first.set()
    time.sleep(0.3)
    _second.set()


def _loaded_sum():
    batches = queue.Queue()
    loader = threading.Thread(target=lambda: [batches.put(i) for i in range(3)], name="loader")
    loader.start()
    total = sum(batches.get() for _ in range(3))
    loader.join()
    return total


def run_worker(rank, world_size=2, how="thread"):
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=world_size)
    out = None
    if rank == 0 and how == "thread":
        box = []
        prefetcher = threading.Thread(target=lambda: box.append(rpc.rpc_sync("w1", add, args=(1, 2))),
                                      name="prefetcher")
        prefetcher.start()
        prefetcher.join()
        out = box[0]
    elif rank == 0 and how == "callback":
        out = rpc.rpc_async("w1", add, args=(1, 2)).then(
            lambda fut: rpc.rpc_sync("w1", add, args=(fut.value(), 10))).wait()
    elif rank == 0 and how == "callback-remote":
        out = rpc.rpc_async("w1", add, args=(1, 2)).then(
            lambda fut: rpc.remote("w1", add, args=(fut.value(), 10)).to_here()).wait()
    elif how == "events":
        if rank == 1:
            threading.Thread(target=_set_late, name="setter").start()
        else:
            out = rpc.rpc_sync("w1", wait_for_second)
    elif how == "poll" and rank != 0:
        out = rpc.rpc_sync("w0", poll, args=(rank,))
    elif rank == 0 and how == "loader":
        out = rpc.rpc_sync("w1", add, args=(_loaded_sum(), 0))
    elif how == "start":
        watchdog = threading.Thread(target=lambda: None, name="watchdog", daemon=True)
        watchdog.start()
        out = rpc.rpc_sync(f"w{(rank + 1) % world_size}", add, args=(rank, 1))
        watchdog.join()
    rpc.shutdown()
    return out
