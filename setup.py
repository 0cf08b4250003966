"""Build hook: compile proto/*.proto into autodist/proto/*_pb2.py.

The generated modules are written into the source tree so that both
`pip install .` (copied into the wheel by build_py) and `pip install -e .`
(imported from the tree) see them.
"""
import glob
import os
import shutil
import tempfile

from setuptools import Command, setup
from setuptools.command.build_py import build_py
from setuptools.command.egg_info import egg_info

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildProtos(Command):
    """Compile the .proto sources with grpcio-tools' bundled protoc."""

    description = "compile proto/*.proto into autodist/proto"
    user_options = []

    def initialize_options(self):
        pass

    def finalize_options(self):
        pass

    def run(self):
        from grpc_tools import protoc  # a build requirement (pyproject.toml)

        sources = sorted(glob.glob(os.path.join(ROOT, "proto", "*.proto")))
        out_dir = os.path.join(ROOT, "autodist", "proto")
        with tempfile.TemporaryDirectory() as tmp:
            # The .proto files import each other as "autodist/proto/<name>.proto",
            # which is also the Python module path of the generated code.
            staged = os.path.join(tmp, "autodist", "proto")
            os.makedirs(staged)
            for src in sources:
                shutil.copy(src, staged)
            names = [os.path.join("autodist", "proto", os.path.basename(s)) for s in sources]
            gen = os.path.join(tmp, "gen")
            os.makedirs(gen)
            argv = ["protoc", "-I" + tmp, "--python_out=" + gen, "--pyi_out=" + gen] + names
            if protoc.main(argv) != 0:
                raise RuntimeError("protoc failed on " + ", ".join(names))
            for path in glob.glob(os.path.join(gen, "autodist", "proto", "*_pb2.py*")):
                shutil.copy(path, out_dir)


class BuildPyWithProtos(build_py):
    def run(self):
        self.run_command("build_protos")
        super().run()


class EggInfoWithProtos(egg_info):
    # Editable installs only run egg_info on some setuptools versions.
    def run(self):
        self.run_command("build_protos")
        super().run()


setup(cmdclass={"build_protos": BuildProtos, "build_py": BuildPyWithProtos, "egg_info": EggInfoWithProtos})
