"""The RPC layer of a rank: torch.distributed.rpc's hooks, message faults, stores."""
