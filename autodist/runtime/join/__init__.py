"""Jobs the platform starts: every process runs the same command and joins; none launches another.

Kubernetes (TFJob: ``TF_CONFIG``), ``srun --ntasks``, ``mpirun`` and a spec file
with ``AUTODIST_NODE_ADDRESS`` start every process of the job at once, in any
order. ``AutoDist()`` without a spec file (or with one and
``AUTODIST_NODE_ADDRESS``), ``autodist run`` and Keras ``fit`` then work as
in a job the chief launches, with no SSH and no shared file system:

    places      where this process is: one resolver per source
    slurm_tasks which node each task of srun runs on, for every task distribution
    rendezvous  the processes' addresses, exchanged at the start (MPI, Slurm's arbitrary distribution)
    cluster     the job's resource spec, the same in every process
    peers       the start-up barrier (bounded, naming whom it waits for) and the watch
    exchange    messages over the job's own TensorFlow servers (the plan, "done")
    platform    PlatformJob: the whole start, the plan's hand-over, the end, EXIT_RETRY

See docs/kubernetes.md.
"""
from autodist.runtime.join.places import EXIT_RETRY, platform_started

__all__ = ["EXIT_RETRY", "platform_started"]   # PlatformJob: autodist.runtime.join.platform (imports TensorFlow)
