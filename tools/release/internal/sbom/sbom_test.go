package sbom

import (
	"os/exec"
	"strings"
	"testing"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// stubDetector answers MIT for every module and counts its calls: the
// real detector (go-license-detector) takes minutes under -race, so
// TestSnapshot in cmd/ellipsis-release checks real detection, in a binary
// built without it.
type stubDetector struct{ n int }

func (d *stubDetector) Detect(path, version, dir string) ([]cdx.License, error) {
	d.n++
	return []cdx.License{{ID: "MIT"}}, nil
}

// Licences: declared for the project's modules and std, detected in the
// module cache for a dependency (zerolog, which this module requires, so
// it is in the cache), each module detected once per run; a module not in
// the cache gets none and a warning.
func TestLicenses(t *testing.T) {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	v, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/rs/zerolog").Output()
	if err != nil {
		t.Fatal(err)
	}
	zerolog := strings.TrimSpace(string(v))
	l := NewLicenser(strings.TrimSpace(string(out)))
	cd := &stubDetector{}
	l.detector = cd
	p := Project{ModulePrefix: "github.com/ellipsis-chat/ellipsis", License: "Apache-2.0", Source: "https://github.com/ellipsis-chat/ellipsis"}
	newBOM := func() *cdx.BOM {
		return &cdx.BOM{
			Metadata: &cdx.Metadata{Component: &cdx.Component{Name: "github.com/ellipsis-chat/ellipsis/services/gateway"}},
			Components: &[]cdx.Component{
				{Name: "github.com/ellipsis-chat/ellipsis/shared", Version: "v0.1.0"},
				{Name: "github.com/rs/zerolog", Version: zerolog},
				{Name: "example.com/not-in-the-cache", Version: "v1.0.0"},
				{Name: "std", Version: "go1.26.8"},
			},
		}
	}
	var warnings []string
	for range 2 {
		bom := newBOM()
		addLicenses(bom, p, l, func(s string) { warnings = append(warnings, s) })
		cs := *bom.Components
		if id := (*bom.Metadata.Component.Licenses)[0].License.ID; id != "Apache-2.0" {
			t.Fatalf("main component licence %s", id)
		}
		if id := (*cs[0].Licenses)[0].License.ID; id != "Apache-2.0" {
			t.Fatalf("shared: %s", id)
		}
		if cs[1].Evidence == nil || (*cs[1].Evidence.Licenses)[0].License.ID != "MIT" {
			t.Fatalf("zerolog: %+v", cs[1].Evidence)
		}
		if cs[2].Licenses != nil || cs[2].Evidence != nil {
			t.Fatalf("a module missing from the cache got a licence: %+v", cs[2])
		}
		if id := (*cs[3].Licenses)[0].License.ID; id != GoLicense {
			t.Fatalf("std: %s", id)
		}
	}
	if cd.n != 1 {
		t.Fatalf("zerolog detected %d times in two SBOMs, want once", cd.n)
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0], "example.com/not-in-the-cache@v1.0.0: no licence: not in the module cache") {
		t.Fatalf("warnings %q", warnings)
	}

	// Without a Licenser the declared ones are still set.
	bom := newBOM()
	addLicenses(bom, p, nil, func(s string) { t.Errorf("warned %s", s) })
	if (*bom.Components)[0].Licenses == nil || (*bom.Components)[1].Evidence != nil {
		t.Fatalf("without a Licenser: %+v", *bom.Components)
	}
}

func TestSerialNumber(t *testing.T) {
	a, b := serialNumber([]byte{1}), serialNumber([]byte{2})
	if a == b || a != serialNumber([]byte{1}) || len(a) != len("urn:uuid:")+36 || a[len("urn:uuid:")+14] != '5' {
		t.Fatalf("%s %s", a, b)
	}
}
