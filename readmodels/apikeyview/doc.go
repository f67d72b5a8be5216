// Package apikeyview answers queries about API keys from the api_keys read
// model built by projections/projectors, and authenticates a presented key
// by its hash. It owns api_keys and consumer_offsets (schema/) and
// their write statements (writes.go, usage.go), which the projection and
// the usage consumer call.
package apikeyview
