"""Running a job: from a captured GraphItem to sessions on every node, and back out.

At the top, the job itself; its concerns live in rooms (sub-packages)::

    job               Job, the one entry behind ``AutoDist``: start (chief) / join (member),
                      reopen (``ad.function``), finish
    strategy_handoff  the strategy built (chief) or loaded (member), its calibration, the argv
    context           JobContext: one process's place in a job (AUTODIST_JOB)
    limits            the ranges of a job's settings: autodist run's options, AutoDist(...)'s arguments
    notices           the chief's own console lines about its job (one function, to route them)
    ending            how a job ends: the chief's teardown, sys.exit in the scope, the status at exit

    launch/           the chief's coordinator (preflight, ports, scripts, watch, finish), one node's
                      start, the servers (each node's script hosts its own), signals, node logs
    session/          this node's session: the graph transformed and initialized (node), the
                      DistributedSession, fetch/feed mapping, run plans, micro-steps, ad.function
    watch/            step reports, the progress line, stall reports, the merged timeline,
                      TensorBoard summaries, a node's views of them
    recovery/         restarts (``--max-restarts``) and leaving out unreachable nodes (``min_nodes``)
    elastic/          elastic jobs: host discovery, membership and back-off, the supervisor, an attempt's
                      stop at a step boundary, a member's preemption notice
    join/             jobs the platform starts (TF_CONFIG, srun --ntasks, mpirun): every process joins
    keras/            Keras' fit / evaluate / predict, distributed
    autorun/          ``autodist run``: an unmodified script, distributed (``autodist plan``: captured)
    calibrate/        the probe that measures a cluster for the cost model (``autodist calibrate``)

A resource spec reaches the TensorFlow servers forward through these modules:
``api.AutoDist`` -> ``job.Job`` -> ``launch.coordinator.Coordinator`` -> ``autodist.runner``
(one runner per node) -> the script on each node, whose ``AutoDist(...)`` -> ``job.Job`` ->
``launch.member_server.serve`` -> ``launch.server.start_in_process`` -> ``autodist.spec.cluster``
(the chief's own server: ``Coordinator.launch(serve_chief=True)`` -> ``launch.server``).
"""
__all__ = []
