// Package webclient embeds the browser client of Ellipsis so the gateway can
// serve it without a build step: src/ (the ES module SDK, plain JavaScript,
// entry src/ellipsis.js, types in src/ellipsis.d.ts), demo/index.html (the
// demo chat page) and package.json (for the SDK's version). The gateway
// serves the SDK at /sdk/v1/ and /sdk/{version}/ always, and, with the demo
// page on, demo/index.html at "/" and the src folder at "/src/". Tests,
// scripts and node_modules are not embedded.
package webclient

import (
	"embed"
	"encoding/json"
)

// FS holds demo/index.html, package.json and the src folder, at those paths.
//
//go:embed demo src package.json
var FS embed.FS

// IndexPath is the demo page inside [FS].
const IndexPath = "demo/index.html"

// SDKDir is the folder of the SDK's modules inside [FS].
const SDKDir = "src"

// Version is the SDK's version from package.json ("0.1.0"), or "" when
// package.json has none (the build then embeds a broken package.json, which
// the package tests refuse).
func Version() string {
	b, err := FS.ReadFile("package.json")
	if err != nil {
		return ""
	}
	var p struct {
		Version string `json:"version"`
	}
	if json.Unmarshal(b, &p) != nil {
		return ""
	}
	return p.Version
}
