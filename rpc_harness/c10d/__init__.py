"""Collectives: what the harness does about ``torch.distributed``'s process
groups in a rank (failpoints at every collective and point-to-point op,
each rank's history of them; the default process group a world brings up on
its own store and a spawned program's own ``init_process_group``, ``group``;
what an entry of a reused world must leave behind, ``clean``) and in the
parent (where each rank was when a world hung or lost a rank)."""
