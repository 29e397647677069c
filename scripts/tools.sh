#!/usr/bin/env bash
# Builds the pinned development tools into ./bin: buf, protoc-gen-go,
# protoc-gen-go-grpc, staticcheck and grpcurl. Versions are pinned by the
# tool directives of tools/go.mod and tools/buf/go.mod (buf needs newer
# protobuf internals than the pinned protoc-gen-go, hence its own module).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
mkdir -p bin
(cd tools && GOBIN="$root/bin" go install tool)
(cd tools/buf && GOBIN="$root/bin" go install tool)
echo "tools: $(ls bin | tr '\n' ' ')"
