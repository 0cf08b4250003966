"""The Kubernetes manifests of examples/kubernetes against the operators' published schemas, types included.

Each manifest is validated against its custom resource's schema as the
operator publishes it (``tests/crds/``: the Training Operator's TFJob v1, the MPI
Operator's MPIJob v2beta1; field names, types, enums, required fields), with
unknown fields refused as ``kubectl apply --validate=strict`` refuses them (an
API server would drop them silently), and every replica's pod template against
Kubernetes' own PodTemplateSpec schema (the kubernetes-validate package,
strict). A manifest with a planted fault of each kind fails. Then what the
examples promise: the checkpoint volume on the chief's pod alone, and the
command that keeps checkpoints (``autodist run --checkpoint-dir``).

What runs for real is in tests/multihost (Slurm and Open MPI on emulated
hosts); these manifests are only validated: no Kubernetes cluster runs here.
"""
import copy
import os

import pytest
import yaml

import tiers

jsonschema = tiers.importorskip("k8s-sdk", "jsonschema", "the test dependency jsonschema is not installed")
kubernetes_validate = tiers.importorskip("k8s-sdk", "kubernetes_validate",
                                         "the test dependency kubernetes-validate is not installed")

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFESTS = os.path.join(os.path.dirname(HERE), "examples", "kubernetes")
KUBERNETES = "1.30"   # the Kubernetes version whose PodTemplateSpec schema the templates are checked against
KINDS = {"tfjob.yaml": ("tfjob-v1.yaml", "tfReplicaSpecs"), "mpijob.yaml": ("mpijob-v2beta1.yaml", "mpiReplicaSpecs")}


def _load(path):
    with open(path) as f:
        return yaml.safe_load(f)


def _strict(schema):
    """``schema`` refusing fields it does not name (``kubectl apply --validate=strict``)."""
    schema = copy.deepcopy(schema)
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return schema


def problems(document, name):
    """Every way ``document`` (the manifest ``name`` or a variant of it) breaks its schemas, as text."""
    crd, replicas = KINDS[name]
    schema = _strict(_load(os.path.join(HERE, "crds", crd)))
    found = ["{}: {}".format("/".join(map(str, e.absolute_path)), e.message)
             for e in jsonschema.Draft7Validator(schema).iter_errors(document)]
    for role, replica in ((document.get("spec") or {}).get(replicas) or {}).items():
        template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": role.lower()},
                    "template": replica.get("template") if isinstance(replica, dict) else None}
        try:
            kubernetes_validate.validate(template, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as e:
            found.append("{} template: {}".format(role, e.message))
    return found


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_manifest_is_valid_under_its_operators_schema_and_kubernetes_pod_schema(name):
    assert problems(_load(os.path.join(MANIFESTS, name)), name) == []


def _planted(document, name, fault):
    """``document`` with one planted fault: a wrong type, an unknown field, a missing required field, a bad pod."""
    broken = copy.deepcopy(document)
    specs = broken["spec"][KINDS[name][1]]
    role = sorted(specs)[0]
    if fault == "type":
        specs[role]["replicas"] = "1"
    elif fault == "unknown":
        specs[role]["restartPolicies"] = specs[role].pop("restartPolicy")
    elif fault == "required":
        del broken["spec"][KINDS[name][1]]
    else:
        del specs[role]["template"]["spec"]["containers"][0]["name"]
    return broken


@pytest.mark.parametrize("fault,message", [("type", "'1' is not of type 'integer'"),
                                           ("unknown", "'restartPolicies' was unexpected"),
                                           ("required", "is a required property"),
                                           ("pod", "template: 'name' is a required property")])
@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_planted_fault_is_found(name, fault, message):
    found = problems(_planted(_load(os.path.join(MANIFESTS, name)), name, fault), name)
    assert any(message in line for line in found), found


def _containers(replica):
    return replica["template"]["spec"]["containers"]


def _mounts(replica):
    return [m["mountPath"] for c in _containers(replica) for m in c.get("volumeMounts", [])]


def test_the_tfjob_keeps_checkpoints_on_the_chiefs_pod_alone_and_restarts_on_the_retry_status():
    specs = _load(os.path.join(MANIFESTS, "tfjob.yaml"))["spec"]["tfReplicaSpecs"]
    assert _mounts(specs["Chief"]) == ["/ckpt"] and _mounts(specs["Worker"]) == []
    assert "volumes" not in specs["Worker"]["template"]["spec"]
    for replica in specs.values():
        assert replica["restartPolicy"] == "ExitCode"   # 143, a peer's failure, is retried; 1-127 are not
        command, = [c["command"] for c in _containers(replica)]
        assert command[:4] == ["autodist", "run", "--checkpoint-dir", "/ckpt"]


def test_the_mpijob_runs_the_chief_in_the_launcher_with_the_checkpoint_volume_and_sets_no_rank_address():
    document = _load(os.path.join(MANIFESTS, "mpijob.yaml"))
    assert document["apiVersion"] == "kubeflow.org/v2beta1"
    specs = document["spec"]["mpiReplicaSpecs"]
    assert _mounts(specs["Launcher"]) == ["/ckpt"] and _mounts(specs["Worker"]) == []
    launcher, = _containers(specs["Launcher"])
    command = " ".join(launcher["command"] + launcher["args"])
    assert 'echo "localhost slots=1"; cat /etc/mpi/hostfile' in command   # rank 0 in the launcher
    assert "-np {}".format(specs["Worker"]["replicas"] + 1) in command
    assert "autodist run --checkpoint-dir /ckpt" in command
    assert "AUTODIST_CHIEF_ADDRESS=" in command and "AUTODIST_ADVERTISE_ADDRESS" not in command
