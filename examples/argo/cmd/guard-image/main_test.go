package main

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/finale-dev/finale/internal/ociimage"
)

const module = "../.."

// TestGuardImage builds the image as `make guard-image` does and checks
// what a cluster would run: the index names the image and tag the
// Deployment pulls, the config runs /guard as the Deployment's user, and
// /guard, taken out of the layer, is a static binary that runs (--help).
func TestGuardImage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Fatalf("the image's binary is for linux and this test runs it; GOOS is %s", runtime.GOOS)
	}
	dir := filepath.Join(t.TempDir(), "guard-image")
	var out bytes.Buffer
	if err := run([]string{"-o", dir, "-module", module}, &out); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	img, err := ociimage.Load(dir)
	if err != nil {
		t.Fatal(err)
	}

	var d appsv1.Deployment
	b, err := os.ReadFile(filepath.Join(module, "config", "manager", "manager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &d); err != nil {
		t.Fatal(err)
	}
	deployed := d.Spec.Template.Spec.Containers[0].Image
	wantAnn := map[string]string{ociimage.AnnotationImageName: deployed, ociimage.AnnotationRefName: ociimage.Tag(deployed)}
	if diff := cmp.Diff(wantAnn, img.Descriptor.Annotations); diff != "" {
		t.Errorf("the image's name and tag against the Deployment's image %s (-want +got):\n%s", deployed, diff)
	}
	wantRun := ociimage.RuntimeConfig{Entrypoint: []string{"/guard"}, User: "65532:65532", WorkingDir: "/"}
	if diff := cmp.Diff(wantRun, img.Config.Config); diff != "" {
		t.Errorf("runtime config (-want +got):\n%s", diff)
	}
	if img.Config.OS != "linux" || img.Config.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", img.Config.OS, img.Config.Architecture, runtime.GOARCH)
	}
	if fi, err := os.Stat(dir + ".tar"); err != nil || fi.Size() == 0 {
		t.Errorf("OCI archive %s.tar: %v", dir, err)
	}

	f, err := img.File("/guard")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "guard")
	if err := os.WriteFile(bin, f.Data, f.Mode); err != nil {
		t.Fatal(err)
	}
	if f.Mode&0o111 == 0 {
		t.Errorf("/guard has mode %s: not executable", f.Mode)
	}
	e, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range e.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("/guard asks for a dynamic loader: not static, and the image has no libc")
		}
	}
	_ = e.Close()
	cmd := exec.Command(bin, "--help")
	var help bytes.Buffer
	cmd.Stdout, cmd.Stderr = &help, &help
	if err := cmd.Run(); err != nil {
		t.Fatalf("/guard --help: %v\n%s", err, help.String())
	}
	for _, want := range []string{"guard uninstall", "-heartbeat-duration", "-kubeconfig"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("/guard --help lacks %q:\n%s", want, help.String())
		}
	}
}
