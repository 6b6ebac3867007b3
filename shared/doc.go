// Package shared is the root of the Ellipsis shared module: what the gateway,
// the presence worker, the tools and outside platform services must agree on.
//
//   - [github.com/ellipsis-chat/ellipsis/shared/protocol]: client frames, server
//     events, NATS commands and snapshot messages, their codec and validation.
//   - [github.com/ellipsis-chat/ellipsis/shared/names]: enc() and every Redis
//     key, Pub/Sub channel and NATS subject name.
//   - [github.com/ellipsis-chat/ellipsis/shared/config]: configuration from
//     environment variables and flags, with Validate, from one table of
//     settings (settings.go) that also writes docs/configuration.md's table.
//   - [github.com/ellipsis-chat/ellipsis/shared/logging]: zap logger setup.
//   - [github.com/ellipsis-chat/ellipsis/shared/ratelog]: log lines rate-limited
//     per kind (both services).
//   - [github.com/ellipsis-chat/ellipsis/shared/admin]: the admin listener
//     (/healthz, /readyz with one JSON shape, /metrics) of both services.
//   - [github.com/ellipsis-chat/ellipsis/shared/run]: the one shape of the
//     services' mains (-version, configuration, logger, signals, graceful
//     shutdown, exit codes).
//   - [github.com/ellipsis-chat/ellipsis/shared/natsconn]: the services' one
//     NATS connection setup and credentials (.creds, NKey, mutual TLS), and
//     their NATS metric pair (nats_errors_total, nats_connected).
//   - [github.com/ellipsis-chat/ellipsis/shared/jwksurl]: where a JWKS may be
//     fetched from (https, or http to a loopback host), for config's
//     ELLIPSIS_JWKS_URL and the gateway's redirects.
//   - [github.com/ellipsis-chat/ellipsis/shared/promreg]: Prometheus
//     registration, refusing or reusing a duplicate collector.
//
// The module never imports a service.
package shared
