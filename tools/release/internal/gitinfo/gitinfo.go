// Package gitinfo reads what a release is named after from the git
// checkout it is built from: the commit, its time, the tag on it and
// whether the work tree has changes.
package gitinfo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Info is the state of a checkout's HEAD.
type Info struct {
	// Revision is HEAD's full commit hash (40 hex digits).
	Revision string
	// CommitTime is HEAD's committer time: the release's timestamps (file
	// times in archives and layers, the image's created) so that two
	// builds of one commit give the same bytes.
	CommitTime time.Time
	// Tag is the tag that points at HEAD ("v0.1.0"), "" when none does.
	Tag string
	// Describe is `git describe --tags --always --dirty`:
	// "v0.1.0-3-ga5e364d", "a5e364d-dirty".
	Describe string
	// Dirty is true when tracked files differ from HEAD.
	Dirty bool
}

// Read runs git in dir (any directory of the checkout); each command is
// bounded by ctx. Errors name the git command that failed and its output.
func Read(ctx context.Context, dir string) (Info, error) {
	var in Info
	var err error
	if in.Revision, err = git(ctx, dir, "rev-parse", "HEAD"); err != nil {
		return in, err
	}
	ct, err := git(ctx, dir, "show", "-s", "--format=%ct", "HEAD")
	if err != nil {
		return in, err
	}
	secs, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return in, fmt.Errorf("git show --format=%%ct: %q is not a Unix time", ct)
	}
	in.CommitTime = time.Unix(secs, 0).UTC()
	if in.Describe, err = git(ctx, dir, "describe", "--tags", "--always", "--dirty"); err != nil {
		return in, err
	}
	status, err := git(ctx, dir, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return in, err
	}
	in.Dirty = status != ""
	// --exact-match fails when no tag points at HEAD: that is no error.
	if tag, err := git(ctx, dir, "describe", "--tags", "--exact-match", "HEAD"); err == nil {
		in.Tag = tag
	}
	return in, nil
}

// releaseTag is the form of a release tag: v, then semantic version 2.0.0
// (MAJOR.MINOR.PATCH and an optional pre-release such as -rc.1).
var releaseTag = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// ErrNotReleasable is wrapped by Version when a release (not a snapshot)
// is asked of a checkout that cannot be one.
var ErrNotReleasable = errors.New("not releasable")

// Version is the version a build of in is named: for a release, HEAD's tag,
// which must be a release tag (vMAJOR.MINOR.PATCH[-PRE]) on a clean tree;
// for a snapshot, Describe with "-snapshot" appended, so that no snapshot
// is mistaken for a release.
func (in Info) Version(snapshot bool) (string, error) {
	if snapshot {
		return in.Describe + "-snapshot", nil
	}
	if in.Tag == "" {
		return "", fmt.Errorf("%w: no tag points at HEAD %.12s (tag it, e.g. git tag -a v0.1.0, or make a snapshot)", ErrNotReleasable, in.Revision)
	}
	if !releaseTag.MatchString(in.Tag) {
		return "", fmt.Errorf("%w: tag %q is not vMAJOR.MINOR.PATCH[-PRERELEASE]", ErrNotReleasable, in.Tag)
	}
	if in.Dirty {
		return "", fmt.Errorf("%w: the work tree has uncommitted changes (git status)", ErrNotReleasable)
	}
	return in.Tag, nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}
