"""``autodist spec from-tf-config`` / ``from-slurm``: pure conversions and their thin CLI."""
import json
import re

import pytest
import yaml

from autodist import cli
from autodist.errors import ResourceSpecError
from autodist.spec.resource_spec import ResourceSpec
from autodist.spec.convert import (expand_counts, expand_hostlist, parse_tf_config, spec_from_slurm,
                                   spec_from_tf_config)

SSH = {"username": "trainer", "key_file": "~/.ssh/id_ed25519"}


def tf_config(cluster, task=None):
    return json.dumps({"cluster": cluster, "task": task or {"type": "worker", "index": 0}})


def addresses(data):
    return [n["address"] for n in data["nodes"]]


# -- hostlists -----------------------------------------------------------------------------------

@pytest.mark.parametrize("text, hosts", [
    ("node1", ["node1"]),
    ("a,b,c", ["a", "b", "c"]),
    ("gpu[01-03,07],cpu5", ["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("n[1,1-2],n1", ["n1", "n2"]),
    (" x[3] ", ["x3"]),
    ("10.0.0.[1-2]", ["10.0.0.1", "10.0.0.2"]),
], ids=["one", "list", "ranges-and-plain", "width-grows", "zero-padded", "two-groups", "duplicates",
        "spaces", "ip-suffix"])
def test_expand_hostlist(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text, problem", [
    ("", "not set"),
    ("gpu[01-03", "unbalanced '['"),
    ("gpu01-03]", "unbalanced ']'"),
    ("gpu[3-1]", "counts down"),
    ("gpu[a-b]", "bad range"),
    ("gpu[]", "bad range"),
    ("a,,b", "empty host name"),
    ("bad_host[1-2]", "hostname"),
], ids=["empty", "open", "close", "down", "letters", "empty-range", "empty-name", "invalid-name"])
def test_malformed_hostlists_name_the_problem(text, problem):
    with pytest.raises(ResourceSpecError, match=re.escape(problem)) as info:
        expand_hostlist(text)
    assert str(info.value).startswith("SLURM_JOB_NODELIST: ")


# -- TF_CONFIG -----------------------------------------------------------------------------------

def test_tf_config_chief_workers_and_gpus():
    data = spec_from_tf_config(tf_config({"chief": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222", "10.0.0.3:2222"],
                                          "ps": ["10.0.0.9:2222"], "evaluator": ["10.0.0.8:2222"]}),
                               gpus_per_node=2, ssh=SSH)
    assert addresses(data) == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert data["nodes"][0] == {"address": "10.0.0.1", "gpus": [0, 1], "chief": True}
    assert all(n["ssh_config"] == "cluster" for n in data["nodes"][1:])
    assert data["ssh"] == {"cluster": SSH}
    spec = ResourceSpec.from_dict(data)
    assert spec.chief == "10.0.0.1" and spec.num_gpus == 6


def test_tf_config_without_chief_uses_worker_zero_and_merges_tasks_of_one_host():
    data = spec_from_tf_config(tf_config({"worker": ["b.example:1", "a.example:1", "b.example:2"]}), ssh=SSH)
    assert addresses(data) == ["b.example", "a.example"]
    assert data["nodes"][0]["chief"] is True


def test_tf_config_legacy_master_ipv6_and_ps_nodes():
    data = spec_from_tf_config(tf_config({"master": ["[fd00::1]:2222"], "worker": ["[fd00::2]:2222"],
                                          "ps": ["[fd00::3]:2222"]}), gpus_per_node=1, ssh=SSH, include_ps=True)
    assert addresses(data) == ["fd00::1", "fd00::2", "fd00::3"]
    assert data["nodes"][2]["gpus"] == []          # parameter servers are CPU-only nodes
    ResourceSpec.from_dict(data)


def test_tf_config_on_one_machine_needs_no_ssh():
    data = spec_from_tf_config(tf_config({"chief": ["localhost:2222"], "worker": ["localhost:2223", "127.0.0.2:1"]}))
    assert addresses(data) == ["localhost", "127.0.0.2"] and "ssh" not in data
    ResourceSpec.from_dict(data)


@pytest.mark.parametrize("text, problem", [
    (None, "not set"),
    ("{not json", "not valid JSON"),
    ("[]", "cluster: missing"),
    (json.dumps({"cluster": {"worker": "a:1"}}), "cluster.worker: expected a list"),
    (json.dumps({"cluster": {"worker": ["a"]}}), r"cluster.worker\[0\]: expected \"host:port\""),
    (json.dumps({"cluster": {"worker": [7]}}), r"cluster.worker\[0\]: expected a \"host:port\" string"),
    (json.dumps({"cluster": {"trainer": ["a:1"]}}), "cluster.trainer: unknown task type"),
    (json.dumps({"cluster": {"ps": ["a:1"]}}), "no chief and no worker"),
    (json.dumps({"cluster": {"chief": ["a:1"], "master": ["b:1"]}}), "at most one chief"),
    (json.dumps({"cluster": {"worker": ["bad_host:1"]}}), "hostname"),
], ids=["unset", "json", "no-cluster", "not-list", "no-port", "not-string", "unknown-type", "ps-only",
        "two-chiefs", "bad-host"])
def test_malformed_tf_config_names_the_problem(text, problem):
    with pytest.raises(ResourceSpecError, match=problem) as info:
        spec_from_tf_config(text, ssh=SSH)
    assert str(info.value).startswith("TF_CONFIG: ")


def test_parse_tf_config_keeps_every_task_type():
    hosts = parse_tf_config(tf_config({"chief": ["c:1"], "worker": ["w:1"], "evaluator": ["e:1"]}))
    assert hosts == {"chief": ["c"], "worker": ["w"], "evaluator": ["e"]}


# -- Slurm ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("env, gpus", [
    ({"SLURM_GPUS_ON_NODE": "4"}, 4),
    ({"SLURM_GPUS_PER_NODE": "a100:2"}, 2),
    ({"SLURM_GPUS_PER_NODE": "a100:2,v100:1"}, 3),
    ({"CUDA_VISIBLE_DEVICES": "3,5"}, 2),
    ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, 0),
    ({}, 0),
    ({"SLURM_GPUS_ON_NODE": "1", "SLURM_GPUS_PER_NODE": "8", "CUDA_VISIBLE_DEVICES": "0,1"}, 1),
    ({"SLURM_JOB_GPUS": "1,3,4"}, 3),
], ids=["on-node", "typed", "two-types", "cuda-visible", "no-devices", "none", "precedence", "job-gpus"])
def test_slurm_gpus(env, gpus):
    data = spec_from_slurm(dict(env, SLURM_JOB_NODELIST="gpu[1-2]"), ssh=SSH)
    assert [n["gpus"] for n in data["nodes"]] == [list(range(gpus))] * 2


