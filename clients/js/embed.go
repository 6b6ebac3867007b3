// Package webclient embeds the browser client of Ellipsis so the gateway can
// serve it without a build step: src/ (the ES module SDK, plain JavaScript,
// entry src/ellipsis.js, types in src/ellipsis.d.ts) and demo/index.html
// (the demo chat page). The gateway serves demo/index.html at "/" and the
// src folder at "/src/". Tests, scripts and node_modules are not embedded.
package webclient

import "embed"

// FS holds demo/index.html and the src folder, at those paths.
//
//go:embed demo src
var FS embed.FS

// IndexPath is the demo page inside [FS].
const IndexPath = "demo/index.html"
