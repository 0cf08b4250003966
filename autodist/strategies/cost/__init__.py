"""The cost model: what one training step of a plan costs on a cluster, before anything runs.

    from autodist.strategies.cost import predict, measure_compute, cluster_calibration
    calibration = cluster_calibration(spec)            # the cached probe, else the spec's prior
    compute = measure_compute(graph_item, batch=32)    # one replica's single-device step
    prediction = predict(strategy, builder_variables(graph_item), compute, calibration)
    prediction.step_s, prediction.comm_share

Modules: ``traffic`` (bytes and messages per link, read from the plan through
``autodist.plan.contract``), ``model`` (step time from traffic, compute and
calibration), ``calibration`` (the constants, their cache and the spec's
prior), ``compute`` (the single-device step, measured or estimated). The
probe that measures a cluster runs processes, so it lives in the runtime
(``autodist.runtime.calibrate``) and hands its figures over as a
``Calibration``. See ``docs/cost_model.md``. TensorFlow is imported only by
``compute``, when it runs.
"""
from autodist.strategies.cost.calibration import (Calibration, load_calibration, prior_calibration,
                                                  save_calibration)
from autodist.strategies.cost.compute import estimate_compute, measure_compute
from autodist.strategies.cost.model import Compute, Prediction, predict
from autodist.strategies.cost.traffic import StepTraffic, step_traffic

__all__ = ["Calibration", "Compute", "Prediction", "StepTraffic", "predict", "step_traffic",
           "measure_compute", "estimate_compute", "load_calibration", "save_calibration",
           "prior_calibration", "cluster_calibration"]


def cluster_calibration(spec, directory=None):
    """The probe's cached calibration of ``spec``'s cluster, else the prior from the spec."""
    return load_calibration(spec, directory) or prior_calibration(spec)
