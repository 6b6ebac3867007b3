package gateway

import (
	"net/http"

	"github.com/rs/cors"
)

// corsMaxAgeSeconds is the Access-Control-Max-Age of a preflight answer:
// how long (s) a browser may reuse it. Chromium caps it at 7200 s, Firefox
// at 86400 s (Fetch standard, "CORS-preflight cache"); 600 s keeps a
// changed ELLIPSIS_ALLOWED_ORIGINS effective within ten minutes.
const corsMaxAgeSeconds = 600

// withCORS answers CORS (Fetch standard, "CORS protocol") for the origins
// that ELLIPSIS_ALLOWED_ORIGINS allows, the same rule as the WebSocket
// handshake's Origin check (internal/origin; docs/protocol.md, "CORS"):
//
//   - a GET from an allowed origin gets Access-Control-Allow-Origin echoing
//     that origin, and every answer Vary: Origin;
//   - a preflight (OPTIONS with Access-Control-Request-Method) from an
//     allowed origin for GET with an Authorization header gets 204 with
//     Access-Control-Allow-Methods, -Allow-Headers and -Max-Age;
//   - an origin that is not allowed gets no Access-Control-* header at all,
//     so the browser hides the answer from the page (a preflight still gets
//     204, without the headers, so it fails in the browser).
//
// No credentials (cookies) are allowed: the SDK sends its token in the
// Authorization header. rs/cors carries the preflight and Vary rules, which
// are easy to get subtly wrong by hand; the origin decision stays ours so
// both checks agree.
func (s *Server) withCORS(h http.Handler) http.Handler {
	c := cors.New(cors.Options{
		AllowOriginVaryRequestFunc: func(r *http.Request, _ string) (bool, []string) {
			return s.origins.Allowed(r), nil
		},
		AllowedMethods: []string{http.MethodGet, http.MethodHead},
		AllowedHeaders: []string{"Authorization"},
		MaxAge:         corsMaxAgeSeconds,
	})
	return c.Handler(h)
}
