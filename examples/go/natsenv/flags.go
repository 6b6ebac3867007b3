package natsenv

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/names"
)

// ConnectTimeout bounds how long an example command waits for its first
// NATS connection.
const ConnectTimeout = 5 * time.Second

// Deployment is the Ellipsis deployment an example command talks to: its
// NATS servers and its subject prefix, from the flags -nats and -prefix.
type Deployment struct {
	// URLs is -nats: NATS server URL(s), comma-separated; "" means
	// $ELLIPSIS_NATS_URL, else nats.DefaultURL (see Connect).
	URLs string
	// Prefix is -prefix: the deployment's ELLIPSIS_SUBJECT_PREFIX
	// (default $ELLIPSIS_SUBJECT_PREFIX, else names.DefaultSubjectPrefix,
	// "ellipsis").
	Prefix string
}

// AddFlags defines -nats and -prefix on fs, filling d when fs is parsed.
// -nats has no default in its text: -h would print the password of a URL
// taken from the environment.
func (d *Deployment) AddFlags(fs *flag.FlagSet) {
	prefix := os.Getenv("ELLIPSIS_SUBJECT_PREFIX")
	if prefix == "" {
		prefix = names.DefaultSubjectPrefix
	}
	fs.StringVar(&d.URLs, "nats", "", "NATS server URL(s), comma-separated (default $ELLIPSIS_NATS_URL, else "+nats.DefaultURL+")")
	fs.StringVar(&d.Prefix, "prefix", prefix, "subject prefix (ELLIPSIS_SUBJECT_PREFIX of the deployment)")
}

// Connect connects to d's NATS servers as name, with the services'
// credentials from the environment (Connect), waiting at most
// ConnectTimeout; errors show the URLs without password or token.
func (d *Deployment) Connect(name string) (*nats.Conn, error) {
	return Connect(d.URLs, name, ConnectTimeout)
}

// Fail prints "cmd: err" on standard error and exits with status 1.
func Fail(cmd string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", cmd, err)
	os.Exit(1)
}
