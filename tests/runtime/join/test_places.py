"""autodist.runtime.join.places and cluster: where a platform-started process is, from its environment alone."""
import json

import pytest

from autodist.errors import ResourceSpecError
from autodist.runtime.join.cluster import job_spec
from autodist.runtime.join.places import advertised_host, platform_started, resolve, route_address
from autodist.spec.resource_spec import ResourceSpec

CLUSTER = {"chief": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222", "10.0.0.3:2222"], "ps": ["10.0.0.9:2222"],
           "evaluator": ["10.0.0.8:2222"]}


def _tf_config(kind, index=0, **extra):
    return dict({"TF_CONFIG": json.dumps({"cluster": CLUSTER, "task": {"type": kind, "index": index}})}, **extra)


def test_tf_config_places_the_chief_first_and_leaves_out_evaluators_and_ps():
    place = resolve(_tf_config("worker", 1))
    assert (place.source, place.rank, place.size, place.chief) == ("TF_CONFIG", 2, 3, 0)
    assert place.servers == ("10.0.0.1:2222", "10.0.0.2:2222", "10.0.0.3:2222")
    spec = job_spec(place)
    assert [n.address for n in spec.node_specs] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"] and spec.chief == "10.0.0.1"
    with pytest.raises(ResourceSpecError, match="evaluator, which is not part of the training job"):
        resolve(_tf_config("evaluator"))
    with pytest.raises(ResourceSpecError, match="AUTODIST_INCLUDE_PS=1"):
        resolve(_tf_config("ps"))
    with_ps = resolve(_tf_config("ps", AUTODIST_INCLUDE_PS="1"))
    assert with_ps.rank == 3 and job_spec(with_ps).node_specs[3].gpus == ()


def test_two_tf_config_tasks_on_one_host_are_refused_naming_it():
    """One process per node drives the node's devices: a cluster of two tasks on a host is not an autodist job."""
    config = {"cluster": {"worker": ["a:1", "b:1", "a:2", "c:1", "c:2"]}, "task": {"type": "worker", "index": 1}}
    place = resolve({"TF_CONFIG": json.dumps(config)})
    with pytest.raises(ResourceSpecError, match=r"several processes of the job run on a, c: autodist runs one "
                                                r"process per node.*srun --ntasks-per-node=1, one replica per pod"):
        job_spec(place)


def test_worker_zero_is_the_chief_without_a_chief_task():
    config = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}
    place = resolve({"TF_CONFIG": json.dumps(config)})
    assert (place.rank, place.chief, place.chief_server) == (1, 0, "a:1")


def test_slurm_tasks_take_the_port_rule_and_one_task_per_host():
    environ = {"SLURM_PROCID": "1", "SLURM_NTASKS": "3", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n[1-3]",
               "AUTODIST_PORT": "30000"}
    assert platform_started(environ) == "Slurm"
    place = resolve(environ)
    assert place.servers == ("n1:30000", "n2:30001", "n3:30002") and place.rank == 1
    with pytest.raises(ResourceSpecError, match="4 tasks over 3 nodes, and SLURM_STEP_TASKS_PER_NODE does not say"):
        resolve(dict(environ, SLURM_NTASKS="4"))
    with pytest.raises(ResourceSpecError, match=r"several processes of the job run on n1 \(2 tasks\), n2 \(2 "
                                                r"tasks\), n3 \(2 tasks\): autodist runs one process per node"):
        resolve(dict(environ, SLURM_NTASKS="6"))
    assert platform_started(dict(environ, SLURM_NTASKS="1")) is None   # one task: the launcher mode's


