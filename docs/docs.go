// Package docs carries docs/openapi.yaml into the binary, so the schema
// cfgd serves is the one the tests check and the one in the repository.
// It lives next to the file because //go:embed cannot reach a parent
// folder.
package docs

import (
	_ "embed"
)

//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the OpenAPI document (YAML) describing cfgd's HTTP API.
// Each call gets its own copy, so no caller can change what others see.
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }
