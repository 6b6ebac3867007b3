package gateway

import (
	"crypto/sha256"
	"encoding/base64"
	"io/fs"
	"net/http"
	"path"
	"strings"

	webclient "github.com/ellipsis-chat/ellipsis/clients/js"
)

// SDK paths and their caching (docs/protocol.md, "The SDK over HTTP").
const (
	// sdkLinePrefix serves the newest SDK that speaks protocol v1; its
	// files change when the gateway is upgraded, so browsers revalidate
	// them after max-age (s).
	sdkLinePrefix = "/sdk/v1/"
	sdkLineCache  = "public, max-age=300"
	// sdkImmutableCache is for /sdk/{version}/ (the package.json version,
	// "0.1.0"): one release's files never change (RFC 8246).
	sdkImmutableCache = "public, max-age=31536000, immutable"
)

// sdkFiles serves the embedded SDK modules (clients/js/src) under a path
// prefix with a strong ETag (a SHA-256 of the file) so revalidation costs a
// 304, whatever ELLIPSIS_DEMO_PAGE says. CORS (withCORS) lets module
// scripts be imported from allowed origins: a cross-origin `import` is a
// CORS request.
type sdkFiles struct {
	fsys  fs.FS
	etags map[string]string // file name in fsys → `"<base64url sha256>"`
}

// newSDKFiles hashes every file of the SDK folder once; an embedded
// folder that cannot be read is a build defect, so it panics.
func newSDKFiles() *sdkFiles {
	sub, err := fs.Sub(webclient.FS, webclient.SDKDir)
	if err != nil {
		panic("gateway: embedded SDK: " + err.Error())
	}
	f := &sdkFiles{fsys: sub, etags: map[string]string{}}
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		f.etags[p] = `"` + base64.RawURLEncoding.EncodeToString(sum[:]) + `"`
		return nil
	})
	if err != nil {
		panic("gateway: embedded SDK: " + err.Error())
	}
	return f
}

// handler serves the files under prefix ("/sdk/v1/") with cacheControl;
// a name outside the SDK is a JSON 404.
func (f *sdkFiles) handler(prefix, cacheControl string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := path.Clean(strings.TrimPrefix(r.URL.Path, prefix))
		etag, ok := f.etags[name]
		if !ok {
			writeError(w, http.StatusNotFound, codeNotFound, "no such SDK file: "+r.URL.Path)
			return
		}
		h := w.Header()
		h.Set("ETag", etag)
		h.Set("Cache-Control", cacheControl)
		h.Set("X-Content-Type-Options", "nosniff")
		if strings.HasSuffix(name, ".js") {
			h.Set("Content-Type", "text/javascript; charset=utf-8")
		}
		// ServeFileFS answers If-None-Match against the ETag set above
		// (304) and Range requests.
		http.ServeFileFS(w, r, f.fsys, name)
	}
}

// routeSDK adds the SDK's routes to mux: /sdk/v1/ and /sdk/{version}/.
func routeSDK(mux *http.ServeMux) {
	f := newSDKFiles()
	mux.HandleFunc("GET "+sdkLinePrefix, f.handler(sdkLinePrefix, sdkLineCache))
	if v := webclient.Version(); v != "" {
		p := "/sdk/" + v + "/"
		mux.HandleFunc("GET "+p, f.handler(p, sdkImmutableCache))
	}
}