# What srun set in each task on two hosts of ``autodist cluster up --slurm`` (Slurm 22.05): -m cyclic -w n2,n1
# runs task 0 on the first node of the step's list; -m arbitrary -w n2,n1 runs it on n2.
STEP = {"SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n[1-2]",
        "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "AUTODIST_PORT": "30000"}


@pytest.mark.parametrize("distribution", ["block", "cyclic", "plane=1", "cyclic:cyclic"])
def test_one_task_a_node_is_task_k_on_node_k_but_arbitrary(distribution):
    task = dict(STEP, SLURM_DISTRIBUTION=distribution, SLURM_PROCID="1", SLURMD_NODENAME="n2", SLURM_NODEID="1")
    place = resolve(task)
    assert place.servers == ("n1:30000", "n2:30001") and place.rendezvous is None
    with pytest.raises(ResourceSpecError, match="task 1 runs on n1, and the .* distribution of nodes n1, n2 puts "
                                                "it on n2"):
        resolve(dict(task, SLURMD_NODENAME="n1"))


def test_under_arbitrary_the_tasks_exchange_their_nodes_through_node_zero():
    chief = dict(STEP, SLURM_DISTRIBUTION="arbitrary", SLURM_PROCID="0", SLURMD_NODENAME="n2", SLURM_NODEID="1")
    place = resolve(chief)
    assert (place.servers, place.rendezvous, place.serves_rendezvous, place.host) == (None, "n1:30002", False, "n2")
    other = resolve(dict(chief, SLURM_PROCID="1", SLURMD_NODENAME="n1", SLURM_NODEID="0"))
    assert (other.rank, other.serves_rendezvous, other.host) == (1, True, "n1")
    with pytest.raises(ResourceSpecError, match="SLURM_STEP_TASKS_PER_NODE.*1,2 gives 3 tasks on 2 nodes, but the "
                                                "step has 2 tasks"):
        resolve(dict(chief, SLURM_STEP_TASKS_PER_NODE="1,2"))
    with pytest.raises(ResourceSpecError, match="SLURM_STEP_TASKS_PER_NODE.*expected Slurm's tasks per node"):
        resolve(dict(chief, SLURM_STEP_TASKS_PER_NODE="two"))


def test_mpi_needs_the_chiefs_address_and_learns_the_others_at_the_start():
    environ = {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"}
    with pytest.raises(ResourceSpecError, match="AUTODIST_CHIEF_ADDRESS"):
        resolve(environ)
    place = resolve(dict(environ, AUTODIST_CHIEF_ADDRESS="head", AUTODIST_PORT="30000"))
    assert place.servers is None and place.rendezvous == "head:30004" and (place.rank, place.size) == (2, 4)
    assert place.host is None and not place.serves_rendezvous   # its address: the route to the chief, found then
    chief = resolve(dict(environ, OMPI_COMM_WORLD_RANK="0", AUTODIST_CHIEF_ADDRESS="head"))
    assert chief.serves_rendezvous and chief.host == "head"


def test_a_ranks_address_is_its_interface_that_routes_to_the_exchange():
    place = resolve({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "AUTODIST_CHIEF_ADDRESS": "127.0.0.3"})
    assert advertised_host(place) == "127.0.0.1"   # loopback routes 127/8 from 127.0.0.1
    assert route_address("name.invalid", 9) is None   # a name that never resolves: the host's name instead
    named = resolve({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "AUTODIST_CHIEF_ADDRESS": "head",
                     "AUTODIST_ADVERTISE_ADDRESS": "node7"})
    assert advertised_host(named) == "node7"


def test_a_spec_file_and_a_node_address(tmp_path):
    path = tmp_path / "spec.yml"
    path.write_text("started_by: platform\nnodes:\n  - address: 10.0.0.1\n    chief: true\n  - address: 10.0.0.2\n")
    spec = ResourceSpec(str(path))
    place = resolve({"AUTODIST_NODE_ADDRESS": "10.0.0.2", "AUTODIST_PORT": "31000"}, spec)
    assert (place.rank, place.chief, place.servers) == (1, 0, ("10.0.0.1:31000", "10.0.0.2:31001"))
    with pytest.raises(ResourceSpecError, match="is not a node of"):
        resolve({"AUTODIST_NODE_ADDRESS": "10.0.0.7"}, spec)


def test_nothing_in_the_environment_is_said_plainly():
    assert platform_started({}) is None
    with pytest.raises(ResourceSpecError, match="found no job in the environment"):
        resolve({})
    with pytest.raises(ResourceSpecError, match="AUTODIST_PORT"):
        resolve(dict(_tf_config("worker"), SLURM_PROCID="0", AUTODIST_NODE_ADDRESS="x", AUTODIST_PORT="80"),
                ResourceSpec.from_dict({"started_by": "platform", "nodes": [{"address": "x"}]}))


def test_a_process_with_other_versions_than_the_chiefs_stops_naming_both():
    from autodist.runtime.join.exchange import JoinError
    from autodist.runtime.join.platform import Handoff, check_versions, platform_versions
    mine = platform_versions()
    check_versions(dict(mine), mine, "10.0.0.2", "10.0.0.1")
    chiefs = dict(mine, tensorflow="2.20.0")
    with pytest.raises(JoinError, match="10.0.0.2 runs autodist .* with TensorFlow .*, the chief 10.0.0.1 .* "
                                        "TensorFlow 2.20.0"):
        check_versions(chiefs, mine, "10.0.0.2", "10.0.0.1")
    handoff = Handoff(b"\x01\x02", {"nodes": []}, None, {"AUTODIST_RESTORE": "1"}, mine, {"digest": "d"})
    assert Handoff.decode(handoff.encode()) == handoff


def _slurm(procid, ntasks):
    return {"SLURM_PROCID": procid, "SLURM_NTASKS": ntasks, "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n[1-3]"}


@pytest.mark.parametrize("environ, key, says", [
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:0", "b:2222"]}, "task": {"type": "worker", "index": 0}})},
     "cluster.worker[0]", "port 0 of 'a:0' is not a TCP port (1 to 65535)"),                  # hung silently
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:99999"]}, "task": {"type": "worker", "index": 0}})},
     "cluster.worker[0]", "port 99999 of 'a:99999' is not a TCP port"),                      # wrapped to 34463
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": "0"}})},
     "TF_CONFIG task.index", "expected a task index, a whole number >= 0, got '0'"),        # "worker 0 does not train"
    (_slurm("3", "3"), "SLURM_PROCID", "must be from 0 to 2 (SLURM_NTASKS is 3), got 3"),    # a raw IndexError
    (_slurm("-1", "3"), "SLURM_PROCID", "must be from 0 to 2 (SLURM_NTASKS is 3), got -1"),  # accepted
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "0", "AUTODIST_CHIEF_ADDRESS": "a"},
     "OMPI_COMM_WORLD_SIZE", "the job's size must be 1 or more, got 0"),                       # a TensorFlow error
], ids=["tf-config-port-0", "tf-config-port-99999", "tf-config-index-text", "slurm-procid-too-large",
        "slurm-procid-negative", "mpi-size-0"])
def test_a_platforms_variables_out_of_range_are_named(environ, key, says):
    with pytest.raises(ResourceSpecError) as info:
        resolve(environ)
    assert info.value.key == key and says in str(info.value)


def test_autodist_run_says_it_in_one_line_and_exits_2(tmp_path):
    import os
    import subprocess
    import sys
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('the script ran')\n")
    env = dict(os.environ, **_slurm("5", "3"))
    done = subprocess.run([sys.executable, "-m", "autodist", "run", str(script)], env=env, capture_output=True,
                          text=True, timeout=120, cwd=str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "autodist: error: SLURM_PROCID: this process's rank must be from 0 to 2 " \
                                  "(SLURM_NTASKS is 3), got 5"
