// Package natsenv connects the example commands to NATS as the gateway and
// the presence worker do: through shared/natsconn, with the credentials of
// the same settings, read from the environment (docs/configuration.md):
// ELLIPSIS_NATS_CREDS, ELLIPSIS_NATS_NKEY, ELLIPSIS_NATS_TLS_CERT,
// ELLIPSIS_NATS_TLS_KEY, ELLIPSIS_NATS_TLS_CA. A user and password or a
// token go in the URL (nats://user:pass@host); no error shows them.
package natsenv

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
)

// Auth reads the NATS credential settings from the environment (empty:
// not used).
func Auth() natsconn.Auth {
	return natsconn.Auth{
		CredsFile: os.Getenv(natsconn.EnvCreds),
		NKeyFile:  os.Getenv(natsconn.EnvNKey),
		TLSCert:   os.Getenv(natsconn.EnvTLSCert),
		TLSKey:    os.Getenv(natsconn.EnvTLSKey),
		TLSCA:     os.Getenv(natsconn.EnvTLSCA),
	}
}

// Connect connects to urls (comma-separated; empty: ELLIPSIS_NATS_URL,
// else nats.DefaultURL, nats://127.0.0.1:4222) with
// [Auth], as the connection named name, and waits up to timeout for the
// first connection. It then reconnects by itself, for ever (natsconn's
// settings). Errors name the URLs redacted (natsconn.RedactURLs) and say
// why (a bad credentials file names its setting; a refusal is "nats:
// authorization violation"), never a password, token or key.
func Connect(urls, name string, timeout time.Duration) (*nats.Conn, error) {
	if urls == "" {
		urls = os.Getenv(natsconn.EnvURL)
	}
	if urls == "" {
		urls = nats.DefaultURL
	}
	c, err := natsconn.Connect(natsconn.Options{URLs: strings.Split(urls, ","), Name: name, Auth: Auth()})
	if err != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", natsconn.RedactURLs(urls), err)
	}
	for deadline := time.Now().Add(timeout); !c.Connected(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			status := c.Status()
			c.NC.Close()
			return nil, fmt.Errorf("connect to NATS %s: not connected within %s: %s", natsconn.RedactURLs(urls), timeout, status)
		}
	}
	return c.NC, nil
}