def test_slurm_nodes_chief_first_and_legacy_variable():
    data = spec_from_slurm({"SLURM_NODELIST": "gpu[01-02],cpu5", "SLURM_JOB_NUM_NODES": "3"}, ssh=SSH,
                           gpus_per_node=1)
    assert addresses(data) == ["gpu01", "gpu02", "cpu5"]
    assert data["nodes"][0]["chief"] is True and data["nodes"][0]["gpus"] == [0]
    assert ResourceSpec.from_dict(data).chief == "gpu01"


@pytest.mark.parametrize("text, count, counts", [
    ("4", 1, [4]),
    ("2(x3),1", 4, [2, 2, 2, 1]),
    ("36(x2)", 2, [36, 36]),
    ("1,8(x2),4", 4, [1, 8, 8, 4]),
])
def test_expand_counts(text, count, counts):
    assert expand_counts(text, count) == counts


@pytest.mark.parametrize("text, problem", [
    ("2(x3", "expected counts such as"),
    ("two", "expected counts such as"),
    ("2(x2)", "gives 2 node\\(s\\) but the allocation has 3"),
])
def test_malformed_counts_name_the_variable(text, problem):
    with pytest.raises(ResourceSpecError, match="SLURM_JOB_CPUS_PER_NODE: .*" + problem):
        expand_counts(text, 3)


