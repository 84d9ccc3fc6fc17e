// Package api holds the HTTP contract of smsgw, embedded so that the gateway
// serves exactly the file in the repository at /openapi.yaml.
package api

import _ "embed"

// OpenAPI is api/openapi.yaml as written.
//
//go:embed openapi.yaml
var OpenAPI []byte
