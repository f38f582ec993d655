"""Collectives: what the harness does about ``torch.distributed``'s process
groups in a rank (failpoints at every collective and point-to-point op,
each rank's history of them) and in the parent (where each rank was when a
world hung or lost a rank)."""
