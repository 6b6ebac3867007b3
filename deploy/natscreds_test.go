package deploy

import (
	"os"
	"path/filepath"
	"testing"
)

// The nats-creds component, added to the prod overlay, gives both services
// ELLIPSIS_NATS_CREDS pointing at the file it mounts read-only from the
// Secret ellipsis-nats-creds.
func TestNATSCredsComponent(t *testing.T) {
	prod, err := filepath.Abs(prodDir)
	if err != nil {
		t.Fatal(err)
	}
	comp, err := filepath.Abs("k8s/components/nats-creds")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	relProd, err1 := filepath.Rel(dir, prod) // kustomize takes no absolute roots
	relComp, err2 := filepath.Rel(dir, comp)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " + relProd + "\ncomponents:\n  - " + relComp + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	r := render(t, dir)
	for _, svc := range services {
		d := r.deployments[svc.deployment]
		if d == nil {
			t.Fatalf("no Deployment %s", svc.deployment)
		}
		var path, mount string
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name != svc.name {
				continue
			}
			for _, e := range c.Env {
				if e.Name == "ELLIPSIS_NATS_CREDS" {
					path = e.Value
				}
			}
			for _, m := range c.VolumeMounts {
				if m.Name == "nats-creds" && m.ReadOnly {
					mount = m.MountPath
				}
			}
		}
		if path != "/etc/ellipsis/nats/user.creds" || mount != "/etc/ellipsis/nats" {
			t.Errorf("%s: ELLIPSIS_NATS_CREDS %q, read-only mount %q", svc.name, path, mount)
		}
		found := false
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == "nats-creds" && v.Secret != nil && v.Secret.SecretName == "ellipsis-nats-creds" &&
				len(v.Secret.Items) == 1 && v.Secret.Items[0].Key == "user.creds" && v.Secret.Items[0].Path == "user.creds" {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no volume nats-creds from the Secret ellipsis-nats-creds (key user.creds)", svc.name)
		}
	}
}
