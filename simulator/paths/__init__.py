"""The simulator's execution paths, one module per value of ``vgcsim simulate --path``.

What the simulator computes is defined by the reference engine, :mod:`.reference` (``path =
"reference"``: one SimPy process per rank). The other paths are optimizations of it: each
computes the reference's finish times, on the runs where it claims to be exact, and its
docstring names the test that holds it to the reference. A user picks one with ``vgcsim
simulate --path`` (``--set path=...``; ``auto`` takes the fastest exact one,
:mod:`vgcsim.simulator.replay`):

=============  ==========================================  ====================================
``--path``     function                                    held to the reference by
=============  ==========================================  ====================================
reference      :func:`.reference.run_reference`            (the definition)
message        :func:`.message.run_message`                ``tests/simulator/test_engine_reference.py``
collective     :func:`.collective.run_collective`,         ``test_engine_reference.py::test_every_``
               :func:`.collective.run_collective_steps`    ``optimized_path_equals_the_reference_...``
round          :func:`.round.run_rounds`                   the same test
=============  ==========================================  ====================================

A *phase* is one collective call (:class:`.plan.Phase`): each rank's ready time (absolute
seconds), the schedule and its unit sizes. A step runs a list of phases; a rank starts phase
b at max(its ready time, the end of its phase b−1), so phases queue on one communication
stream per rank. Every path then charges the call's software cost, ``call_overhead_s`` × the
calls its schedule's key makes (:func:`.plan.call_s`; a link's ``call_overhead_s``), before
the phase's first round: once per call and rank, not per round, as the cost models do. Where
the link prices messages by size (its ``segments``), every path moves each flow's wire bytes
(``vgcsim.core.collectives.wire_bytes``, a ``wire`` function of the payload bytes) at the
route's rate, and reduces its payload bytes.

Derived tables of a schedule (who sends what in which round, route bandwidths and latencies
on a topology, the stacked matrices of the collective-level path) are built on first use and
kept in a :class:`.plan.RunCache` of one topology, which a caller that runs many steps keeps
for the run (``vgcsim.simulator.replay`` does); the frozen
:class:`~vgcsim.simulator.collectives.Schedule` itself is never written to. Without a cache
each call builds what it needs.
"""