def test_the_chief_is_the_node_autodist_runs_on_and_threads_are_its_cpus():
    data = spec_from_slurm({"SLURM_JOB_NODELIST": "n[01-03]", "SLURMD_NODENAME": "n02",
                            "SLURM_JOB_CPUS_PER_NODE": "4(x2),2"}, ssh=SSH)
    assert addresses(data) == ["n02", "n01", "n03"]
    assert [n.get("chief", False) for n in data["nodes"]] == [True, False, False]
    assert [n["threads"] for n in data["nodes"]] == [4, 4, 2]
    assert ResourceSpec.from_dict(data).chief == "n02"


@pytest.mark.parametrize("env, problem", [
    ({}, "SLURM_NODELIST: is empty or not set"),
    ({"SLURM_JOB_NODELIST": "n[1-2]", "SLURMD_NODENAME": "login1"}, "SLURMD_NODENAME: this node, 'login1', is not"),
    ({"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_CPUS_PER_NODE": "4"}, "SLURM_JOB_CPUS_PER_NODE: '4' gives 1"),
    ({"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "3"}, "lists 2 host"),
    ({"SLURM_JOB_NODELIST": "n1", "SLURM_GPUS_ON_NODE": "many"}, "SLURM_GPUS_ON_NODE: expected a GPU count"),
], ids=["no-allocation", "not-in-allocation", "cpus-mismatch", "count-mismatch", "bad-gpus"])
def test_malformed_slurm_environment(env, problem):
    with pytest.raises(ResourceSpecError, match=problem):
        spec_from_slurm(env, ssh=SSH)


# -- CLI -----------------------------------------------------------------------------------------

def test_cli_from_tf_config_writes_a_spec_that_validates(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TF_CONFIG", tf_config({"chief": ["10.0.0.1:1"], "worker": ["10.0.0.2:1"]}))
    out = tmp_path / "cluster.yml"
    assert cli.main(["spec", "from-tf-config", "--gpus-per-node", "2", "--ssh-username", "me",
                     "--ssh-key-file", "~/.ssh/k", "--python-venv", "source ~/venv/bin/activate",
                     "-o", str(out)]) == 0
    assert "ok: 2 nodes" in capsys.readouterr().out
    assert cli.main(["spec", "validate", str(out)]) == 0
    data = yaml.safe_load(out.read_text())
    assert data["ssh"]["cluster"]["username"] == "me"
    assert data["ssh"]["cluster"]["python_venv"] == "source ~/venv/bin/activate"
    assert out.read_text().startswith("# Written by `autodist spec from-tf-config`")


def test_cli_from_tf_config_option_wins_and_prints_to_stdout(monkeypatch, capsys):
    monkeypatch.setenv("TF_CONFIG", "garbage")
    assert cli.main(["spec", "from-tf-config", "--tf-config",
                     tf_config({"worker": ["127.0.0.1:1", "127.0.0.2:1"]})]) == 0
    data = yaml.safe_load(capsys.readouterr().out)
    assert addresses(data) == ["127.0.0.1", "127.0.0.2"]


def test_cli_from_slurm(tmp_path, monkeypatch, capsys):
    for key in ("SLURM_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_GPUS_PER_NODE",
                "CUDA_VISIBLE_DEVICES", "SLURMD_NODENAME", "SLURM_JOB_CPUS_PER_NODE", "SLURM_JOB_GPUS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[1-3]")
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "2")
    out = tmp_path / "slurm.yml"
    assert cli.main(["spec", "from-slurm", "--ssh-username", "me", "--accept-new-host-keys", "-o", str(out)]) == 0
    spec = ResourceSpec(str(out))
    assert spec.chief == "gpu1" and spec.num_gpus == 6
    assert spec.ssh_config_map["gpu2"].accept_new_host_keys is True


@pytest.mark.parametrize("argv, env, problem", [
    (["spec", "from-tf-config"], {"TF_CONFIG": "{"}, "autodist: error: TF_CONFIG: not valid JSON"),
    (["spec", "from-tf-config", "--tf-config", "{}"], {}, "autodist: error: --tf-config: cluster: missing"),
    (["spec", "from-slurm"], {"SLURM_JOB_NODELIST": "gpu[1-"}, "autodist: error: SLURM_JOB_NODELIST: unbalanced"),
    (["spec", "from-tf-config", "--tf-config", tf_config({"chief": ["127.0.0.1:1"], "worker": ["10.0.0.2:1"]})],
     {}, "autodist: error: <from-tf-config>: nodes"),
], ids=["bad-json", "no-cluster", "bad-hostlist", "mixed-loopback"])
def test_cli_malformed_input_exits_2_with_one_line(argv, env, problem, monkeypatch, capsys):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv("SLURM_NODELIST", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(problem) and err.count("\n") == 1


def test_cli_negative_gpu_count_is_a_usage_error(capsys):
    assert cli.main(["spec", "from-slurm", "--gpus-per-node", "-1"]) == 2
    assert "expected a non-negative integer" in capsys.readouterr().err


# -- unbounded inputs (issue 33, item 2) ---------------------------------------------------------------

# Runs one command with its address space capped at 1 GiB: a conversion that expands before checking
# the size ends in MemoryError (exit 1) or the timeout, instead of taking the test machine down.
BOUNDED = """import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from autodist.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("argv, env, problem", [
    (["from-slurm"], {"SLURM_JOB_NODELIST": "n[0-99999999999999999999]"},
     "SLURM_JOB_NODELIST: 'n[0-99999999999999999999]' names 100000000000000000000 hosts; a resource spec has at "
     "most 4096 nodes"),
    (["from-slurm"], {"SLURM_JOB_NODELIST": "r[1-100]-n[1-100]"}, "names 10000 hosts"),
    (["from-slurm"], {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_CPUS_PER_NODE": "2(x100000000)"},
     "SLURM_JOB_CPUS_PER_NODE: '2(x100000000)' gives 100000000 node(s) but the allocation has 2"),
    (["from-slurm"], {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_GPUS_ON_NODE": "100000000"},
     "SLURM_GPUS_ON_NODE: 100000000 GPUs per node; a resource spec has at most 1024 devices per node"),
    (["from-slurm", "--gpus-per-node", "100000000"], {"SLURM_JOB_NODELIST": "n[1-2]"},
     "--gpus-per-node: 100000000 GPUs per node"),
    (["from-tf-config", "--gpus-per-node", "100000000"], {"TF_CONFIG": tf_config({"worker": ["a:1", "b:1"]})},
     "--gpus-per-node: 100000000 GPUs per node"),
    (["from-tf-config"], {"TF_CONFIG": "[" * 30000 + "]" * 30000}, "TF_CONFIG: nested too deeply to read"),
    (["from-tf-config", "--tf-config", '{"cluster": {"worker": ["a:1"]}, "task": ' + "[" * 30000 + "]" * 30000
      + "}"], {}, "--tf-config: nested too deeply to read"),
], ids=["huge-range", "groups-multiply", "repeated-counts", "slurm-gpus", "slurm-gpus-option", "tf-config-gpus",
        "tf-config-deep", "tf-config-option-deep"])
def test_sizes_are_checked_before_anything_is_expanded(tmp_path, argv, env, problem):
    import os
    import subprocess
    import sys
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TF_CONFIG", "CUDA_VISIBLE"))}
    result = subprocess.run([sys.executable, "-c", BOUNDED, "spec"] + argv, capture_output=True, text=True,
                            timeout=60, env=dict(clean, **env), cwd=str(tmp_path))
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.startswith("autodist: error: ") and problem in result.stderr, result.stderr[-2000:]
    assert len(result.stderr.splitlines()) == 1
