"""The views of a running job on this node: the merged timeline's tracer and the TensorBoard scalar log.

``autodist.runtime.job`` asks for them with every session it opens; they are
made with the first one and kept by the sessions reopened after it, so one
node writes one trace and one event file per job::

    JobViews(trace_dir, logdir).for_session(context, strategy, item, spec)
        -> {"tracer": StepTracer | None, "scalars": ScalarLog | None}   (open_node_session's keywords)
"""

__all__ = ["JobViews"]


class JobViews:
    """A node's tracer (``trace_dir``, ``autodist.runtime.watch.timeline``) and scalar log (``logdir``,
    ``autodist.runtime.watch.summaries``); None for a view that is off."""

    def __init__(self, trace_dir=None, logdir=None):
        self._trace_dir, self._logdir = trace_dir, logdir
        self.tracer = self.scalars = None

    def for_session(self, context, strategy, item, resource_spec):
        """The session's tracer and scalar log: made with the first session, kept by reopened ones."""
        if self._trace_dir and self.tracer is None:
            from autodist.runtime.watch.timeline import StepTracer
            self.tracer = StepTracer(self._trace_dir, context.task_index, context.address, context.num_tasks,
                                     context.is_chief, target=context.target)
        if self._logdir and self.scalars is None:
            from autodist.runtime.watch.summaries import ScalarLog, node_bytes_per_step
            from autodist.strategies.inputs import batch_statistics, builder_variables
            from autodist.strategies.report import plan_report
            report = plan_report(strategy, builder_variables(item), resource_spec, statistics=batch_statistics(item))
            self.scalars = ScalarLog(self._logdir, context.task_index,
                                     node_bytes_per_step(report, context.task_index, context.address),
                                     address=context.address)
        return {"tracer": self.tracer, "scalars": self.scalars}
