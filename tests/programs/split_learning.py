"""Split learning as public examples write it: the client holds the first
layers, the server the rest, built with ``rpc.remote`` by a constructor that
asks the client for its settings by RPC (the layer width), and every batch
crosses through an RRef proxy: ``rpc_sync()``, ``rpc_async()`` or
``remote()`` by ``how``. Such a proxy's first call fetches the RRef's type
from its owner, which answers only once the constructor, with its own RPC,
has run. The program never imports the harness."""

import torch
import torch.distributed.rpc as rpc
import torch.nn as nn

WIDTH = 4


def client_settings():
    return {"width": WIDTH, "seed": 7}


class ServerHalf(nn.Module):
    def __init__(self):
        super().__init__()
        settings = rpc.rpc_sync("client", client_settings)  # the constructor's own RPC
        torch.manual_seed(settings["seed"])
        self.layer = nn.Linear(settings["width"], 2)

    def forward(self, activations):
        with torch.no_grad():
            return self.layer(activations)


def run_worker(rank, world_size=2, batches=3, how="rpc_sync"):
    names = ["client", "server"]
    rpc.init_rpc(names[rank], rank=rank, world_size=world_size)
    outputs = None
    if rank == 0:
        torch.manual_seed(1)
        first = nn.Linear(3, WIDTH)
        server = rpc.remote("server", ServerHalf)
        outputs = []
        for batch in range(batches):
            with torch.no_grad():
                activations = first(torch.full((1, 3), float(batch)))
            if how == "rpc_sync":
                out = server.rpc_sync().forward(activations)
            elif how == "rpc_async":
                out = server.rpc_async().forward(activations).wait()
            else:
                out = server.remote().forward(activations).to_here()
            outputs.append([round(v, 5) for v in out.flatten().tolist()])
    rpc.shutdown()
    return outputs
