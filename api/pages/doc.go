// Package pages holds cfgd's pages for people and the assets they share: the
// front door (GET / with an index of what this server offers, JSON for
// programs and HTML for a browser; GET /api/schema/ with the OpenAPI
// document embedded from docs/; GET /api/docs/ rendering it with Swagger
// UI), the staff pages (the gRPC monitoring page and the task dashboard,
// templates/), the sign-in form they show to anyone not signed in, and the
// static assets (assets/) served from the binary with their cache headers.
package pages
