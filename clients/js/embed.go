// Package webclient embeds the browser client of Ellipsis so the gateway can
// serve it: src/ellipsis.js (the ES module client) and demo/index.html (the
// demo chat page). The gateway serves demo/index.html at "/" and the src
// folder at "/src/".
package webclient

import "embed"

// FS holds demo/index.html and src/ellipsis.js, at those paths.
//
//go:embed demo src
var FS embed.FS

// IndexPath is the demo page inside [FS].
const IndexPath = "demo/index.html"
