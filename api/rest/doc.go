// Package rest is cfgd's HTTP front: the router every REST package mounts
// on, the server that drains in-flight requests on shutdown, /healthz and
// /readyz, and the plumbing every handler shares (the JSON response and
// error shape of docs/api.md#errors, body decoding that turns every
// malformed input into a 400, the router's middleware). Each sub-package
// owns its endpoints and calls into commands (writes) and readmodels
// (reads).
package rest
