// Package apikeyview answers queries about API keys from the api_keys read
// model built by projections/projectors, and authenticates a presented key
// by its hash.
package apikeyview
