package deploy

import "testing"

// The nats-creds component, added to the prod overlay, gives both services
// ELLIPSIS_NATS_CREDS pointing at the file it mounts read-only from the
// Secret ellipsis-nats-creds.
func TestNATSCredsComponent(t *testing.T) {
	r := renderWith(t, prodDir, natsCredsComp)
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
