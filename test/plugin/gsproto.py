"""Python stubs for gshare's protos, generated at test time.

Compiled from proto/*.proto with Debian's grpc_tools (a different protobuf
and gRPC implementation than the plugin's protobuf-c + C core), so a wire
mistake on one side cannot cancel itself out on the other.
"""
import importlib
import os
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROTOS = ["deviceplugin_v1beta1.proto", "podresources_v1.proto", "gshare.proto"]


def generate(tmpdir, protos):
    """Generates the stubs of proto/<protos> into tmpdir/pyproto, on sys.path."""
    out = os.path.join(tmpdir, "pyproto")
    os.makedirs(out, exist_ok=True)
    subprocess.run(["/usr/bin/python3", "-m", "grpc_tools.protoc", "-I" + os.path.join(REPO, "proto"),
                    "--python_out=" + out, "--grpc_python_out=" + out] + list(protos), check=True)
    if out not in sys.path:
        sys.path.insert(0, out)


def load(tmpdir):
    """Generates the stubs into tmpdir/pyproto and returns a namespace with
    dp (device plugin), dp_grpc, pr (pod resources), ctl (gshare control)."""
    generate(tmpdir, PROTOS)

    class NS:
        dp = importlib.import_module("deviceplugin_v1beta1_pb2")
        dp_grpc = importlib.import_module("deviceplugin_v1beta1_pb2_grpc")
        pr = importlib.import_module("podresources_v1_pb2")
        ctl = importlib.import_module("gshare_pb2")
    return NS
