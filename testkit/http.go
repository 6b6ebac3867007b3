package testkit

import (
	"io"
	"net/http"
	"testing"
)

// HTTPGet GETs url and returns the status code and the body; a failed
// request fails the test.
func HTTPGet(tb testing.TB, url string) (int, string) {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
