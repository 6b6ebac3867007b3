package sbom

import (
	"debug/buildinfo"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/CycloneDX/cyclonedx-gomod/pkg/licensedetect"
	"github.com/CycloneDX/cyclonedx-gomod/pkg/licensedetect/local"
	"github.com/rs/zerolog"
	"golang.org/x/mod/module"
)

// Project names this repository's own modules and their licence.
type Project struct {
	// ModulePrefix is the module path every own module starts with
	// ("github.com/ellipsis-chat/ellipsis").
	ModulePrefix string
	// License is their SPDX licence ID ("Apache-2.0").
	License string
	// Source is the repository URL, the main component's vcs reference.
	Source string
}

// GoLicense is the SPDX ID of the Go standard library's licence.
const GoLicense = "BSD-3-Clause"

// nameOwnModules gives the repository's own modules, which the binary
// records as local replacements ("../../shared (devel)"), their module
// path and the release's version, and rewrites every reference to them.
func nameOwnModules(bom *cdx.BOM, binPath, version string, p Project) error {
	bi, err := buildinfo.ReadFile(binPath)
	if err != nil {
		return fmt.Errorf("build info of %s: %w", binPath, err)
	}
	byReplace := map[string]string{} // "../../shared" -> "github.com/ellipsis-chat/ellipsis/shared"
	for _, d := range bi.Deps {
		if d.Replace != nil && (d.Replace.Version == "" || d.Replace.Version == "(devel)") && strings.HasPrefix(d.Path, p.ModulePrefix) {
			byReplace[d.Replace.Path] = d.Path
		}
	}
	refs := map[string]string{}
	if bom.Components != nil {
		for i := range *bom.Components {
			c := &(*bom.Components)[i]
			path, ok := byReplace[c.Name]
			if !ok {
				continue
			}
			purl := fmt.Sprintf("pkg:golang/%s@%s?type=module", path, version)
			if i := strings.Index(c.PackageURL, "?"); i >= 0 {
				purl = fmt.Sprintf("pkg:golang/%s@%s%s", path, version, c.PackageURL[i:])
			}
			newRef := fmt.Sprintf("pkg:golang/%s@%s?type=module", path, version)
			refs[c.BOMRef] = newRef
			c.Name, c.Version, c.PackageURL, c.BOMRef = path, version, purl, newRef
		}
	}
	re := func(r string) string {
		if n, ok := refs[r]; ok {
			return n
		}
		return r
	}
	if bom.Dependencies != nil {
		for i := range *bom.Dependencies {
			d := &(*bom.Dependencies)[i]
			d.Ref = re(d.Ref)
			if d.Dependencies != nil {
				for j := range *d.Dependencies {
					(*d.Dependencies)[j] = re((*d.Dependencies)[j])
				}
			}
		}
	}
	if bom.Compositions != nil {
		for i := range *bom.Compositions {
			if ds := (*bom.Compositions)[i].Dependencies; ds != nil {
				for j := range *ds {
					(*ds)[j] = cdx.BOMReference(re(string((*ds)[j])))
				}
			}
		}
	}
	if m := bom.Metadata.Component; m != nil {
		m.ExternalReferences = &[]cdx.ExternalReference{{Type: cdx.ERTypeVCS, URL: p.Source}}
	}
	return nil
}

// Licenser detects the licences of modules in a module cache, remembering
// each module's, since every SBOM of a release lists mostly the same
// modules and a detection reads and scores every licence file (about 0.3 s
// a module). Not safe for concurrent use.
type Licenser struct {
	modCache string
	detector licensedetect.Detector
	found    map[string][]cdx.License // by module directory
}

// NewLicenser reads licences from the module cache modCache (GOMODCACHE).
func NewLicenser(modCache string) *Licenser {
	return &Licenser{modCache: modCache, detector: local.NewDetector(zerolog.Nop()), found: map[string][]cdx.License{}}
}

// detect returns path@version's licences from the module cache.
func (l *Licenser) detect(path, version string) ([]cdx.License, error) {
	dir, err := moduleDir(l.modCache, path, version)
	if err != nil {
		return nil, err
	}
	if ls, ok := l.found[dir]; ok {
		return ls, nil
	}
	ls, err := l.detector.Detect(path, version, dir)
	if err != nil {
		return nil, err
	}
	if len(ls) == 0 {
		return nil, fmt.Errorf("no licence file recognised in %s", dir)
	}
	l.found[dir] = ls
	return ls, nil
}

// addLicenses sets the licences: declared for the project's own modules
// (p.License) and the standard library (GoLicense), detected by l for
// every other module (as license evidence, cyclonedx-gomod's convention
// for detected licences); with l nil, other modules get none. A module l
// cannot tell is left without one and reported to warn.
func addLicenses(bom *cdx.BOM, p Project, l *Licenser, warn func(string)) {
	declared := func(id string) *cdx.Licenses {
		return &cdx.Licenses{{License: &cdx.License{ID: id, Acknowledgement: cdx.LicenseAcknowledgementDeclared}}}
	}
	if m := bom.Metadata.Component; m != nil {
		m.Licenses = declared(p.License)
	}
	if bom.Components == nil {
		return
	}
	for i := range *bom.Components {
		c := &(*bom.Components)[i]
		switch {
		case c.Name == "std":
			c.Licenses = declared(GoLicense)
			continue
		case strings.HasPrefix(c.Name, p.ModulePrefix):
			c.Licenses = declared(p.License)
			continue
		case l == nil || (c.Evidence != nil && c.Evidence.Licenses != nil):
			continue
		}
		found, err := l.detect(c.Name, c.Version)
		if err != nil {
			warn(fmt.Sprintf("%s@%s: no licence: %v", c.Name, c.Version, err))
			continue
		}
		ls := make(cdx.Licenses, len(found))
		for j := range found {
			ls[j] = cdx.LicenseChoice{License: &found[j]}
		}
		c.Evidence = &cdx.Evidence{Licenses: &ls}
	}
}

// moduleDir is where the module cache holds path@version's source.
func moduleDir(modCache, path, version string) (string, error) {
	ep, err := module.EscapePath(path)
	if err != nil {
		return "", err
	}
	ev, err := module.EscapeVersion(version)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(modCache, ep+"@"+ev)
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("not in the module cache (%s): run go mod download in the service's module", dir)
	}
	return dir, nil
}
