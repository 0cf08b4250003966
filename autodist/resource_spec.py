"""``autodist.resource_spec``, AutoDist's import path: the spec lives in ``autodist.spec.resource_spec``."""
from autodist.spec.resource_spec import DEVICE_TYPES, DeviceSpec, DeviceType, NodeSpec, ResourceSpec, SSHConfig

__all__ = ["ResourceSpec", "DeviceSpec", "DeviceType", "NodeSpec", "SSHConfig", "DEVICE_TYPES"]
