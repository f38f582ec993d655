"""The schedule core: what a controlled world's supervisor decides, with no
process, pipe, thread or torch in it (tests/unit/test_layers.py keeps it so).

- :mod:`.scheduler`: the tasks of a world, the calls between them, when the
  world is quiet enough to choose, and the choice made;
- :mod:`.strategies`: how the next task is chosen (the random walk, PCT,
  replay, the guide that shrinking uses), each behind one method;
- :mod:`.recorder`: the steps taken, and a replay checked against them;
- :mod:`.virtual_time`: the schedule's own clock for sleeps and timeouts.

What describes a schedule (its parsed form, its steps, the replay form) is
public, in :mod:`rpc_harness.schedule`. The core's adapters are thin: the
supervisor's (:mod:`rpc_harness._parent.schedule_link`) carries the ranks'
messages to the scheduler and its decisions back; the rank's
(:mod:`rpc_harness._rank.gate`) stops each task at its scheduling points until
the supervisor lets it go. docs/guides/schedules.md states the guarantees,
and tests/unit/test_scheduler_model.py checks them against a model.
"""
