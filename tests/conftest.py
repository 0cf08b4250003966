"""Shared test set-up.

TensorFlow's C++ logging is silenced for readable test output; this is the
test harness's choice, never the package's (importing autodist reads no
environment).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
