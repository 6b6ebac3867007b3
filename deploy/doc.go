// Package deploy holds the Kubernetes deployment of Ellipsis (k8s/: a
// kustomize base and the dev and prod overlays) and, in its tests, the checks
// that need no cluster and no container engine:
//
//   - every overlay renders with the kustomize Go API (krusty) and every
//     object decodes strictly into the k8s.io/api types (unknown or duplicate
//     fields fail);
//   - every environment variable given to a service is a setting it reads
//     (config.EnvNames) or a Go runtime variable, and the settings of each
//     overlay pass config.Validate;
//   - probe paths and ports, container ports and Prometheus annotations are
//     ones the binaries serve (the config's listen addresses, the routes
//     registered in the services' source);
//   - security context, resources, shutdown timing, topology spread,
//     autoscalers, disruption budgets and NetworkPolicies are present and
//     consistent with each other;
//   - each Dockerfile copies every module its service needs (its go.mod
//     replace directives) and nothing else, in Online Boutique's stage order,
//     and .dockerignore excludes none of those files;
//   - skaffold.yaml validates against skaffold's JSON schema, its paths
//     exist, its artifacts are the images the manifests use and its port
//     forwards are ports the gateway Service has;
//   - the monitoring (monitoring/): the alerting rules parse with
//     Prometheus's rule parser and match the PrometheusRule prod renders,
//     the dashboard's queries parse as PromQL and use the datasource
//     variable, and every metric the two query is exported by the running
//     gateway and presence worker (built, started against the test Redis
//     and NATS, driven over a WebSocket, scraped);
//   - the real kustomize CLI (kustomize on PATH, or `go tool kustomize`,
//     pinned in go.mod) renders the same objects, and the real skaffold CLI
//     renders every profile when it is on PATH;
//   - docs/asyncapi.yaml, the machine-readable wire contract, agrees with
//     the Go protocol types (asyncapi_test.go): the Go decoders accept every
//     example and what the Go constructors produce validates against its
//     schemas (this module already holds the YAML and JSON Schema libraries).
//
// docs/deploy.md says how to use it.
package deploy
