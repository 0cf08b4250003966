"""Watching a running job: what each node reports, the chief's progress line, stalls, traces and scalars.

    step_report    what a node's session is doing, reported to the chief (and when it waits for it)
    progress       the chief's progress line: step, steps/s, examples/s over the nodes, ETA
    stall          a step without progress for the stall timeout: the report naming who held it up
    timeline       traced steps of every node, merged on the chief (Chrome trace)
    summaries      TensorBoard scalars of a job and graphs of a plan
    views          a node's tracer and scalar log, kept across reopened sessions
    straggler      interface counters per node, and the node whose link holds every step up
    ticker         the one loop of the watch's threads: a function every few seconds until stopped

Modules are imported by path; importing the package imports nothing.
"""
__all__ = []
