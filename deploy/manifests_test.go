package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// composeFile is what the test reads of deploy/container/compose.yaml.
type composeFile struct {
	Services map[string]struct {
		Image       string   `yaml:"image"`
		SecurityOpt []string `yaml:"security_opt"`
		Command     []string `yaml:"command"`
		Volumes     []string `yaml:"volumes"`
		EnvFile     []string `yaml:"env_file"`
		Privileged  bool     `yaml:"privileged"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

// statefulSet is what the test reads of a Kubernetes StatefulSet.
type statefulSet struct {
	Kind string `yaml:"kind"`
	Spec struct {
		Replicas int `yaml:"replicas"`
		Template struct {
			Spec struct {
				HostUsers  *bool `yaml:"hostUsers"`
				Containers []struct {
					Args            []string `yaml:"args"`
					SecurityContext struct {
						ProcMount  string `yaml:"procMount"`
						Privileged bool   `yaml:"privileged"`
					} `yaml:"securityContext"`
					ReadinessProbe *struct{} `yaml:"readinessProbe"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// serveFlags lists the long flags `coily serve --help` documents (the
// release binary's), global ones included.
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	files := readArchive(t, filepath.Join(release(t), "coily_"+testVersion+"_linux_amd64.tar.gz"))
	out, err := exec.Command(extract(t, files, "coily"), "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("coily serve --help: %v\n%s", err, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["policy"] || !flags["state-dir"] {
		t.Fatalf("serve --help lists no --policy or --state-dir: %v", flags)
	}
	return flags
}

// checkArgs fails on an argument of `coily serve` that is no flag of it.
func checkArgs(t *testing.T, file string, args []string, flags map[string]bool) {
	t.Helper()
	if len(args) == 0 || args[0] != "serve" {
		t.Errorf("%s: arguments %q do not start with serve", file, args)
		return
	}
	for _, a := range args[1:] {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !flags[name] {
			t.Errorf("%s: %q is not a flag of coily serve", file, a)
		}
	}
}

// The compose file and the Kubernetes manifests parse, pass only flags
// `coily serve --help` has, give the one runtime setting the sandbox
// needs (an unmasked /proc), never --privileged, and keep the state on a
// volume with the config from /etc/coily.
func TestContainerManifests(t *testing.T) {
	flags := serveFlags(t)

	var c composeFile
	readYAML(t, "container/compose.yaml", &c)
	svc, ok := c.Services["coily"]
	if !ok {
		t.Fatal("compose.yaml has no coily service")
	}
	checkArgs(t, "compose.yaml", svc.Command, flags)
	if len(svc.Healthcheck.Test) < 2 || svc.Healthcheck.Test[0] != "CMD" || svc.Healthcheck.Test[1] != "/usr/bin/coily-health" {
		t.Errorf("compose.yaml: healthcheck %q, want [CMD /usr/bin/coily-health] (/readyz)", svc.Healthcheck.Test)
	}
	if !slices.Contains(svc.SecurityOpt, "unmask=/proc/*") || svc.Privileged {
		t.Errorf("compose.yaml: security_opt %q privileged %v, want unmask=/proc/* and not privileged", svc.SecurityOpt, svc.Privileged)
	}
	if !slices.ContainsFunc(svc.Volumes, func(v string) bool { return strings.HasSuffix(v, ":/var/lib/coily") }) ||
		!slices.ContainsFunc(svc.Volumes, func(v string) bool { return strings.Contains(v, ":/etc/coily") }) || len(svc.EnvFile) == 0 {
		t.Errorf("compose.yaml: volumes %q env_file %q, want the state and /etc/coily on volumes and an env file", svc.Volumes, svc.EnvFile)
	}

	for _, tc := range []struct {
		file     string
		replicas int
		etcd     bool
	}{{"container/coily-statefulset.yaml", 1, false}, {"container/coily-etcd-statefulset.yaml", 2, true}} {
		var s statefulSet
		readYAML(t, tc.file, &s)
		spec := s.Spec.Template.Spec
		if s.Kind != "StatefulSet" || s.Spec.Replicas != tc.replicas || len(spec.Containers) != 1 {
			t.Errorf("%s: kind %q replicas %d containers %d", tc.file, s.Kind, s.Spec.Replicas, len(spec.Containers))
			continue
		}
		ctr := spec.Containers[0]
		checkArgs(t, tc.file, ctr.Args, flags)
		if ctr.SecurityContext.ProcMount != "Unmasked" || spec.HostUsers == nil || *spec.HostUsers || ctr.SecurityContext.Privileged {
			t.Errorf("%s: procMount %q hostUsers %v privileged %v, want Unmasked in a user namespace, not privileged",
				tc.file, ctr.SecurityContext.ProcMount, spec.HostUsers, ctr.SecurityContext.Privileged)
		}
		if ctr.ReadinessProbe == nil {
			t.Errorf("%s: no readiness probe", tc.file)
		}
		hasEtcd := slices.ContainsFunc(ctr.Args, func(a string) bool { return strings.HasPrefix(a, "--state=etcd://") })
		if hasEtcd != tc.etcd {
			t.Errorf("%s: --state=etcd:// given %v, want %v", tc.file, hasEtcd, tc.etcd)
		}
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
