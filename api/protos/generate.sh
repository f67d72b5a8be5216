#!/usr/bin/env bash
# Regenerates the Go code of every .proto under api/protos with the pinned
# plugins (`make proto`). The versions are also checked by the staleness
# test in api/protos.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
BIN="${PROTO_BIN:-$(go env GOPATH)/bin}"
command -v protoc >/dev/null || { echo "protoc missing: apt-get install protobuf-compiler (deploy/scripts/local/stack.sh up installs it)" >&2; exit 1; }
GOBIN="$BIN" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
GOBIN="$BIN" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"
OUT="${PROTO_OUT:-.}"
mkdir -p "$OUT"
find cfgd -name '*.proto' -print0 | sort -z | xargs -0 protoc -I . \
	--plugin=protoc-gen-go="$BIN/protoc-gen-go" --plugin=protoc-gen-go-grpc="$BIN/protoc-gen-go-grpc" \
	--go_out="$OUT" --go_opt=paths=source_relative \
	--go-grpc_out="$OUT" --go-grpc_opt=paths=source_relative
