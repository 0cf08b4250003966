"""The cost model on paper: scaling efficiency of GPU clusters nothing here can run (issue 14).

    python benchmarks/cost_paper.py           # ResNet-50 and BERT-large, 2-16 nodes x 8 GPUs, 10/25/100 Gbit/s
    python benchmarks/cost_paper.py --models resnet50 --gpus 4 --gpu-tflops 8 --gbits 25 --nodes 32 128

Graphs are described by their variables (exact layer shapes) and their float
operations per example, so no TensorFlow is needed:

    resnet50    25.6 M parameters (53 conv + BN + fc), 4.1 G multiply-adds per 224x224 image, batch 64 per GPU
    bert_large  335 M parameters (24 layers, hidden 1024, vocabulary 30522), 128 tokens, batch 32 per GPU

One replica's step is 3 x 2 x multiply-adds x batch over ``--gpu-tflops``
(sustained rate, default 25: a V100 with mixed precision). The spec has 8 GPUs
per node; links of ``--gbits`` between nodes, NVLink (``--nvlink`` GB/s)
inside one; other constants are the calibration priors. Efficiency is one
GPU's step over the cluster's predicted step (weak scaling, per-GPU batch
fixed), for AllReduce, PSLoadBalancing (a server on every node's CPU, as
BytePS) and AutoStrategy's choice.
"""
import argparse
import dataclasses
import sys

from autodist.spec.resource_spec import ResourceSpec
from autodist.strategies import AllReduce, AutoStrategy, PSLoadBalancing
from autodist.strategies.cost import Compute, predict, prior_calibration
from autodist.strategies.inputs import BuilderVariable


def _var(name, *shape):
    size = 1
    for d in shape:
        size *= d
    return BuilderVariable(name + ":0", name, tuple(shape), "float32", 4 * size, False)


def resnet50():
    """ResNet-50's variables in graph order (convs without bias, BN gamma/beta, the classifier)."""
    variables = [_var("conv1", 7, 7, 3, 64), _var("bn1/gamma", 64), _var("bn1/beta", 64)]
    cin = 64
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
        for block in range(blocks):
            prefix = "s{}b{}".format(stage, block)
            for i, (k, a, b) in enumerate(((1, cin, width), (3, width, width), (1, width, 4 * width))):
                variables += [_var("{}/conv{}".format(prefix, i), k, k, a, b),
                              _var("{}/bn{}/gamma".format(prefix, i), b), _var("{}/bn{}/beta".format(prefix, i), b)]
            if block == 0:
                variables += [_var(prefix + "/shortcut", 1, 1, cin, 4 * width), _var(prefix + "/bns/gamma", 4 * width),
                              _var(prefix + "/bns/beta", 4 * width)]
            cin = 4 * width
    return variables + [_var("fc/kernel", 2048, 1000), _var("fc/bias", 1000)]


def bert_large():
    """BERT-large's variables: embeddings, 24 encoder layers, the pooler."""
    h, f = 1024, 4096
    variables = [_var("word_embeddings", 30522, h), _var("position_embeddings", 512, h), _var("type_embeddings", 2, h),
                 _var("emb_ln/gamma", h), _var("emb_ln/beta", h)]
    for layer in range(24):
        p = "layer{}/".format(layer)
        for name in ("query", "key", "value", "attention_output"):
            variables += [_var(p + name + "/kernel", h, h), _var(p + name + "/bias", h)]
        variables += [_var(p + "ln1/gamma", h), _var(p + "ln1/beta", h), _var(p + "intermediate/kernel", h, f),
                      _var(p + "intermediate/bias", f), _var(p + "output/kernel", f, h), _var(p + "output/bias", h),
                      _var(p + "ln2/gamma", h), _var(p + "ln2/beta", h)]
    return variables + [_var("pooler/kernel", h, h), _var("pooler/bias", h)]


#: name -> (variables, forward multiply-adds per example, batch per GPU)
MODELS = {"resnet50": (resnet50, 4.1e9, 64),
          "bert_large": (bert_large, 128 * 2 * 302e6 / 2, 32)}   # 2 FLOPs per non-embedding weight and token


def spec_of(nodes, gbits, gpus=8):
    data = {"nodes": [{"address": "10.0.0.{}".format(i + 1), "gpus": list(range(gpus)), "network_bandwidth": gbits,
                       **({"chief": True} if i == 0 else {"ssh_config": "lab"})} for i in range(nodes)],
            "ssh": {"lab": {"username": "u"}}}
    return ResourceSpec.from_dict(data, path="<{} nodes x {} GPUs, {} Gbit/s>".format(nodes, gpus, gbits))


def efficiencies(model, nodes, gbits, tflops, nvlink, gpus=8):
    make, macs, batch = MODELS[model]
    variables = make()
    spec = spec_of(nodes, gbits, gpus)
    calibration = dataclasses.replace(prior_calibration(spec), local_bandwidth=nvlink * 1e9, flops=tflops * 1e12)
    compute = Compute(3 * 2 * macs * batch / calibration.flops, source="estimate", batch=batch)
    single = compute.step_s
    found = {}
    for name, builder in (("AllReduce", AllReduce()), ("PSLoadBalancing", PSLoadBalancing())):
        found[name] = single / predict(builder.build_from_variables(variables, spec), variables, compute,
                                       calibration).step_s
    auto = AutoStrategy(calibration=calibration).search_variables(variables, spec, compute, calibration)
    found["AutoStrategy"] = single / auto.prediction.step_s
    return found, auto.chosen, single


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--gbits", type=float, nargs="+", default=[10, 25, 100])
    parser.add_argument("--gpu-tflops", type=float, default=25.0)
    parser.add_argument("--nvlink", type=float, default=100.0, help="GB/s between the GPUs of one node")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    args = parser.parse_args(argv)
    print("{:<11} {:>5} {:>7} {:>10} {:>10} {:>10}  {}".format("model", "nodes", "Gbit/s", "AllReduce", "PS-LB",
                                                                "Auto", "AutoStrategy's choice"))
    for model in args.models:
        for gbits in args.gbits:
            for nodes in args.nodes:
                found, chosen, single = efficiencies(model, nodes, gbits, args.gpu_tflops, args.nvlink, args.gpus)
                print("{:<11} {:>5} {:>7g} {:>9.0%} {:>10.0%} {:>10.0%}  {} (one GPU's step {:.0f} ms)".format(
                    model, nodes, gbits, found["AllReduce"], found["PSLoadBalancing"], found["AutoStrategy"], chosen,
                    single * 1e3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
