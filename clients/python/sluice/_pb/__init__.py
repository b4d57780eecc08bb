"""The generated gRPC stubs of proto/sluice/v1/sluice.proto (generate.sh writes them; do not edit)."""
