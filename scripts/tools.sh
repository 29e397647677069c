#!/usr/bin/env bash
# Builds the pinned development tools into ./bin: buf, protoc-gen-go,
# protoc-gen-go-grpc, protoc-gen-connect-go, staticcheck, grpcurl and
# nfpm. Versions are pinned by the tool directives of tools/go.mod,
# tools/buf/go.mod (buf needs newer protobuf internals than the pinned
# protoc-gen-go, hence its own module) and tools/nfpm/go.mod (nfpm, which scripts/release.sh packages with, has
# dependencies of its own that the other tools need not share).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
mkdir -p bin
(cd tools && GOBIN="$root/bin" go install tool)
(cd tools/buf && GOBIN="$root/bin" go install tool)
(cd tools/nfpm && GOBIN="$root/bin" go install tool)
echo "tools: $(ls bin | tr '\n' ' ')"
