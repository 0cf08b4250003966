"""The resource spec: which machines, devices and SSH settings a job runs on.

    resource_spec   ResourceSpec, NodeSpec, DeviceSpec, SSHConfig: a checked spec file
    yaml_tree       the YAML tree with file and line of every value
    schema          every key: its type, default and one-line description
    rules           cross-field rules (one chief, addresses, task order)
    convert         specs from TF_CONFIG (Kubernetes operators) and Slurm allocations
    cluster         spec -> TensorFlow server and session configuration

``autodist.resource_spec`` is the public name of ``resource_spec`` (AutoDist's).
"""
from autodist.spec.resource_spec import DEVICE_TYPES, DeviceSpec, DeviceType, NodeSpec, ResourceSpec, SSHConfig

__all__ = ["ResourceSpec", "DeviceSpec", "DeviceType", "NodeSpec", "SSHConfig", "DEVICE_TYPES"]
