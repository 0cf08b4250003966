"""Running a job: from a captured GraphItem to sessions on every node, and back out.

    job            Job, the one entry behind ``AutoDist``: start (chief) / join (member),
                   reopen (``ad.function``), finish
    strategy_handoff  the strategy built (chief) or loaded (member), its calibration, the argv
    job_views      a node's tracer and scalar log, kept across reopened sessions
    context        JobContext: one process's place in a job (AUTODIST_JOB)
    coordinator    the chief's side: preflight, ports, servers, scripts, watch, finish
    node_launch    one node's start: its runner, job directory, server argv, ready handshake
    chief_signals  Ctrl-C / SIGTERM to the chief stop the job; failures raised in the chief
    job_logs       each launched process's full log, on the chief, kept after the job (never pruned while it runs)
    limits         the ranges of a job's settings: autodist run's options, AutoDist(...)'s arguments
    restart, shrink   a new job after a node failure; leaving out unreachable nodes at a restart
    elastic/       elastic jobs: host discovery, membership and back-off, the supervisor, an attempt's
                   stop at a step boundary, a member's preemption notice
    progress       the chief's progress line: step, steps/s, examples/s over the nodes, ETA
    server         ``python -m autodist.runtime.server``: a node's TensorFlow server
    node_session   this node's graph transformed, on its server, initialized: a DistributedSession
    session        DistributedSession: steps watched (WatchedCaller), close bounded
    fetch_mapping  FetchMapper: feeds split over replicas, fetches mapped back
    step_report    what a node's session is doing, reported to the chief (and when it waits for it)
    stall          a step without progress for the stall timeout: the report naming who held it up
    notices        the chief's own console lines about its job (one function, to route them)
    function       ``ad.function``: TF2-style step functions through the session
    user_script    a user's script run as ``__main__``, or until it asks for a session
    autorun        ``autodist run``: an unmodified tf.compat.v1 script, distributed (``autodist plan``: captured)
    keras_fit      Keras' fit/evaluate/predict, distributed (keras_data: their batches; keras_steps: their steps)
    script_session the tf.compat.v1.Session look-alike such a script gets

A resource spec reaches the TensorFlow servers forward through these modules:
``api.AutoDist`` -> ``job.Job`` -> ``coordinator.Coordinator`` -> ``autodist.runner``
-> ``server`` (-> ``autodist.spec.cluster`` for the server's configuration).
"""
__all__ = []
