#!/bin/sh
# Regenerates the gRPC stubs of proto/sluice/v1/sluice.proto into sluice/_pb (or into $1), with
# Debian's grpc_tools (apt-get install python3-grpc-tools), and makes their import of sluice_pb2
# package-relative. tests/test_generated.py runs this into a temporary directory and compares.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$here/sluice/_pb}
python=${PYTHON:-/usr/bin/python3}
mkdir -p "$out"
"$python" -m grpc_tools.protoc -I "$root/proto/sluice/v1" \
	--python_out="$out" --grpc_python_out="$out" sluice.proto
# The plugin writes "import sluice_pb2 as sluice__pb2", which finds the module only on sys.path.
sed 's/^import sluice_pb2 as sluice__pb2$/from . import sluice_pb2 as sluice__pb2/' \
	"$out/sluice_pb2_grpc.py" >"$out/sluice_pb2_grpc.py.tmp"
mv "$out/sluice_pb2_grpc.py.tmp" "$out/sluice_pb2_grpc.py"
