"""Measuring a cluster for the cost model: a short job of its own, run by ``autodist calibrate``.

    probe          the transport between the spec's nodes, measured (a Calibration)
    protocol       the probe's synchronous-PS and collective steps, every node running its own client
    first_probe    a cluster never measured, probed once (in a child process) when a job's chief
                   planning with AutoStrategy launches it; the figures reach the builder as a Calibration

Modules are imported by path; importing the package imports nothing.
"""
__all__ = []
