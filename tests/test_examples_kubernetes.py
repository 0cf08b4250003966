"""The Kubernetes manifests of examples/kubernetes load into the Training Operator's SDK models, field for field.

The SDK's models drop what they do not know, so a manifest is read into its
model (``KubeflowOrgV1TFJob``, ``KubeflowOrgV1MPIJob``), written back, and must
come back equal: a misspelt or misplaced field fails the test. The command of
every container is autodist's: ``autodist run`` (or ``mpirun ... autodist run``).
"""
import json
import os

import pytest
import yaml

import tiers

training = tiers.importorskip("k8s-sdk", "kubeflow.training", "the test dependency kubeflow-training is not installed")

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFESTS = os.path.join(os.path.dirname(HERE), "examples", "kubernetes")


class _Response:
    def __init__(self, document):
        self.data = json.dumps(document)


def _load(name):
    with open(os.path.join(MANIFESTS, name)) as f:
        return yaml.safe_load(f)


@pytest.mark.parametrize("name,model", [("tfjob.yaml", "KubeflowOrgV1TFJob"), ("mpijob.yaml", "KubeflowOrgV1MPIJob")])
def test_a_manifest_is_a_model_with_no_unknown_field(name, model):
    from kubeflow.training.api_client import ApiClient
    client = ApiClient()
    document = _load(name)
    loaded = client.deserialize(_Response(document), model)
    assert client.sanitize_for_serialization(loaded) == document


def test_every_container_runs_autodist_with_a_retryable_restart_policy():
    tfjob = _load("tfjob.yaml")
    for role, replica in tfjob["spec"]["tfReplicaSpecs"].items():
        assert replica["restartPolicy"] == "ExitCode"
        container, = replica["template"]["spec"]["containers"]
        assert container["name"] == "tensorflow" and container["command"][:2] == ["autodist", "run"]
    launcher = _load("mpijob.yaml")["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    command = launcher["command"]
    assert command[0] == "mpirun" and command[command.index("autodist"):][:2] == ["autodist", "run"]
    assert any(item.startswith("AUTODIST_CHIEF_ADDRESS=") for item in command)
