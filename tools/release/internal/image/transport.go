package image

import (
	"context"
	"io"
	"net/http"
	"time"
)

// TimeoutTransport bounds each request made through base, its response
// body included, by timeout: a registry that stalls mid-blob fails the
// request instead of hanging the release.
func TimeoutTransport(base http.RoundTripper, timeout time.Duration) http.RoundTripper {
	return timeoutTransport{base: base, timeout: timeout}
}

type timeoutTransport struct {
	base    http.RoundTripper
	timeout time.Duration
}

func (t timeoutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(req.Context(), t.timeout)
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose releases the request's timer when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
