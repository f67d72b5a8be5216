// Package modules assembles cfgd's capabilities. A module declares what it
// brings: HTTP routes, projections (each naming the tables it owns and
// whether it is a reactor), what is replayable, readiness checks, background
// runners and servers. cfgd serve, the CLI and the component tests
// (cmd/cfgd/authtest, grpctest) build the same modules here, so a test runs
// exactly the routes serve mounts.
package modules
