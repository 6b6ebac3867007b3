// Command ellipsis-release builds an Ellipsis release into dist/: binaries
// for linux and darwin on amd64 and arm64 in .tar.gz archives, a CycloneDX
// SBOM for each, multi-arch OCI images as OCI layout archives, SHA256SUMS
// and artifacts.json (package release; docs/releasing.md).
//
//	make release-snapshot   # -snapshot: any commit, nothing published
//	make release            # a tagged, clean commit; pushes the images
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ellipsis-chat/ellipsis/tools/release"
	"github.com/ellipsis-chat/ellipsis/tools/release/internal/gitinfo"
	"github.com/ellipsis-chat/ellipsis/tools/release/internal/image"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ellipsis-release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("ellipsis-release", flag.ContinueOnError)
	root := fs.String("root", "../..", "the repository root")
	dist := fs.String("dist", "", "output directory (default <root>/dist)")
	snapshot := fs.Bool("snapshot", false, "build any commit, dirty or not, as VERSION <git describe>-snapshot; never push")
	push := fs.Bool("push", false, "push the image indexes to -image-repo (a release, not a snapshot)")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64", "binaries to build; images are made of the linux ones")
	services := fs.String("services", "gateway,presence-worker", "services to release")
	base := fs.String("base", "scratch", `image base: "scratch" (distroless static's files and -ca-certs, made here) or a reference to pull, e.g. gcr.io/distroless/static-debian12:nonroot`)
	caCerts := fs.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "PEM CA bundle for the scratch base (Debian's ca-certificates)")
	imageRepo := fs.String("image-repo", "ghcr.io/ellipsis-chat", "registry and namespace of the images: <repo>/ellipsis-<service>:<version>")
	licenses := fs.Bool("sbom-licenses", true, "detect each dependency's licence for the SBOMs (from the module cache)")
	goBin := fs.String("go", "go", "the go command that builds the binaries")
	timeout := fs.Duration("timeout", 5*time.Minute, "bound on each registry request (base image pull, image push), its body included")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *snapshot && *push {
		return errors.New("-snapshot and -push: a snapshot is never published")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	absRoot, err := filepath.Abs(*root)
	if err != nil {
		return err
	}
	gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	gi, err := gitinfo.Read(gctx, absRoot)
	cancel()
	if err != nil {
		return err
	}
	version, err := gi.Version(*snapshot)
	if err != nil {
		return err
	}
	plats, err := release.ParsePlatforms(*platforms)
	if err != nil {
		return fmt.Errorf("-platforms: %w", err)
	}
	svcs, err := pickServices(*services)
	if err != nil {
		return err
	}
	b, err := imageBase(*base, *caCerts, gi.CommitTime, *timeout)
	if err != nil {
		return err
	}
	modCache := ""
	if *licenses {
		if modCache, err = goEnv(ctx, *goBin, "GOMODCACHE"); err != nil {
			return err
		}
	}
	d := *dist
	if d == "" {
		d = filepath.Join(absRoot, "dist")
	}
	_, err = release.Run(ctx, release.Config{
		Root: absRoot, Dist: d, Version: version, Revision: gi.Revision, Created: gi.CommitTime,
		Services: svcs, Platforms: plats, Base: b, BaseName: *base,
		ImageRepo: *imageRepo, Push: *push, PushTimeout: *timeout, ModCache: modCache,
		Go: *goBin, Log: os.Stderr,
	})
	return err
}

func pickServices(list string) ([]release.Service, error) {
	var out []release.Service
	all := release.Services()
	for _, n := range strings.Split(list, ",") {
		i := slices.IndexFunc(all, func(s release.Service) bool { return s.Name == strings.TrimSpace(n) })
		if i < 0 {
			return nil, fmt.Errorf("-services: %q is not gateway or presence-worker", n)
		}
		out = append(out, all[i])
	}
	return out, nil
}

func imageBase(base, caCerts string, created time.Time, timeout time.Duration) (image.Base, error) {
	if base != "scratch" {
		return image.RemoteBase(base, timeout)
	}
	pem, err := os.ReadFile(caCerts)
	if err != nil {
		return nil, fmt.Errorf("-ca-certs: %w (install Debian's ca-certificates, or pass a PEM bundle)", err)
	}
	return image.ScratchBase(pem, created), nil
}

// goEnv reads one variable of `go env`.
func goEnv(ctx context.Context, goBin, key string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, goBin, "env", key).Output()
	if err != nil {
		return "", fmt.Errorf("%s env %s: %w", goBin, key, err)
	}
	v := strings.TrimSpace(string(out))
	if v == "" {
		return "", fmt.Errorf("%s env %s is empty", goBin, key)
	}
	return v, nil
}
