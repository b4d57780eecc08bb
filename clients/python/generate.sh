#!/bin/sh
# Regenerates the gRPC stubs of proto/sluice/v1/sluice.proto into sluice/_pb (or into $1), with
# Debian's protoc and grpc_tools (apt-get install protobuf-compiler python3-grpc-tools), and makes their import of sluice_pb2
# package-relative. tests/test_generated.py runs this into a temporary directory and compares.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$here/sluice/_pb}
python=${PYTHON:-/usr/bin/python3}
mkdir -p "$out"
# The messages with Debian's protoc (protobuf-compiler, the one the Go stubs are made with): its
# code loads on protobuf 3.20 and later, from Debian or PyPI; grpc_tools' own protoc is 3.5, whose
# code protobuf 4 refuses. The service stubs, plain Python, with grpc_tools' plugin.
protoc -I "$root/proto/sluice/v1" --python_out="$out" sluice.proto
"$python" -m grpc_tools.protoc -I "$root/proto/sluice/v1" --grpc_python_out="$out" sluice.proto
# The plugin writes "import sluice_pb2 as sluice__pb2", which finds the module only on sys.path.
sed 's/^import sluice_pb2 as sluice__pb2$/from . import sluice_pb2 as sluice__pb2/' \
	"$out/sluice_pb2_grpc.py" >"$out/sluice_pb2_grpc.py.tmp"
mv "$out/sluice_pb2_grpc.py.tmp" "$out/sluice_pb2_grpc.py"
