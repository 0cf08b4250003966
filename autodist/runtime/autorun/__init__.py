"""``autodist run``: an unmodified training script, distributed (and ``autodist plan``: captured).

    run            the script run with its sessions (or Keras model) replaced by distributed ones
    eager_keras    an eager Keras ``fit`` script's model run on a distributed twin
    script_session the tf.compat.v1.Session look-alike such a script gets
    user_script    a user's script run as ``__main__``, or until it asks for a session

Modules are imported by path; importing the package imports nothing.
"""
__all__ = []
