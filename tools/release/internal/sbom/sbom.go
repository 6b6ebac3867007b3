// Package sbom writes a CycloneDX software bill of materials for one built
// binary with cyclonedx-gomod's binary mode: the modules Go recorded in the
// binary (the exact set linked in for its platform, with their go.sum
// hashes) and the Go standard library of the toolchain that built it.
package sbom

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/CycloneDX/cyclonedx-gomod/pkg/generate/bin"
	"github.com/rs/zerolog"
)

// Options says what goes into the SBOM beyond the binary's modules.
type Options struct {
	// Version is the main component's version (the release's).
	Version string
	// Timestamp is metadata.timestamp (the commit time, so that two
	// builds of one commit give the same SBOM).
	Timestamp time.Time
	// Project names the repository's own modules (their path and
	// licence) and the source repository.
	Project Project
	// Licenser, when set, gives each dependency its licence (the
	// project's own modules and the standard library get theirs always), read from
	// the module cache where the build has put the module. Nothing is
	// downloaded.
	Licenser *Licenser
	// Log receives cyclonedx-gomod's warnings (a module it could not
	// fetch, say); nil drops them.
	Log io.Writer
}

// Write generates the SBOM of the binary at binPath and writes it to out as
// CycloneDX 1.6 JSON. The serial number is derived from the binary's SHA-256,
// so one binary always gets the same one. It needs the go command on PATH
// (cyclonedx-gomod reads the build info with `go version -m`).
func Write(binPath, out string, o Options) error {
	logger := zerolog.Nop()
	if o.Log != nil {
		logger = zerolog.New(zerolog.ConsoleWriter{Out: o.Log, NoColor: true, PartsExclude: []string{zerolog.TimestampFieldName}}).Level(zerolog.WarnLevel)
	}
	// cyclonedx-gomod's own licence detection runs `go mod download` on
	// every module, which fails as a whole on the binary's local
	// replacements (../../shared); addLicenses reads the cache instead.
	gen, err := bin.NewGenerator(binPath, bin.WithLogger(logger), bin.WithIncludeStdlib(true), bin.WithVersionOverride(o.Version))
	if err != nil {
		return fmt.Errorf("sbom of %s: %w", binPath, err)
	}
	bom, err := gen.Generate()
	if err != nil {
		return fmt.Errorf("sbom of %s: %w", binPath, err)
	}
	if err := nameOwnModules(bom, binPath, o.Version, o.Project); err != nil {
		return err
	}
	addLicenses(bom, o.Project, o.Licenser, func(msg string) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, "sbom %s: %s\n", out, msg)
		}
	})
	data, err := os.ReadFile(binPath)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	bom.SerialNumber = serialNumber(sum[:])
	bom.Metadata.Timestamp = o.Timestamp.UTC().Format(time.RFC3339)
	bom.Metadata.Tools = &cdx.ToolsChoice{Components: &[]cdx.Component{{
		Type: cdx.ComponentTypeApplication, Group: "CycloneDX", Name: "cyclonedx-gomod", Version: "v1.10.0",
	}}}
	// The binary itself, by hash, as the main component's.
	if bom.Metadata.Component != nil {
		bom.Metadata.Component.Hashes = &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: hex.EncodeToString(sum[:])}}
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	enc := cdx.NewBOMEncoder(f, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	// CycloneDX 1.6: the newest version that SBOM consumers widely read.
	if err := enc.EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		f.Close()
		return fmt.Errorf("sbom %s: %w", out, err)
	}
	return f.Close()
}

// serialNumber is an RFC 4122 name-based (version 5 layout) UUID URN made
// from the binary's hash: the same binary, the same serial number.
func serialNumber(binarySHA256 []byte) string {
	h := sha1.Sum(binarySHA256)
	u := h[:16]
	u[6] = (u[6] & 0x0f) | 0x50
	u[8] = (u[8] & 0x3f) | 0x80
	x := hex.EncodeToString(u)
	return fmt.Sprintf("urn:uuid:%s-%s-%s-%s-%s", x[0:8], x[8:12], x[12:16], x[16:20], x[20:32])
}
