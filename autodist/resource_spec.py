"""``autodist.resource_spec``: AutoDist 0.7's import path, no logic of its own (names of ``spec.resource_spec``)."""
from autodist.spec.resource_spec import DEVICE_TYPES, DeviceSpec, DeviceType, NodeSpec, ResourceSpec, SSHConfig

__all__ = ["ResourceSpec", "DeviceSpec", "DeviceType", "NodeSpec", "SSHConfig", "DEVICE_TYPES"]
