package natsenv

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
)

// -prefix defaults to the deployment's ELLIPSIS_SUBJECT_PREFIX, and -h never
// prints the password of the URL in ELLIPSIS_NATS_URL.
func TestDeploymentFlags(t *testing.T) {
	t.Setenv("ELLIPSIS_SUBJECT_PREFIX", "acme")
	t.Setenv(natsconn.EnvURL, "nats://alice:pw-s3cret@127.0.0.1:4222")
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var usage bytes.Buffer
	fs.SetOutput(&usage)
	var d Deployment
	d.AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if d.Prefix != "acme" || d.URLs != "" {
		t.Fatalf("defaults %+v, want prefix acme and URLs from the environment at connect", d)
	}
	fs.PrintDefaults()
	if strings.Contains(usage.String(), "s3cret") {
		t.Fatalf("-h shows the password:\n%s", usage.String())
	}
	if err := fs.Parse([]string{"-nats", "nats://127.0.0.1:1", "-prefix", "p2"}); err != nil {
		t.Fatal(err)
	}
	if d.URLs != "nats://127.0.0.1:1" || d.Prefix != "p2" {
		t.Fatalf("parsed %+v", d)
	}

	t.Setenv("ELLIPSIS_SUBJECT_PREFIX", "")
	var e Deployment
	e.AddFlags(flag.NewFlagSet("y", flag.ContinueOnError))
	if e.Prefix != "ellipsis" {
		t.Fatalf("prefix without the environment %q, want ellipsis", e.Prefix)
	}
}
